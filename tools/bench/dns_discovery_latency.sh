#!/usr/bin/env bash
# How fast hop discovery follows VMs (issue 7): N VM starts and stops in launcher-like network
# namespaces, with the DNS service's periodic rescan set to an hour, so every figure is an event's.
# Prints the latency distributions measured by test/agent/dns/discovery_events_test.cpp:
#   host veth created -> the VM's 4 hops attached   (rtnetlink RTM_NEWLINK, process events off)
#   launcher exec     -> 4 hops attached            (proc connector PROC_EVENT_EXEC)
#   launcher exit     -> all its hops detached      (PROC_EVENT_EXIT)
#   netns deleted     -> its host veth gone         (we do not pin the netns)
#   20 link events    -> rescans                    (debounce)
# Usage (root): tools/bench/dns_discovery_latency.sh [BUILD_DIR] [STARTS]
set -euo pipefail
BUILD=${1:-build}
STARTS=${2:-20}
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 1; }
BIN=$BUILD/test/agent/dns/dns_discovery_events_test
[ -x "$BIN" ] || { echo "build $BIN first (cmake --build $BUILD --target dns_discovery_events_test)" >&2; exit 1; }
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus, $STARTS VM starts"
NGN_DNS_STARTS=$STARTS "$BIN" 2>/dev/null | grep -E '^\[(latency|debounce)\]|PASSED|FAILED'
