#!/usr/bin/env python3
"""The measuring side of tools/bench/density.sh: a long-lived helper the harness talks to over a
pipe (one command a line, one JSON answer a line), so a measurement starts the moment it is asked
for, without a Python start-up in between, and polls the agent from a process that is already
warm. Everything it reads is the kernel's or the agent's own account:

  mem PID              RSS, PSS, USS (smaps_rollup), threads, fds, netns fds, sockets, and RSS
                       by kind of mapping (smaps): heap (brk and anonymous: malloc's arenas and
                       the threads' stacks), bpf (the ring's pages, mapped twice), binary,
                       libraries (shared objects), other
  cpu PID              utime+stime in seconds and context switches over all threads
  hops                 the agent's traced paths (/api/v1/dns/traces): VMIs with all 4 launcher
                       hops, the shared (server-side) hops, all hops
  wait_hops N SECS     until exactly N VMIs are traced, each with 4 hops, and the shared side
                       with 2; seconds or -1
  discovery            the agent's hop discovery counters (rescans, event_rescans, full_rescans,
                       netns_listed, asked_by)
  wait_vmi VMI K SECS T0
                       until VMI has K hops (0: none left); milliseconds since T0 (epoch
                       seconds, bash's EPOCHREALTIME) or -1
  tracer               the tracer's counters (events, events_lost, ...)
  metric NAME [K=V...] the sum of a metric's samples whose labels include K=V; null if none
  series NAME          how many samples of a metric /metrics has (e.g. VMIs with a query count)
  bpf PID              the BPF programs and maps PID holds: memlock, JIT/xlated bytes, entries
  filters PID PREFIX   tc filters running PID's programs and clsact qdiscs without any filter,
                       on every device of every netns whose name starts with PREFIX
  prog_ids PID         the ids of the BPF programs PID holds
  filters_of ID,... PREFIX
                       the same for programs by id (after their holder exited)
  procs                processes on the host
  cycle                the agent's probe-cycle counters: cycles, their wall and CPU seconds
Usage: density_meter.py DEBUG_PORT METRICS_PORT (commands on stdin)."""
import http.client
import json
import os
import re
import subprocess
import sys
import time

DEBUG_PORT, METRICS_PORT = int(sys.argv[1]), int(sys.argv[2])


