#!/usr/bin/env python3
"""Formats the measurements of tools/bench/density.sh (one JSON object a line, written as they are
taken) as the Markdown tables of docs/benchmarks/density.md, with the ratios across sizes worked
out from the same run. Usage: density_report.py RESULTS.jsonl"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def kind(k):
    return [r for r in rows if r["kind"] == k]


def one(k):
    found = kind(k)
    return found[0] if found else None


def window(text):
    """cpu_window's "cpu_s switches wall_s" -> (cpu_s, switches, wall_s)."""
    c, s, w = text.split()
    return float(c), int(s), float(w)


def cycle(text):
    """cycle_window's "cpu_s switches wall_s cycles cycle_wall_s cycle_cpu_s" -> the agent's own
    mean per cycle (wall ms, CPU ms, cycles) or None (older records, no cycles)."""
    f = (text or "").split()
    if len(f) < 6 or int(f[3]) == 0:
        return None
    n = int(f[3])
    return 1000 * float(f[4]) / n, 1000 * float(f[5]) / n, n


def disc(rec):
    """Discovery counters over a window: passes, full ones, netns listed, and what asked for them
    (rescans alone for records of agents that kept no more)."""
    a, b = rec.get("disc0"), rec.get("disc1")
    if not a or not b:
        return {"rescans": rec.get("rescans")}
    d = {k: b[k] - a[k] for k in ("rescans", "event_rescans", "full_rescans", "netns_listed",
                                  "pass_seconds") if k in b}
    d["asked_by"] = {k: b["asked_by"][k] - a["asked_by"][k] for k in b.get("asked_by", {})}
    return d


def asked(d):
    by = d.get("asked_by") or {}
    return ", ".join(f"{k} {v}" for k, v in by.items() if v) or ("none" if by else None)


def under_load(r):
    """A load record's differences over the load: agent CPU s, context switches, tracer events,
    events lost."""
    return (r["cpu1"]["cpu_s"] - r["cpu0"]["cpu_s"], r["cpu1"]["switches"] - r["cpu0"]["switches"],
            r["s1"]["events"] - r["s0"]["events"], r["s1"]["events_lost"] - r["s0"]["events_lost"])


def pct(cpu_s, wall_s):
    return 100 * cpu_s / wall_s if wall_s else None


def fmt(v, digits=1):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(head, body):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |"
            for r in body]
    return "\n".join(out)


machine, sizes = one("machine"), kind("size")
print(f"Run: kernel {machine['kernel']}, {machine['cpus']} CPUs, load average at the start "
      f"{machine['load_start']}, at the end {(one('end') or {}).get('load_end', '?')}.\n")
ne = machine.get("node_exporter")
if ne:
    print(f"node_exporter (prometheus-node-exporter, default collectors) in the same run: "
          f"RSS {ne['idle']['rss_kib']} KiB idle, {ne['scraped']['rss_kib']} KiB after 10 "
          f"scrapes (USS {ne['scraped']['uss_kib']} KiB, PSS {ne['scraped'].get('pss_kib', '?')} "
          f"KiB).\n")
    print("PSS counts a page mapped twice once: the tracer's ring buffer is (its data pages again "
          "after the end, for reads across the wrap), so the agent's RSS holds it twice.\n")

foreign = [s for s in sizes if s.get("foreign")]
if foreign:
    print("**Another test's virt-launcher processes ran during this run** (the agent traces every "
          "launcher on the host): " + ", ".join(f"{s['foreign']} at the end of the {s['n']}-VM "
                                                 "size" for s in foreign) + ".\n")

# --- memory, CPU at idle, attachments ------------------------------------------------------------
base = sizes[0]
body = []
for s in sizes:
    m, b = s["mem"], s["bpf"]
    marginal = None
    if s["n"] != base["n"]:
        marginal = (m["rss_kib"] - base["mem"]["rss_kib"]) / (s["n"] - base["n"])
    cpu_s, switches, wall = window(s["idle"])
    body.append([s["n"], s["procs"], s["traced_s"], m["rss_kib"], m.get("pss_kib"), m["uss_kib"],
                 marginal,
                 m["threads"], m["fds"], m["netns_fds"], s["filters"]["filters"],
                 b["prog_memlock"] // 1024, b["map_memlock"] // 1024,
                 pct(cpu_s, wall) if wall else None, switches / wall if wall else None]
                + [disc(s).get(k) for k in ("rescans", "full_rescans", "netns_listed")]
                + [asked(disc(s))])
