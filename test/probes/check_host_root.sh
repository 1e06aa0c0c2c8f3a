#!/usr/bin/env bash
# The real binary on a captured host tree (--host-root): its JSON for the host-virtualization
# checks must equal the committed golden, and its table must be aligned and agree with the JSON.
# The tree holds no dev/, so the device checks have no device directory to look in and are
# UNKNOWN DevfsUnreadable, not FAIL (#17): this golden (expected-cli.json) differs from
# expected.json, which runs with the fake DeviceIo. Nothing else FAILs there: exit code 3.
# Regenerate: NODEGATE_UPDATE_GOLDEN=1 ctest -R probes_check_host_root, then review git diff.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}" "${NODEGATE_SRC:?source tree}"
scenario=intel-baremetal-vmx
root="$NODEGATE_SRC/test/fixtures/hosts/$scenario"
golden="$root/expected-cli.json"
tmp=$(mktemp -d /tmp/nodegate-hostroot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
checks='["cpu-virt","cpu-level","kvm-device","vhost-net","tun","kernel-modules","nested-virt","iommu","cgroups","hugepages"]'

rc=0
"$NODEGATE" check --host-root "$root" --output json >"$tmp/out.json" || rc=$?
[ "$rc" = 3 ] || { echo "FAIL: exit code $rc, want 3 (device checks UNKNOWN without a /dev, no FAIL)" >&2; exit 1; }
jq --arg root "$root" --argjson want "$checks" '
  [.checks[] | select(.check as $c | $want | index($c)) | del(.duration_seconds, .required, .blocks_gate, .runbook_url)]
  | walk(if type == "string" then gsub($root; "$ROOT") else . end)' "$tmp/out.json" >"$tmp/got.json"
[ "$(jq length "$tmp/got.json")" = 10 ] || { echo "FAIL: not all 10 host checks ran" >&2; exit 1; }
if [ -n "${NODEGATE_UPDATE_GOLDEN:-}" ]; then cp "$tmp/got.json" "$golden"; echo "updated $golden"; exit 0; fi
diff -u "$golden" "$tmp/got.json" || { echo "FAIL: --host-root JSON differs from $golden" >&2; exit 1; }

# Table: every row's STATUS and REASON start in the header's columns; statuses match the JSON.
rc=0
"$NODEGATE" check --host-root "$root" --color never >"$tmp/table.txt" || rc=$?
[ "$rc" = 3 ] || { echo "FAIL: table exit code $rc" >&2; exit 1; }
if grep -q $'\033' "$tmp/table.txt"; then echo "FAIL: colour codes with --color never" >&2; exit 1; fi
python3 - "$tmp/table.txt" "$tmp/out.json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
doc = json.load(open(sys.argv[2]))
head = lines[0]
cols = {k: head.index(k) for k in ("GATE", "STATUS", "REASON", "MESSAGE")}
want = {c["check"]: c for c in doc["checks"]}
rows = 0
footer = lines.index("")
for line in lines[1:footer]:
    if line.lstrip().startswith(("hint:", "runbook:")):
        assert line.index(line.lstrip()) == cols["REASON"], f"hint/runbook not under REASON: {line!r}"
        continue
    name = line[:cols["GATE"]].strip()
    gate = line[cols["GATE"]:cols["STATUS"]].strip()
    assert (gate == "req") == want[name]["required"], f"{name}: GATE {gate!r}, required {want[name]['required']}"
    if want[name]["status"] != "PASS":
        assert f"runbook: {want[name]['runbook_url']}" in "\n".join(lines), f"{name}: no runbook line"
    status = line[cols["STATUS"]:cols["REASON"]].strip()
    reason = line[cols["REASON"]:cols["MESSAGE"]].strip()
    assert line[cols["STATUS"] - 1] == " " and line[cols["REASON"] - 1] == " ", f"misaligned: {line!r}"
    assert name in want, f"unknown check row {name!r}"
    assert status == want[name]["status"], f"{name}: table {status} json {want[name]['status']}"
    assert reason == want[name]["reason"], f"{name}: table {reason} json {want[name]['reason']}"
    rows += 1
assert rows == len(want), f"{rows} rows for {len(want)} checks"
# The verdict names every blocker with its status and reason.
tail = lines[footer + 1:]
assert tail[0].startswith("GATE req: required by the gate policy"), tail
assert tail[1] == ("vm gate: OPEN" if doc["gate"]["open"] else "vm gate: CLOSED"), tail
blocked = [l for l in tail[2:] if l.startswith("  blocked by ")]
assert len(blocked) == len(doc["gate"]["blockers"]) > 0, tail
for b, l in zip(doc["gate"]["blockers"], blocked):
    assert l.startswith(f"  blocked by {b}: {want[b]['status']} {want[b]['reason']}"), l
print(f"ok: {rows} aligned rows, {len(blocked)} blockers named")
PY
