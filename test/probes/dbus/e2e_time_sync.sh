#!/usr/bin/env bash
# End to end: `nodegate check --output json` with time-sync pointed at a private dbus-daemon
# running the test service, then at a socket that does not exist. The expected verdict follows
# the real kernel (adjtimex --print), since the binary reads the real adjtimex().
# Usage: e2e_time_sync.sh TEST_SERVICE BUS_CONFIG   (NODEGATE = the binary)
set -euo pipefail
service_bin=$1
bus_conf=$2
: "${NODEGATE:?NODEGATE must point at the nodegate binary}"

dir=$(mktemp -d /tmp/nodegate-dbus-e2e-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# Waits for the first stdout line of a background process written to a file.
wait_line() {
  local file=$1 i
  for i in $(seq 100); do
    [ -s "$file" ] && { head -n1 "$file"; return 0; }
    sleep 0.05
  done
  return 1
}

dbus-daemon --config-file="$bus_conf" --address="unix:path=$dir/bus" --nofork --nopidfile \
  --print-address >"$dir/address" 2>"$dir/daemon.log" &
pids+=($!)
wait_line "$dir/address" >/dev/null || fail "dbus-daemon did not start: $(cat "$dir/daemon.log")"

# The kernel decides whether the clock is synchronised; the bus says the same, so both sources
# agree and the verdict is the kernel's.
status=$(adjtimex --print | awk '/status:/ {print $2}')
maxerror=$(adjtimex --print | awk '/maxerror:/ {print $2}')
if (( (status & 64) == 0 || maxerror < 16000000 )); then kernel_synced=1; else kernel_synced=0; fi

"$service_bin" --address "unix:path=$dir/bus" --synced "$kernel_synced" --ntp 1 \
  --timezone Europe/Berlin >"$dir/service.out" 2>"$dir/service.log" &
pids+=($!)
[ "$(wait_line "$dir/service.out")" = ready ] || fail "test service did not start: $(cat "$dir/service.log")"

cat >"$dir/config.json" <<EOF
{ "checks": { "time-sync": { "bus": "$dir/bus", "grace_seconds": 0, "max_error_seconds": 100 },
              "node-services": { "bus": "$dir/bus" } } }
EOF

run_check() {
  set +e
  "$NODEGATE" check --output json --config "$dir/config.json" >"$dir/out.json" 2>"$dir/err.log"
  local rc=$?
  set -e
  [ "$rc" -ne 2 ] || fail "usage error: $(cat "$dir/err.log")"
  jq -e . "$dir/out.json" >/dev/null || fail "not JSON: $(head -c 500 "$dir/out.json")"
}
field() { jq -r --arg c "$1" ".checks[] | select(.check == \$c) | $2" "$dir/out.json"; }

run_check
got_status=$(field time-sync .status)
got_reason=$(field time-sync .reason)
echo "kernel synced=$kernel_synced -> time-sync $got_status $got_reason"
if [ "$kernel_synced" = 1 ]; then
  [ "$got_status" = PASS ] || fail "want PASS, got $got_status $got_reason: $(field time-sync .message)"
else
  [ "$got_status" = FAIL ] && [ "$got_reason" = NotSynchronized ] \
    || fail "want FAIL NotSynchronized, got $got_status $got_reason"
fi
field time-sync '.evidence[] | select(.source == "timedate1 Timezone") | .observed' | grep -qx Europe/Berlin \
  || fail "timedate1 evidence missing: $(field time-sync .evidence)"
# The test service plays no systemd units here beyond what LoadUnit invents: kubelet not found.
[ "$(field node-services .status)" = WARN ] || fail "node-services: $(field node-services .status) $(field node-services .message)"

# No bus at all: the kernel alone, never a hang.
cat >"$dir/config.json" <<EOF
{ "checks": { "time-sync": { "bus": "$dir/missing", "grace_seconds": 0, "max_error_seconds": 100 },
              "node-services": { "bus": "$dir/missing" } } }
EOF
start=$(date +%s%N)
run_check
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
got_status=$(field time-sync .status)
got_reason=$(field time-sync .reason)
echo "no bus -> time-sync $got_status $got_reason (${took_ms} ms)"
field time-sync .message | grep -q "failed to connect to unix:path=$dir/missing" || [ "$kernel_synced" = 0 ] \
  || fail "message does not name the socket: $(field time-sync .message)"
if [ "$kernel_synced" = 1 ]; then
  [ "$got_status" = WARN ] && [ "$got_reason" = TimedateUnavailable ] || fail "want WARN TimedateUnavailable, got $got_status $got_reason"
else
  [ "$got_status" = FAIL ] || fail "want FAIL, got $got_status $got_reason"
fi
field time-sync '.evidence[] | select(.source == "timedate1") | .observed' | grep -q "failed to connect" \
  || fail "no connect error in evidence"
echo "PASS"
