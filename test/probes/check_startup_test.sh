#!/usr/bin/env bash
# What a one-shot `nodegate check` pays for besides its probes (docs/benchmarks/check.md):
#   1. libcurl is not linked, and a check run never maps it (the dynamic loader's own trace,
#      LD_DEBUG=files); `nodegate dns trace` does map it, on first use, and gets real libcurl
#      errors through it (positive control for the trace);
#   2. with libcurl.so.4 unloadable (a mount namespace with /dev/null bound over it), check still
#      works and dns trace fails with a clear message instead of crashing;
#   3. without a D-Bus socket, time-sync and node-services answer at once and nothing about
#      D-Bus is logged: the JSON carries the result.
# TCP port 19101 (nothing listens there: dns trace must fail to connect).
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
tmp=$(mktemp -d /tmp/nodegate-startup-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
api=http://127.0.0.1:19101
cat >"$tmp/cfg.json" <<EOF
{ "checks": { "time-sync": { "bus": "$tmp/no-bus" }, "node-services": { "bus": "$tmp/no-bus" } } }
EOF

# 1. Not linked, not mapped by check; mapped by dns trace when it needs it.
needed=$(objdump -p "$NODEGATE" | awk '$1 == "NEEDED" {print $2}')
if grep -q curl <<<"$needed"; then fail "the binary links libcurl: $(grep curl <<<"$needed")"; fi
rc=0
LD_DEBUG=files "$NODEGATE" check --output json --config "$tmp/cfg.json" >"$tmp/check.json" 2>"$tmp/check.ld" || rc=$?
[ "$rc" -lt 128 ] && jq -e '.checks | length > 10' "$tmp/check.json" >/dev/null || fail "check: exit $rc, no result"
grep -q "file=libstdc++.so.6" "$tmp/check.ld" || fail "LD_DEBUG=files traced nothing: the check below would prove nothing"
if grep -q "libcurl" "$tmp/check.ld"; then fail "check mapped libcurl: $(grep -m1 libcurl "$tmp/check.ld")"; fi
echo "check maps $(grep -c 'calling init:' "$tmp/check.ld" || true) libraries, none of them libcurl"

rc=0
LD_DEBUG=files "$NODEGATE" dns trace --api "$api" >"$tmp/trace.out" 2>"$tmp/trace.ld" || rc=$?
grep -q "file=libcurl.so.4 .*dynamically loaded by" "$tmp/trace.ld" || fail "dns trace did not dlopen libcurl.so.4"
[ "$rc" = 1 ] || fail "dns trace without an agent: exit $rc, want 1"
grep -q "nodegate: failed to query $api/api/v1/dns/traces.*: Couldn't connect to server" "$tmp/trace.ld" \
  || fail "dns trace: no libcurl connect error: $(grep -v '^ *[0-9]*:' "$tmp/trace.ld")"
echo "dns trace loads libcurl on use: $(grep 'nodegate:' "$tmp/trace.ld")"

# 2. libcurl unloadable: needs root for a private mount namespace.
lib=$(readlink -f "$(ldconfig -p | awk '$1 == "libcurl.so.4" && /x86-64|aarch64/ {print $NF; exit}')")
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || [ ! -f "$lib" ]; then
  echo "SKIP part 2: needs root, unshare and libcurl.so.4 (have uid $(id -u), lib '$lib')"
else
  unshare -m --propagation private bash -c '
    mount --bind /dev/null "$1" || exit 90
    "$2" check --output json --config "$4" >"$3/nolib-check.json" 2>"$3/nolib-check.err"; echo $? >"$3/nolib-check.rc"
    "$2" dns trace --api "$5" >"$3/nolib-trace.out" 2>"$3/nolib-trace.err"; echo $? >"$3/nolib-trace.rc"
  ' _ "$lib" "$NODEGATE" "$tmp" "$tmp/cfg.json" "$api" || fail "could not bind over $lib"
  rc=$(cat "$tmp/nolib-check.rc")
  case "$rc" in 0|1|3) ;; *) fail "check without libcurl: exit $rc";; esac
  jq -e '.checks | length > 10' "$tmp/nolib-check.json" >/dev/null || fail "check without libcurl: no JSON"
  [ ! -s "$tmp/nolib-check.err" ] || fail "check without libcurl wrote to stderr: $(cat "$tmp/nolib-check.err")"
  [ "$(cat "$tmp/nolib-trace.rc")" = 1 ] || fail "dns trace without libcurl: exit $(cat "$tmp/nolib-trace.rc"), want 1"
  grep -q "level=error msg=\"failed to load libcurl.so.4: .*libcurl.so.4[^ ]*: file too short" "$tmp/nolib-trace.err" \
    || fail "dns trace without libcurl: no load error: $(cat "$tmp/nolib-trace.err")"
  grep -q "^nodegate: failed to initialise libcurl" "$tmp/nolib-trace.err" \
    || fail "dns trace without libcurl: no command error: $(cat "$tmp/nolib-trace.err")"
  echo "without libcurl: check exit $rc; dns trace says:"
  sed 's/^/  /' "$tmp/nolib-trace.err"
fi

# 3. No bus: an immediate answer, nothing on stderr about D-Bus.
"$NODEGATE" check --output json --config "$tmp/cfg.json" >"$tmp/nobus.json" 2>"$tmp/nobus.err" || true
if grep -i "dbus" "$tmp/nobus.err"; then fail "D-Bus messages on stderr without a bus"; fi
for c in time-sync node-services; do
  line=$(jq -c --arg c "$c" '.checks[] | select(.check == $c) | {status, reason, duration_seconds}' "$tmp/nobus.json")
  echo "no bus: $c $line"
  jq -e --arg c "$c" '.checks[] | select(.check == $c) | .duration_seconds < 0.05' "$tmp/nobus.json" >/dev/null \
    || fail "$c took too long without a bus: $line"
  jq -e --arg c "$c" --arg s "$tmp/no-bus does not exist" \
    '.checks[] | select(.check == $c) | .evidence | map(.observed) | any(contains($s))' "$tmp/nobus.json" >/dev/null \
    || fail "$c evidence does not name the missing socket"
done
[ "$(jq -r '.checks[] | select(.check == "node-services") | "\(.status) \(.reason)"' "$tmp/nobus.json")" = "UNKNOWN UnitUnreadable" ] \
  || fail "node-services without a bus is not UNKNOWN UnitUnreadable"
case "$(jq -r '.checks[] | select(.check == "time-sync") | .reason' "$tmp/nobus.json")" in
  TimedateUnavailable|NotSynchronized|NotSynchronizedYet|MaxErrorHigh|NoTimeSource) ;;
  *) fail "time-sync without a bus: unexpected reason";;
esac

[ "$fails" = 0 ] || exit 1
echo PASS