print("### At idle, tracer on\n")
print(table(["VMs", "processes", "all traced after (s)", "RSS KiB", "PSS KiB", "USS KiB",
             f"RSS KiB per VM beyond {base['n']}", "threads", "fds", "netns fds", "tc filters",
             "BPF prog memlock KiB", "BPF map memlock KiB", "idle CPU % of a core",
             "wakeups/s", "rescans in the idle window", "of them full", "netns listed",
             "events that asked"], body))

after = {a["n"]: a for a in kind("after_load")}
if after:
    print("\nThe same agents after the DNS load below (finished traces retained for the dns-path window):\n")
    body = []
    for s in sizes:
        a = after.get(s["n"])
        if not a:
            continue
        cpu_s, switches, wall = window(a["idle"])
        st = a.get("settled") or {}
        body.append([s["n"], a["mem"]["rss_kib"], a["mem"].get("pss_kib"), a["mem"]["uss_kib"],
                     a["mem"]["rss_kib"] - s["mem"]["rss_kib"], pct(cpu_s, wall),
                     switches / wall if wall else None, st.get("rss_kib"), st.get("uss_kib")])
    print(table(["VMs", "RSS KiB", "PSS KiB", "USS KiB", "RSS growth KiB", "idle CPU %", "wakeups/s",
                 "RSS KiB after the idle window", "USS KiB"], body))
    kinds = ("heap", "bpf", "binary", "libraries", "other")
    body = []
    for s in sizes:
        a = after.get(s["n"])
        for when, m in (("idle", s["mem"]), ("after load", (a or {}).get("settled"))):
            if m and "rss_by_kind" in m:
                body.append([s["n"], when] + [m["rss_by_kind"][k] for k in kinds])
    if body:
        print("\nWhere the RSS is (KiB, /proc/PID/smaps by mapping): heap = brk and anonymous "
              "mappings (malloc's arenas, thread stacks); bpf = the ring's pages, mapped twice; "
              "after load = after the idle window that follows it.\n")
        print(table(["VMs", "when"] + list(kinds), body))

# --- probe cycle and check against the VM and process count --------------------------------------
print("\n### The probe cycle and `nodegate check` against VMs and processes\n")
print("A full cycle (every probe, after a SIGHUP) as the agent times it: "
      "`nodegate_agent_cycle_seconds_total` and `nodegate_agent_cycle_cpu_seconds_total` over "
      "`nodegate_agent_cycles_total` in the window.\n")
body = []
many = one("many_procs")
points = sizes + ([many] if many else [])
ref = sizes[0].get("dnspath_s")
ref_cycle = cycle(sizes[0].get("cycle"))
ref_check = sizes[0].get("check_s")
for s in points:
    d = s.get("dnspath_s")
    c = cycle(s.get("cycle"))
    ck = s.get("check_s")
    body.append([s["n"], s["procs"], c and c[2], c and c[0], c and ref_cycle and c[0] / ref_cycle[0],
                 c and c[1], c and ref_cycle and c[1] / ref_cycle[1], d and 1e6 * d,
                 ck and 1000 * ck, ck and ref_check and ck / ref_check])
print(table(["VMs", "processes", "cycles", "cycle wall ms", f"vs {sizes[0]['n']} VM",
             "cycle CPU ms", f"vs {sizes[0]['n']} VM", "dns-path check µs (last run)",
             "`nodegate check` wall ms (median of 3)", f"vs {sizes[0]['n']} VM"], body))

# --- DNS load -----------------------------------------------------------------------------------
loads = kind("load")
if loads:
    print("\n### DNS load spread over every guest\n")
    body = []
    for r in loads:
        bl = r["blast"]
        cpu, _, ev, lost = under_load(r)
        qps = bl["sent_per_s"]
        p = pct(cpu, bl["seconds"])
        body.append([r["n"], r["rate"], qps, bl["answered"] / bl["seconds"], bl["answered_min"],
                     ev / bl["seconds"], lost, p, p / (qps / 1000) if qps else None])
    print(table(["VMs", "offered queries/s", "sent/s", "answered/s", "fewest answers of one guest",
                 "tracer events/s", "events lost", "agent CPU %", "CPU % per 1k queries/s"],
                body))

