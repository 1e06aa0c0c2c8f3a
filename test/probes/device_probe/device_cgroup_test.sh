#!/usr/bin/env bash
# Privilege separation against the real kernel's device cgroup (issue 17 items 5 and 6).
#
# `nodegate check` and `nodegate agent` run inside a cgroup that refuses /dev/kvm (c 10:232),
# /dev/net/tun (c 10:200) and every block device, as an unprivileged Kubernetes container's
# cgroup does; the device-probe helper runs outside it. A loop device carries a real LVM2 PV
# and VG (pvcreate/vgcreate, lvm's private configuration as in lvm_real_test.sh).
#   - as plain root: the baseline verdicts of kvm-device, tun and lvm;
#   - in the cgroup without the helper: kvm-device and tun UNKNOWN PermissionDenied, lvm UNKNOWN
#     BlockDevicesRefused — never PASS NoVolumeGroups — each with a hint naming the helper;
#   - in the cgroup with the helper (check and agent): the baseline verdicts exactly;
#   - the helper killed (stale socket), its socket gone, a helper that accepts and never
#     answers: the agent's device checks and lvm UNKNOWN DeviceProbeUnavailable with the reason,
#     within the client deadline, while /healthz keeps answering.
# The cgroup mechanism is whichever this machine has, each one it has: cgroup v1's devices
# controller (devices.deny), and on a cgroup v2 hierarchy (v2-only or hybrid) a
# BPF_PROG_TYPE_CGROUP_DEVICE program (devcg.cpp). Ports 19510-19511.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}" "${NODEGATE_SRC:?source tree}" "${NODEGATE_BUILD:?build tree}"
devcg="$NODEGATE_BUILD/test/probes/device_probe/devcg"
[ -c /dev/kvm ] || { echo "SKIP: no /dev/kvm on this machine"; exit 77; }
# shellcheck source=../storage/lvm_isolated.sh
. "$NODEGATE_SRC/test/probes/storage/lvm_isolated.sh"
lvm_sandbox ngdevcg
pids=()
cgroups=()
devcg_cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  # Whatever still runs in a test cgroup was started by this test: stop it, then remove the cgroup.
  for c in "${cgroups[@]}"; do
    left=$(cat "$c/cgroup.procs" 2>/dev/null)
    [ -n "$left" ] && kill $left 2>/dev/null && sleep 0.5
    rmdir "$c" 2>/dev/null
  done
  lvm_sandbox_cleanup
}
trap devcg_cleanup EXIT

mechanisms=()
[ -d /sys/fs/cgroup/devices ] && mechanisms+=(v1)
grep -q " - cgroup2 " /proc/self/mountinfo && mechanisms+=(bpf)
[ "${#mechanisms[@]}" -gt 0 ] || { echo "FAIL: neither a cgroup v1 devices controller nor cgroup2 is mounted" >&2; exit 1; }
echo "device cgroup mechanisms on this machine: ${mechanisms[*]}"

# A PV and VG on a loop device, and a sysfs whose class/block lists only that device (every
# other entry links to the real /sys), so lvm and the label scan look at the test disk alone.
truncate -s 64M "$tmp/pv.img"
attach_loop "$tmp/pv.img"
loop=${loops[0]}
isolated_lvm_config "$tmp" "$loop"
lvmx pvcreate -q "$loop" >/dev/null
lvmx vgcreate -q "$vg" "$loop" >/dev/null
mkdir -p "$tmp/sys/class/block"
for e in /sys/*; do [ "${e##*/}" = class ] || ln -s "$e" "$tmp/sys/${e##*/}"; done
for e in /sys/class/*; do [ "${e##*/}" = block ] || ln -s "$e" "$tmp/sys/class/${e##*/}"; done
ln -s "/sys/class/block/${loop##*/}" "$tmp/sys/class/block/${loop##*/}"
flags=(--path.sysfs "$tmp/sys" --lvm-command "$lvm_cmd")
echo '{"gate": {"required": []}}' >"$tmp/cfg.json"

verdicts() {  # verdicts JSON-FILE -> "check STATUS REASON: MESSAGE" for the three checks
  jq -r '(.checks // .)[] | select(.check == "kvm-device" or .check == "tun" or .check == "lvm")
         | "\(.check) \(.status) \(.reason): \(.message)"' "$1" | sort
}
verdict() { verdicts "$1" | grep "^$2 " | cut -d' ' -f2-3 | tr -d :; }

"$NODEGATE" check --output json "${flags[@]}" >"$tmp/root.json" 2>/dev/null || true
verdicts "$tmp/root.json" >"$tmp/root.txt"
echo "as plain root:"; sed 's/^/  /' "$tmp/root.txt"
[ "$(verdict "$tmp/root.json" lvm)" = "PASS VolumeGroupsHealthy" ] || fail "baseline lvm: $(verdict "$tmp/root.json" lvm)"
for c in kvm-device tun; do
  case "$(verdict "$tmp/root.json" $c)" in "UNKNOWN PermissionDenied") fail "baseline $c refused as root";; esac
