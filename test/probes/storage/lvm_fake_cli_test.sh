#!/usr/bin/env bash
# The real binary with a fake lvm behind --lvm-command: every fixture (both report forms) must
# give the expected lvm verdict, broken output must be UNKNOWN with a clear message, and a hanging
# lvm must be killed at the timeout (with its children) without holding up the run.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}" "${NODEGATE_SRC:?source tree}"
fixtures="$NODEGATE_SRC/test/fixtures/lvm"
tmp=$(mktemp -d /tmp/nodegate-lvmfake-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# A directory with a space: --lvm-command is split like a shell would, quotes included.
mkdir -p "$tmp/fake dir"
cp "$NODEGATE_SRC/test/probes/storage/fake-lvm.sh" "$tmp/fake dir/lvm"
fake="'$tmp/fake dir/lvm'"
fails=0

# check MODE [CONFIG] -> prints "STATUS REASON" of the lvm check; the whole JSON is in $tmp/out.json
check() {
  local args=(check --output json --host-root "$tmp/emptyroot" --lvm-command "$1")
  [ -n "${2:-}" ] && args+=(--config "$2")
  mkdir -p "$tmp/emptyroot"
  "$NODEGATE" "${args[@]}" >"$tmp/out.json" 2>"$tmp/err.txt" || true
  jq -r '.checks[] | select(.check == "lvm") | "\(.status) \(.reason)"' "$tmp/out.json"
}
expect() {  # expect WHAT GOT WANT
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got '$2', want '$3'" >&2
    cat "$tmp/err.txt" >&2 || true
    fails=$((fails + 1))
  else
    echo "ok: $1: $2"
  fi
}

while read -r name want; do
  [ -z "$name" ] && continue
  for form in json std.json; do
    expect "$name.$form" "$(check "$fake $fixtures/$name.$form")" "$want"
  done
done <<'TABLE'
healthy                  PASS VolumeGroupsHealthy
thinpool-85              WARN ThinPoolDataPressure
thinpool-100-out-of-data FAIL ThinPoolDataPressure
metadata-nearly-full     FAIL ThinPoolMetadataPressure
metadata-read-only       FAIL ThinPoolMetadataPressure
thinpool-failed          FAIL LogicalVolumeUnhealthy
partial-vg-missing-pv    FAIL VolumeGroupDegraded
xx-states                UNKNOWN LvmStateUnknown
snapshots                PASS VolumeGroupsHealthy
snapshot-invalid         FAIL LogicalVolumeUnhealthy
inactive-lv              PASS VolumeGroupsHealthy
no-vgs                   PASS NoVolumeGroups
TABLE

while read -r file want; do
  [ -z "$file" ] && continue
  expect "real/$file" "$(check "$fake $fixtures/real/$file")" "$want"
done <<'TABLE'
lvm-fullreport-thinpool-bytes-numeric.json        PASS VolumeGroupsHealthy
lvm-fullreport-partial-vg-missing-pv.json         FAIL VolumeGroupDegraded
lvm-fullreport-lv-state-unknown-XX.json           UNKNOWN LvmStateUnknown
lvm-fullreport-cache-lv-data-percent.json         PASS VolumeGroupsHealthy
lvm-fullreport-default-units-with-warnings.txt    PASS VolumeGroupsHealthy
TABLE

expect "log and warnings" "$(check "$fake $fixtures/log-and-warnings.std.txt")" "WARN ThinPoolDataPressure"
# The domain metrics ride along in the JSON.
got=$(check "$fake $fixtures/healthy.json" >/dev/null; jq -r '.checks[] | select(.check == "lvm") |
  .metrics[] | select(.name == "nodegate_lvm_thin_pool_data_ratio" and .labels.lv == "pool") | .value' "$tmp/out.json")
expect "thin pool data ratio metric" "$got" "0.4"
got=$(check "$fake $fixtures/partial-vg-missing-pv.json" >/dev/null; jq -r '.checks[] | select(.check == "lvm") |
  .metrics[] | select(.name == "nodegate_lvm_pv_missing") | .value' "$tmp/out.json")
expect "pv missing metric" "$got" "1"
got=$(check "$fake $fixtures/thinpool-85.json" >/dev/null; jq -r '.checks[] | select(.check == "lvm") | .message' "$tmp/out.json")
case $got in *"writes queue when it is full (VMs pause)"*) echo "ok: queue noted";;
  *) echo "FAIL: lv_when_full=queue not in message: $got" >&2; fails=$((fails + 1));; esac

# Broken output: UNKNOWN with a message that says what was wrong.
for f in garbage.txt truncated.json wrong-shape.json; do
  expect "$f" "$(check "$fake $fixtures/$f")" "UNKNOWN LvmReportUnparsable"
  msg=$(jq -r '.checks[] | select(.check == "lvm") | .message' "$tmp/out.json")
  case $msg in "failed to parse lvm report: "*) ;; *) echo "FAIL: $f message: $msg" >&2; fails=$((fails + 1));; esac