def get_status(port, path, timeout=5):
    """(HTTP status, body); (None, None) when the agent did not answer."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    except OSError:
        return None, None
    finally:
        c.close()


def get(port, path, timeout=5):
    status, body = get_status(port, path, timeout)
    return body if status == 200 else None


def mem(pid):
    out = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        k, _, v = line.partition(":")
        if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            out[k] = int(v.split()[0])
    netns = sockets = fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        netns += target.startswith("net:")
        sockets += target.startswith("socket:")
    return {"rss_kib": out["Rss"], "pss_kib": out["Pss"],
            "uss_kib": out["Private_Clean"] + out["Private_Dirty"],
            "threads": len(os.listdir(f"/proc/{pid}/task")), "fds": fds, "netns_fds": netns,
            "sockets": sockets, "rss_by_kind": rss_by_kind(pid)}


def rss_by_kind(pid):
    """KiB of RSS per kind of mapping, from /proc/PID/smaps (where the RSS is, not only how much)."""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    kinds = {"heap": 0, "bpf": 0, "binary": 0, "libraries": 0, "other": 0}
    kind = "other"
    for line in open(f"/proc/{pid}/smaps"):
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            name = head[5].strip() if len(head) > 5 else ""
            if name in ("", "[heap]") or name.startswith("[stack"):
                kind = "heap"
            elif "bpf" in name:
                kind = "bpf"
            elif name == exe:
                kind = "binary"
            elif ".so" in name:
                kind = "libraries"
            else:
                kind = "other"
        elif line.startswith("Rss:"):
            kinds[kind] += int(line.split()[1])
    return kinds


def cpu(pid):
    stat = open(f"/proc/{pid}/stat").read()
    f = stat[stat.rfind(")") + 2:].split()
    switches = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in open(f"/proc/{pid}/task/{t}/status"):
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return {"cpu_s": (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"), "switches": switches}


def traces():
    body = get(DEBUG_PORT, "/api/v1/dns/traces?limit=0")
    return json.loads(body) if body else None


def hops():
    j = traces()
    if j is None:
        return None
    full = shared = total = 0
    for v in j.get("vmis", []):
        n = len(v["hops"])
        total += n
        if v["vmi"] == "(shared)":
            shared = n
        elif n == 4:
            full += 1
    return {"vmis_traced": full, "shared_hops": shared, "hops": total,
            "vmis": len(j.get("vmis", [])) - (1 if shared else 0)}


def wait_hops(n, secs):
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        h = hops()
        if h and h["vmis_traced"] == n and h["vmis"] == n and h["shared_hops"] == 2:
            return round(time.monotonic() - t0, 3)
        time.sleep(0.05)
    return -1


def vmi_hops(vmi):
    # The route filters by VMI (the shared side comes along): a small answer at any node size.
    status, body = get_status(DEBUG_PORT, f"/api/v1/dns/traces?limit=0&vmi={vmi}")
    if status == 404:
        return 0  # no launcher on the node serves it (not yet, or no longer): nothing traced
    if status != 200:
        return None
    for v in json.loads(body).get("vmis", []):
        if v["vmi"] == vmi:
            return len(v["hops"])
    return 0


def wait_vmi(vmi, k, secs, t0):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if vmi_hops(vmi) == k:
            return round((time.time() - t0) * 1000, 1)
        time.sleep(0.005)
    return -1


def samples(name):
    body = get(METRICS_PORT, "/metrics")
    if body is None:
        return None
    out = []
    for line in body.decode().splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out.append((labels, float(m.group(3))))
    return out


def metric(name, *filters):
    s = samples(name)
    if s is None:
        return None
    want = dict(f.split("=", 1) for f in filters)
    hit = [v for labels, v in s if all(labels.get(k) == v for k, v in want.items())]
    return sum(hit) if hit else None


def cycle():
    # Full cycles only (every probe): a triggered one runs a probe or two.
    return {"cycles": metric("nodegate_agent_cycles_total", "scope=full"),
            "wall_s": metric("nodegate_agent_cycle_seconds_total", "scope=full"),
            "cpu_s": metric("nodegate_agent_cycle_cpu_seconds_total", "scope=full")}


def bpftool(*args):
    r = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def held_ids(pid, key):
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith(key + ":"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    return sorted(ids)


def bpf(pid):
    progs, maps = [], []
    for i in held_ids(pid, "prog_id"):
        p = bpftool("prog", "show", "id", str(i)) or {}
        progs.append({"name": p.get("name"), "type": p.get("type"),
                      "memlock": p.get("bytes_memlock", 0), "jited": p.get("bytes_jited", 0),
                      "xlated": p.get("bytes_xlated", 0)})
    for i in held_ids(pid, "map_id"):
        m = bpftool("map", "show", "id", str(i)) or {}
        entries = None
        if m.get("type") in ("hash", "lru_hash", "percpu_hash", "lru_percpu_hash"):
            d = bpftool("map", "dump", "id", str(i))
            entries = len(d) if d is not None else None
        maps.append({"name": m.get("name"), "type": m.get("type"),
                     "memlock": m.get("bytes_memlock", 0), "max_entries": m.get("max_entries"),
                     "entries": entries})
    return {"progs": progs, "maps": maps,
            "prog_memlock": sum(p["memlock"] for p in progs),
            "map_memlock": sum(m["memlock"] for m in maps),
            "hash_entries": sum(m["entries"] or 0 for m in maps)}


def tc_batch(ns, commands):
    """One `tc -j` process for many commands in netns ns: a JSON array per command, in order."""
    out = subprocess.run(["tc", "-j", "-n", ns, "-b", "-"], input="".join(c + "\n" for c in commands),
                         capture_output=True, text=True).stdout
    dec, pos, arrays = json.JSONDecoder(), 0, []
    while True:
        while pos < len(out) and out[pos].isspace():
            pos += 1
        if pos >= len(out):
            return arrays
        value, pos = dec.raw_decode(out, pos)
        arrays.append(value)


def filters(ours, prefix):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = bare_qdiscs = netns = 0
    for ns in [l.split()[0] for l in names.splitlines() if l.startswith(prefix)]:
        netns += 1
        qdiscs = tc_batch(ns, ["qdisc show"])
        devs = sorted({q["dev"] for q in (qdiscs[0] if qdiscs else []) if q.get("kind") == "clsact"})
        shows = tc_batch(ns, [f"filter show dev {d} {h}" for d in devs for h in ("ingress", "egress")])
        for i, d in enumerate(devs):
            per_dev = shows[2 * i:2 * i + 2]
            ids = [int(x) for a in per_dev for x in re.findall(r'"id":\s*(\d+)', json.dumps(a))]
            found += sum(1 for x in ids if x in ours)
            bare_qdiscs += not any(per_dev)  # clsact with no filter of anybody's left on it
    return {"filters": found, "bare_clsact": bare_qdiscs, "netns": netns}


def procs():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


def host_fds():
    """Open file descriptors of every process: what a scan of who holds BPF programs reads."""
    total = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                total += len(os.listdir(f"/proc/{d}/fd"))
            except OSError:
                pass
    return total


COMMANDS = {
    "mem": lambda pid: mem(int(pid)),
    "cpu": lambda pid: cpu(int(pid)),
    "hops": hops,
    "wait_hops": lambda n, secs: wait_hops(int(n), float(secs)),
    "wait_vmi": lambda vmi, k, secs, t0: wait_vmi(vmi, int(k), float(secs), float(t0)),
    "tracer": lambda: (traces() or {}).get("stats"),
    "discovery": lambda: (traces() or {}).get("discovery"),
    "metric": metric,
    "series": lambda name: len(samples(name) or []),
    "bpf": lambda pid: bpf(int(pid)),
    "filters": lambda pid, prefix: filters(set(held_ids(int(pid), "prog_id")), prefix),
    "prog_ids": lambda pid: held_ids(int(pid), "prog_id"),
    "filters_of": lambda ids, prefix: filters({int(i) for i in ids.split(",") if i}, prefix),
    "procs": procs,
    "host_fds": host_fds,
    "cycle": cycle,
}

for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    try:
        answer = COMMANDS[words[0]](*words[1:])
    except Exception as e:  # an answer for every question: the harness reads one line each
        answer = {"error": f"{words[0]}: {e}"}
    print(json.dumps(answer), flush=True)