done

start_helper() {
  "$NODEGATE" device-probe --socket "$tmp/dp.sock" "${flags[@]}" >>"$tmp/helper.log" 2>&1 &
  helper=$!
  pids+=("$helper")
  for _ in $(seq 100); do [ -S "$tmp/dp.sock" ] && return; sleep 0.05; done
  cat "$tmp/helper.log" >&2
  fail "the helper did not create its socket"
  exit 1
}

# agent_check NAME -> "STATUS REASON" of one check from the agent's debug API
agent_check() { curl -sf "http://127.0.0.1:19511/api/v1/checks/$1" | jq -r '"\(.status) \(.reason)"'; }
# wait_checks SECONDS STATUS_REASON: until kvm-device, tun and lvm all show it
wait_checks() {
  local end=$(($(date +%s) + $1))
  until [ "$(agent_check kvm-device)" = "$2" ] && [ "$(agent_check tun)" = "$2" ] &&
    [ "$(agent_check lvm)" = "$2" ]; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.1
  done
}

for mech in "${mechanisms[@]}"; do
  cg="nodegate-test-$mech-$$"
  if [ "$mech" = v1 ]; then cgroups+=("/sys/fs/cgroup/devices/$cg"); else
    cgroups+=("$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)/$cg"); fi
  in_cg() { "$devcg" "$mech" "$cg" -- "$@"; }  # foreground only
  echo "== $mech"
  # The cgroup refuses what it should, and only that.
  in_cg sh -c 'exec 3<>/dev/kvm' 2>/dev/null && fail "$mech: /dev/kvm opens inside the cgroup"
  in_cg sh -c "exec 3<$loop" 2>/dev/null && fail "$mech: $loop opens inside the cgroup"
  in_cg sh -c 'exec 3<>/dev/null' || fail "$mech: /dev/null refused inside the cgroup"

  in_cg "$NODEGATE" check --output json "${flags[@]}" >"$tmp/cg.json" 2>/dev/null || true
  echo "in the cgroup, no helper:"; verdicts "$tmp/cg.json" | sed 's/^/  /'
  for c in kvm-device tun; do
    [ "$(verdict "$tmp/cg.json" $c)" = "UNKNOWN PermissionDenied" ] || fail "$mech no helper: $c $(verdict "$tmp/cg.json" $c)"
  done
  [ "$(verdict "$tmp/cg.json" lvm)" = "UNKNOWN BlockDevicesRefused" ] || fail "$mech no helper: lvm $(verdict "$tmp/cg.json" lvm)"
  # Each says how to get past the wall: the device-probe helper.
  for c in kvm-device tun lvm; do
    jq -r --arg c "$c" '.checks[] | select(.check == $c) | .hint' "$tmp/cg.json" | grep -q "device-probe" ||
      fail "$mech no helper: the $c hint does not name the device-probe helper"
  done

  start_helper
  in_cg "$NODEGATE" check --output json --device-probe "$tmp/dp.sock" "${flags[@]}" >"$tmp/cgh.json" 2>/dev/null || true
  verdicts "$tmp/cgh.json" >"$tmp/cgh.txt"
  echo "in the cgroup, with the helper:"; sed 's/^/  /' "$tmp/cgh.txt"
  diff "$tmp/root.txt" "$tmp/cgh.txt" >&2 || fail "$mech: check with the helper differs from plain root"

  # Not through in_cg: a function run in the background is a subshell, and $! would be its pid.
  "$devcg" "$mech" "$cg" -- "$NODEGATE" agent --kube none --listen 127.0.0.1:19510 --debug-listen 127.0.0.1:19511 \
    --dns-trace off --resync 3 --config "$tmp/cfg.json" --device-probe "$tmp/dp.sock" "${flags[@]}" \
    >"$tmp/agent-$mech.log" 2>&1 &
  agent=$!
  pids+=("$agent")
  for _ in $(seq 200); do curl -sf http://127.0.0.1:19510/readyz >/dev/null && break; sleep 0.05; done
  curl -sf http://127.0.0.1:19511/api/v1/checks >"$tmp/agent.json" || { cat "$tmp/agent-$mech.log" >&2; fail "$mech: agent API"; }
  verdicts "$tmp/agent.json" >"$tmp/agent.txt"
  diff "$tmp/root.txt" "$tmp/agent.txt" >&2 || fail "$mech: the agent with the helper differs from plain root"
  grep -q "device-probe helper answers" "$tmp/agent-$mech.log" || fail "$mech: the agent did not log the helper"

  # The helper killed: its socket stays behind, nobody listens on it.
  kill -9 "$helper"; wait "$helper" 2>/dev/null || true
  t0=$(date +%s%N)
  wait_checks 8 "UNKNOWN DeviceProbeUnavailable" || fail "$mech killed helper: $(agent_check kvm-device), $(agent_check lvm)"
  echo "killed helper: UNKNOWN after $((($(date +%s%N) - t0) / 1000000)) ms: $(curl -sf http://127.0.0.1:19511/api/v1/checks/kvm-device | jq -r .message)"
  curl -sf http://127.0.0.1:19511/api/v1/checks/lvm | jq -r .message | grep -q "Connection refused" || fail "$mech: lvm message lacks the cause"
  # The socket gone.
  rm -f "$tmp/dp.sock"
  sleep 4
  curl -sf http://127.0.0.1:19511/api/v1/checks/tun | jq -r .message | grep -q "No such file" || fail "$mech: socket gone not said"
  # A helper that accepts and never answers: the client's deadline (5 s) ends each ask.
    python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(64)
