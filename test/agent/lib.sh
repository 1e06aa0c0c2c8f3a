# Helpers shared by the agent's script tests (sourced). Needs NODEGATE (the binary) and
# NODEGATE_BUILD from the test environment (test/CMakeLists.txt sets them).
set -euo pipefail
: "${NODEGATE:?NODEGATE must point at the nodegate binary}"
: "${NODEGATE_BUILD:?NODEGATE_BUILD must point at the build tree}"
TEST_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

CLEANUP=()
cleanup() {
  local i
  for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do eval "${CLEANUP[$i]}" || true; done
}
trap cleanup EXIT
on_exit() { CLEANUP+=("$*"); }

fail() { echo "FAIL: $*" >&2; exit 1; }

# wait_until SECONDS CMD...: retries CMD every 50 ms until it succeeds or time runs out.
wait_until() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# start_agent LOG ARGS...: runs `nodegate agent ARGS` in the background, sets AGENT_PID, and
# waits for /readyz on the --listen address found in ARGS.
start_agent() {
  local log=$1; shift
  local listen="" prev=""
  for a in "$@"; do
    [ "$prev" = "--listen" ] && listen=$a
    case $a in --listen=*) listen=${a#--listen=} ;; esac
    prev=$a
  done
  # The DNS tracer attaches to every virt-launcher netns on the host, including those of DNS
  # tests running beside this one; tests here that do not pass --dns-trace keep it off.
  case " $* " in *" --dns-trace"*) ;; *) set -- "$@" --dns-trace off ;; esac
  "$NODEGATE" agent "$@" >"$log" 2>&1 &
  AGENT_PID=$!
  on_exit "kill $AGENT_PID 2>/dev/null; wait $AGENT_PID 2>/dev/null"
  if ! wait_until 30 curl -sf "http://$listen/readyz"; then
    cat "$log" >&2
    fail "agent did not become ready on $listen"
  fi
}
