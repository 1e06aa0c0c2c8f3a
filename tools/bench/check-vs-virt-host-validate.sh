#!/usr/bin/env bash
# Benchmark: `nodegate check --output json` against libvirt's `virt-host-validate qemu` on this
# host, in one hyperfine run (same machine state for both). Both exit non-zero on a host without
# KVM, hence -i. Prints hyperfine's table and the ratio; docs/benchmarks/check.md records a run.
#   NODEGATE=build/nodegate tools/bench/check-vs-virt-host-validate.sh [extra hyperfine args]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
nodegate=${NODEGATE:-$here/build/nodegate}
command -v hyperfine >/dev/null || { echo "hyperfine missing (apt-get install hyperfine)" >&2; exit 2; }
command -v virt-host-validate >/dev/null || { echo "virt-host-validate missing (libvirt-clients)" >&2; exit 2; }
[ -x "$nodegate" ] || { echo "no nodegate binary at $nodegate (set NODEGATE)" >&2; exit 2; }
out=$(mktemp /tmp/nodegate-bench-XXXXXX.json)
trap 'rm -f "$out"' EXIT

# `nodegate version` runs no probe: its time is the binary's start-up floor (loader, libraries),
# the part of check's time that is not the probes.
hyperfine -N -i --warmup 5 --min-runs 50 --export-json "$out" "$@" \
  -n "nodegate check --output json" "$nodegate check --output json" \
  -n "virt-host-validate qemu" "virt-host-validate qemu" \
  -n "nodegate version" "$nodegate version"
python3 - "$out" "$nodegate" <<'PY'
import json, subprocess, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
ng, vhv = r["nodegate check --output json"], r["virt-host-validate qemu"]
floor = r["nodegate version"]
checks = len(json.loads(subprocess.run([sys.argv[2], "check", "--output", "json"],
                                       capture_output=True, text=True).stdout)["checks"])
print(f"\nnodegate: mean {ng['mean']*1e3:.2f} ms ± {ng['stddev']*1e3:.2f} ({checks} checks)")
print(f"virt-host-validate: mean {vhv['mean']*1e3:.2f} ms ± {vhv['stddev']*1e3:.2f}")
print(f"nodegate version (start-up floor): mean {floor['mean']*1e3:.2f} ms, "
      f"median {floor['median']*1e3:.2f} ms")
print(f"ratio: nodegate is {vhv['mean']/ng['mean']:.1f}x faster (mean), "
      f"{vhv['median']/ng['median']:.1f}x (median)")
PY
