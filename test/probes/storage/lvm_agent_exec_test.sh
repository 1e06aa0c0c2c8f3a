#!/usr/bin/env bash
# The exec seam inside the agent (issue 22 item 9): an --lvm-command that closes its stdout and
# stderr and hangs, with a child of its own in its process group.
#   1. lvm timeout 2 s: the agent kills the whole group at the deadline while it keeps running,
#      and the lvm check is UNKNOWN LvmTimeout;
#   2. lvm timeout 60 s: SIGTERM while the command still hangs stops the agent within the
#      signals test's second, and nothing the agent started is left running.
# Ports 19500-19501 (test/probes/CMakeLists.txt).
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}" "${NODEGATE_SRC:?source tree}"
tmp=$(mktemp -d /tmp/nodegate-lvmagent-XXXXXX)
agent_pid=""
tag="$$$RANDOM"
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
  local left
  left=$(pgrep -f "sleep 6$tag" || true)
  [ -n "$left" ] && kill $left 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
cp "$NODEGATE_SRC/test/probes/storage/fake-lvm.sh" "$tmp/lvm"
mkdir -p "$tmp/root"
# (pgrep from a function: a `bash -c` would match its own command line)
hung() { pgrep -f "sleep 6$tag" >/dev/null; }
wait_for() {  # wait_for SECONDS CMD...
  local end=$(($(date +%s) + $1)); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.05; done
}
start() {  # start TIMEOUT_SECONDS
  # local-pv off lvm: one run at a time (it would run lvm itself when the lvm probe's run is
  # still going, and the two 2 s runs would follow each other).
  echo "{\"gate\": {\"required\": []}, \"checks\": {\"lvm\": {\"timeout_seconds\": $1}," \
    "\"local-pv\": {\"use_lvm\": false}}}" >"$tmp/cfg.json"
  "$NODEGATE" agent --kube none --listen 127.0.0.1:19500 --debug-listen 127.0.0.1:19501 \
    --dns-trace off --resync 3600 --host-root "$tmp/root" --config "$tmp/cfg.json" \
    --lvm-command "$tmp/lvm detach:$tag" >"$tmp/agent.log" 2>&1 &
  agent_pid=$!
  wait_for 10 hung || { cat "$tmp/agent.log" >&2; fail "the fake lvm never started"; exit 1; }
}
lvm_check() {
  curl -sf http://127.0.0.1:19501/api/v1/checks/lvm | jq -r '"\(.status) \(.reason)"'
}

# 1. Deadline inside a running agent.
start 2
t0=$(date +%s%N)
gone() { ! hung; }
wait_for 5 gone || fail "the detached lvm outlived its 2 s deadline"
ms=$((($(date +%s%N) - t0) / 1000000))
echo "detached lvm killed ${ms} ms after it was seen (deadline 2 s)"
# The runner's deadline for the probe is the same checks.lvm.timeout_seconds, so either the
# probe's own LvmTimeout or the runner's ProbeTimeout is published first; both are UNKNOWN.
unknown() { case "$(lvm_check)" in "UNKNOWN LvmTimeout" | "UNKNOWN ProbeTimeout") ;; *) return 1 ;; esac; }
wait_for 5 unknown || fail "lvm check: $(lvm_check)"
echo "lvm check: $(lvm_check)"
kill -0 "$agent_pid" || fail "agent died"
kill "$agent_pid"
wait "$agent_pid" || true
agent_pid=""

# 2. SIGTERM while the command hangs.
start 60
t0=$(date +%s%N)
kill "$agent_pid"
wait "$agent_pid" && rc=0 || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
agent_pid=""
echo "agent stopped with exit $rc after ${ms} ms while lvm hung"
[ "$ms" -lt 2000 ] || fail "stopping took ${ms} ms"
sleep 0.2
if hung; then fail "processes of the hanging lvm outlived the agent: $(pgrep -af "sleep 6$tag" | tr '\n' ' ')"; fi
grep -q "agent stopped" "$tmp/agent.log" || fail "no 'agent stopped' in the log"

[ "$fails" = 0 ] || { cat "$tmp/agent.log" >&2; exit 1; }
echo PASS