# --- churn --------------------------------------------------------------------------------------
lat = kind("latency")
if lat:
    print("\n### A VM arriving and leaving beside N traced ones\n")
    cost = {c["n"]: c for c in kind("latency_cost")}
    body = []
    for n in sorted({r["n"] for r in lat}):
        at = [r for r in lat if r["n"] == n]
        row = [n, len(at)]
        for key in ("attach_ms", "detach_ms", "veth_gone_ms"):
            v = [r[key] for r in at if r[key] >= 0]
            row += [statistics.median(v) if v else None, max(v) if v else None]
        row.append(sum(r["left"]["filters"] for r in at))
        c = cost.get(n)
        d = disc(c) if c else {}
        row.append(1000 * c["cpu_s"] / d["rescans"] if d.get("rescans") else None)
        # The meter's polling alone over as long as it polled during the arrivals and departures.
        polled_s = sum(max(r["attach_ms"], 0) + max(r["detach_ms"], 0) for r in at) / 1000
        poll = c.get("poll_cpu_s") / c["poll_s"] * polled_s if c and c.get("poll_s") else None
        row.append(1000 * poll / d["rescans"] if poll is not None and d.get("rescans") else None)
        row.append(1000 * d["pass_seconds"] / d["rescans"]
                   if d.get("rescans") and "pass_seconds" in d else None)
        row += [d.get("rescans"), d.get("full_rescans"), d.get("netns_listed")]
        body.append(row)
    print(table(["VMs traced", "times", "exec → 4 hops traced: median ms", "max ms",
                 "exit → untraced: median ms", "max ms", "netns deleted → host veth gone: median ms",
                 "max ms", "filters left", "agent CPU ms per rescan", "of it the meter's polling",
                 "pass wall ms (agent's own timing)", "rescans", "of them full", "netns listed"],
                body))

rings = kind("ring")
if rings:
    print("\n### Events lost against the ring size, DNS load over every guest\n")
    print("One agent per ring size and repeat, interleaved; wakeups/s: the agent's context "
          "switches over the load, all threads.\n")
    body = []
    for r in rings:
        bl = r["blast"]
        cpu, sw, ev, lost = under_load(r)
        body.append([r["ring_kib"], r["rep"], r["n"], r["rate"], bl["sent_per_s"],
                     bl["answered"] / bl["seconds"], ev / bl["seconds"], lost,
                     100 * lost / (ev + lost) if ev + lost else None, pct(cpu, bl["seconds"]),
                     sw / bl["seconds"], r["mem"]["rss_kib"]])
    print(table(["ring KiB", "repeat", "VMs", "offered queries/s", "sent/s", "answered/s",
                 "tracer events/s", "events lost", "lost %", "agent CPU %", "wakeups/s",
                 "RSS KiB after"], body))

cyc = one("cycles")
if cyc:
    b, a = cyc["before"], cyc["after"]
    print(f"\n### {cyc['cycles']} create/destroy cycles beside {cyc['n']} traced VMs "
          f"({cyc['seconds']} s, waits timed out: {cyc['failed_waits']})\n")
    body = [["RSS KiB", b["rss_kib"], a["rss_kib"]], ["USS KiB", b["uss_kib"], a["uss_kib"]],
            ["fds", b["fds"], a["fds"]], ["netns fds", b["netns_fds"], a["netns_fds"]],
            ["threads", b["threads"], a["threads"]],
            ["tc filters", cyc["filters_before"]["filters"], cyc["filters_after"]["filters"]],
            ["bare clsact qdiscs", cyc["filters_before"]["bare_clsact"],
             cyc["filters_after"]["bare_clsact"]],
            ["BPF hash map entries", cyc["bpf_before"]["hash_entries"],
             cyc["bpf_after"]["hash_entries"]],
            ["traced hops", cyc["hops_before"]["hops"], cyc["hops_after"]["hops"]]]
    print(table(["", "before", "after"], body))
    rss = kind("cycle_rss")
    if rss:
        print("\nRSS KiB along the way: " +
              ", ".join(f"{r['cycle']}: {r['mem']['rss_kib']}" for r in rss) + ".")

restarts = kind("restart")
if restarts:
    print("\n### The agent killed (SIGKILL) and started again beside the traced VMs\n")
    print("The dead agent cannot detach: its filters keep running its programs until the new one, "
          "attaching, finds that no live process holds them (a read of every process's fds).\n")
    body = [[r["n"], r["procs"], r["host_fds"], r["stale_before"]["filters"], fmt(r["traced_s"], 2),
             r["stale_left"]["filters"], r["filters"]["filters"]]
            for r in restarts]
    print(table(["VMs", "processes", "fds of all processes", "dead agent's filters",
                 "all traced again after (s)", "dead agent's filters left then",
                 "new agent's filters"], body))

td = one("teardown")
if td:
    print(f"\nAll VMs gone: {td['hops']['hops']} hops traced (the shared side), "
          f"{td['mem']['netns_fds']} netns fds, {td['mem']['fds']} fds, RSS "
          f"{td['mem']['rss_kib']} KiB.")