held = []
while True:
    c, _ = s.accept(); held.append(c)
' "$tmp/dp.sock" &
  silent=$!
  pids+=("$silent")
  t0=$(date +%s%N)
  end=$(($(date +%s) + 20))
  until curl -sf http://127.0.0.1:19511/api/v1/checks/kvm-device | jq -r .message | grep -q "no answer within 5000 ms"; do
    curl -sf -m 3 http://127.0.0.1:19510/healthz >/dev/null || fail "$mech: /healthz failed while the helper was silent"
    [ "$(date +%s)" -lt "$end" ] || { fail "$mech: silent helper: $(agent_check kvm-device)"; break; }
    sleep 0.2
  done
  echo "silent helper: UNKNOWN after $((($(date +%s%N) - t0) / 1000000)) ms"
  wait_checks 15 "UNKNOWN DeviceProbeUnavailable" || fail "$mech silent helper: $(agent_check tun), $(agent_check lvm)"
  kill "$silent" 2>/dev/null; wait "$silent" 2>/dev/null || true
  kill "$agent" 2>/dev/null || fail "$mech: the agent died"
  wait "$agent" && rc=0 || rc=$?
  [ "$rc" = 0 ] || fail "$mech: the agent exited $rc"
  rm -f "$tmp/dp.sock"
  # check alone with a dead helper: a clear UNKNOWN at once, not a hang.
  t0=$(date +%s%N)
  in_cg "$NODEGATE" check --output json --device-probe "$tmp/dp.sock" "${flags[@]}" >"$tmp/dead.json" 2>/dev/null || true
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$(verdict "$tmp/dead.json" kvm-device)" = "UNKNOWN DeviceProbeUnavailable" ] || fail "$mech dead helper check: $(verdict "$tmp/dead.json" kvm-device)"
  [ "$(verdict "$tmp/dead.json" lvm)" = "UNKNOWN DeviceProbeUnavailable" ] || fail "$mech dead helper check: lvm $(verdict "$tmp/dead.json" lvm)"
  echo "check with no helper behind --device-probe: ${ms} ms"
done

if [ "$fails" != 0 ]; then
  echo "--- helper log"; cat "$tmp/helper.log"
  for mech in "${mechanisms[@]}"; do echo "--- agent log ($mech)"; grep -v "level=debug" "$tmp/agent-$mech.log" | tail -40; done
fi >&2
[ "$fails" = 0 ] || exit 1
echo PASS