done
expect "lvm exits 5" "$(check "$fake exit:5")" "UNKNOWN LvmCommandFailed"
# A failed lvm that printed a valid (empty) report: never PASS NoVolumeGroups.
for mode in "report-exit:5" "report-exit:139" "report-signal:SEGV" "report-signal:KILL"; do
  expect "$mode after an empty report" "$(check "$fake $mode:$fixtures/no-vgs.json")" "UNKNOWN LvmCommandFailed"
done
msg=$(jq -r '.checks[] | select(.check == "lvm") | .message' "$tmp/out.json")
case $msg in *"killed by SIGKILL"*) echo "ok: signal named";;
  *) echo "FAIL: signal not in message: $msg" >&2; fails=$((fails + 1));; esac
check "$fake report-signal:SEGV:$fixtures/no-vgs.json" >/dev/null
msg=$(jq -r '.checks[] | select(.check == "lvm") | .message' "$tmp/out.json")
case $msg in *"killed by SIGSEGV"*) echo "ok: SIGSEGV named";;
  *) echo "FAIL: SIGSEGV not in message: $msg" >&2; fails=$((fails + 1));; esac
# A real fault in what it printed still shows as FAIL.
expect "exit 5 after a degraded report" "$(check "$fake report-exit:5:$fixtures/partial-vg-missing-pv.json")" "FAIL VolumeGroupDegraded"

# No lvm at all is a value (no local LVM), unless a managed VG says there should be one.
expect "no lvm" "$(check "/nonexistent/lvm-$$")" "PASS NoLocalLvm"
echo '{"checks": {"lvm": {"volume_group": "vmdata"}}}' >"$tmp/managed.json"
expect "no lvm, managed vg" "$(check "/nonexistent/lvm-$$" "$tmp/managed.json")" "UNKNOWN LvmNotFound"
expect "unterminated quote" "$(check "'$tmp/fake dir/lvm")" "UNKNOWN LvmCommandFailed"

# A hanging lvm: killed at the 1 s timeout with its child, and the run goes on.
tag="$$$RANDOM"
echo '{"checks": {"lvm": {"timeout_seconds": 1}}}' >"$tmp/timeout.json"
start=$(date +%s%N)
got=$(check "$fake hang:$tag" "$tmp/timeout.json")
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
expect "hanging lvm" "$got" "UNKNOWN LvmTimeout"
if [ "$elapsed_ms" -gt 5000 ]; then echo "FAIL: hanging lvm held the run for ${elapsed_ms} ms" >&2; fails=$((fails + 1)); fi
[ "$(jq '.checks | length' "$tmp/out.json")" -gt 2 ] || { echo "FAIL: the other checks did not run" >&2; fails=$((fails + 1)); }
sleep 0.2
if pgrep -f "sleep 6$tag" >/dev/null; then
  echo "FAIL: the hanging lvm's processes survived the timeout" >&2
  pkill -f "sleep 6$tag" || true
  fails=$((fails + 1))
fi
echo "hanging lvm: answered in ${elapsed_ms} ms"

# An lvm that closes stdout and stderr and hangs: the deadline holds on the process itself,
# and its whole process group is gone afterwards.
tag="$$$RANDOM"
start=$(date +%s%N)
got=$(check "$fake detach:$tag" "$tmp/timeout.json")
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
expect "lvm that closes its pipes and hangs" "$got" "UNKNOWN LvmTimeout"
if [ "$elapsed_ms" -gt 5000 ]; then echo "FAIL: detached lvm held the run for ${elapsed_ms} ms" >&2; fails=$((fails + 1)); fi
sleep 0.2
if left=$(pgrep -f "sleep 6$tag"); then
  echo "FAIL: the detached lvm's processes survived the deadline" >&2
  kill $left || true
  fails=$((fails + 1))
fi
echo "detached lvm: answered in ${elapsed_ms} ms"

[ "$fails" = 0 ] || { echo "$fails failures" >&2; exit 1; }
echo "PASS"
