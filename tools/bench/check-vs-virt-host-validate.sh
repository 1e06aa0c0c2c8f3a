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
floor_dir=$(mktemp -d /tmp/nodegate-floor-XXXXXX)
trap 'rm -rf "$out" "$floor_dir"' EXIT

# The floor that the chosen dependencies set: a program that does nothing but link the two C++
# libraries nodegate cannot load lazily (sdbus-c++ for the D-Bus probes, prometheus-cpp for the
# metrics; C libraries can be dlopen()ed on first use, as libcurl is, C++ class libraries cannot).
# No `nodegate check` can start faster than this while it links them.
cat >"$floor_dir/floor.cpp" <<'CPP'
#include <prometheus/registry.h>
#include <sdbus-c++/sdbus-c++.h>
int main(int argc, char**) {
  if (argc > 99) {  // never true: only makes both libraries needed at link time
    auto bus = sdbus::createSystemBusConnection();
    prometheus::Registry registry;
  }
  return 0;
}
CPP
c++ -O2 -std=c++20 "$floor_dir/floor.cpp" -o "$floor_dir/floor" -Wl,--no-as-needed \
  -lsdbus-c++ -lprometheus-cpp-core

# `nodegate version` runs no probe: its time is the binary's start-up floor (loader, libraries),
# the part of check's time that is not the probes.
hyperfine -N -i --warmup 5 --min-runs 50 --export-json "$out" "$@" \
  -n "nodegate check --output json" "$nodegate check --output json" \
  -n "virt-host-validate qemu" "virt-host-validate qemu" \
  -n "nodegate version" "$nodegate version" \
  -n "C++ dependency floor" "$floor_dir/floor"
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
dep = r["C++ dependency floor"]
print(f"C++ dependency floor (libstdc++, sdbus-c++, prometheus-cpp, nothing else): mean "
      f"{dep['mean']*1e3:.2f} ms; a 5x ratio needs check under {vhv['mean']/5*1e3:.2f} ms")
print(f"ratio: nodegate is {vhv['mean']/ng['mean']:.1f}x faster (mean), "
      f"{vhv['median']/ng['median']:.1f}x (median)")
PY
