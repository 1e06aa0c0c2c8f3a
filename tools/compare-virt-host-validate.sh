#!/usr/bin/env bash
# Side by side with libvirt's `virt-host-validate qemu`: runs both on this host and prints, check
# by check, what each says. Every virt-host-validate line is mapped to the nodegate check that
# covers it; a line nodegate does not cover makes the script exit 1.
#
#   tools/compare-virt-host-validate.sh                     # run both here
#   tools/compare-virt-host-validate.sh --vhv-output FILE   # map a captured output (no nodegate run)
#   NODEGATE=build/nodegate tools/compare-virt-host-validate.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
nodegate=${NODEGATE:-$here/build/nodegate}
vhv_file=""
while [ $# -gt 0 ]; do
  case "$1" in
    --vhv-output) vhv_file=$2; shift 2 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "compare-virt-host-validate: unknown argument $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d /tmp/nodegate-compare-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

ng_json=""
if [ -z "$vhv_file" ]; then
  command -v virt-host-validate >/dev/null || { echo "virt-host-validate not installed (libvirt-clients)" >&2; exit 2; }
  [ -x "$nodegate" ] || { echo "no nodegate binary at $nodegate (set NODEGATE)" >&2; exit 2; }
  vhv_file=$tmp/vhv.txt
  virt-host-validate qemu >"$vhv_file" 2>&1 || true  # exits 1 when a check fails
  ng_json=$tmp/nodegate.json
  "$nodegate" check --output json >"$ng_json" || true
fi

python3 - "$vhv_file" "$ng_json" <<'PY'
import json, re, sys
vhv_path, ng_path = sys.argv[1], sys.argv[2]
# virt-host-validate's QEMU checks (libvirt tools/virt-host-validate-qemu.c and -common.c) and the
# nodegate check that covers each. LXC and BHYVE lines belong to other drivers: not compared.
MAP = [
    (r"for hardware virtualization", "cpu-virt"),
    (r"if device /dev/kvm exists", "kvm-device"),
    (r"if device /dev/kvm is accessible", "kvm-device"),
    (r"if device /dev/vhost-net exists", "vhost-net"),
    (r"if device /dev/net/tun exists", "tun"),
    (r"for cgroup '[a-z_]+' controller (support|mount-point)", "cgroups"),
    (r"for device assignment IOMMU support", "iommu"),
    (r"if IOMMU is enabled by kernel", "iommu"),
    (r"for secure guest support", "kvm-device"),  # evidence "secure guest support"
]
line_re = re.compile(r"^\s*(QEMU|LXC|BHYVE):\s*Checking (.*?)\s*:\s*(PASS|WARN|FAIL|NOTE)\b\s*(.*)$")
# One published capture has the prefix cut off; recognise the bare status + IOMMU note too.
bare_re = re.compile(r"^\s*(PASS|WARN|FAIL|NOTE)\s*\((.*IOMMU.*)\)\s*$")
ng = {}
if ng_path:
    for c in json.load(open(ng_path))["checks"]:
        ng[c["check"]] = c
rows, unmapped = [], []
for raw in open(vhv_path, errors="replace"):
    raw = raw.rstrip("\n")
    if not raw.strip():
        continue
    m = line_re.match(raw)
    if m:
        driver, what, status, detail = m.groups()
        if driver != "QEMU":
            continue
    else:
        b = bare_re.match(raw)
        if not b:
            unmapped.append(raw)
            continue
        what, status, detail = "for device assignment IOMMU support", b.group(1), "(" + b.group(2) + ")"
    target = next((c for pat, c in MAP if re.search(pat, what)), None)
    if target is None:
        unmapped.append(raw)
        continue
    rows.append((what, status, detail.strip("() "), target))

w = max([len(r[0]) for r in rows] + [10])
print(f"{'virt-host-validate qemu: Checking':<{w}}  {'VHV':<5} {'nodegate check':<15} nodegate")
for what, status, detail, target in rows:
    c = ng.get(target)
    mine = f"{c['status']} {c['reason']}" if c else ("(not run)" if not ng else "MISSING")
    print(f"{what:<{w}}  {status:<5} {target:<15} {mine}")
    if ng and not c:
        unmapped.append(f"nodegate did not report {target}")
if ng:
    extra = sorted(set(ng) - {r[3] for r in rows})
    print(f"\nnodegate checks beyond virt-host-validate: {' '.join(extra)}")
for u in unmapped:
    print(f"NOT COVERED: {u}", file=sys.stderr)
print(f"\n{len(rows)} virt-host-validate checks, {len(unmapped)} not covered")
sys.exit(1 if unmapped or not rows else 0)
PY
