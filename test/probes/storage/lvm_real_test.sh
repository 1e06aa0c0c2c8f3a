#!/usr/bin/env bash
# Real lvm (Debian's lvm2) on real loop devices: a two-PV volume group must be reported complete
# with the sizes `vgs` reports; after one loop device is detached, lvm itself reports the PV
# missing and nodegate must say VolumeGroupDegraded. This kernel has no device-mapper, so no LV
# can be activated here (ENVIRONMENT.md); PV/VG metadata needs none.
#
# Isolation from the host's LVM: a private LVM_SYSTEM_DIR whose filter accepts only our loop
# devices, and a system ID of our own, so every other lvm on this machine (the host's config,
# other tests' `nodegate check`) treats the test VG as foreign and ignores it.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
# shellcheck source=lvm_isolated.sh
. "$(dirname "$0")/lvm_isolated.sh"
lvm_sandbox ngtest

truncate -s 64M "$tmp/a.img" "$tmp/b.img"
attach_loop "$tmp/a.img"
attach_loop "$tmp/b.img"
mkdir -p "$tmp/run"
isolated_lvm_config "$tmp" "${loops[0]}" "${loops[1]}"
lvmx pvcreate -q "${loops[@]}" >/dev/null
lvmx vgcreate -q "$vg" "${loops[@]}" >/dev/null

cmd=$lvm_cmd
echo "{\"checks\": {\"lvm\": {\"volume_group\": \"$vg\"}}}" >"$tmp/cfg.json"
run() {
  "$NODEGATE" check --output json --host-root "$tmp/root" --config "$tmp/cfg.json" \
    --lvm-command "$cmd" >"$tmp/out.json" 2>"$tmp/err.txt" || true
  jq -c '.checks[] | select(.check == "lvm")' "$tmp/out.json"
}
mkdir -p "$tmp/root"

# 1. Complete VG: PASS, and the sizes are the ones lvm's own vgs prints.
got=$(run)
echo "complete: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got")"
[ "$(jq -r .status <<<"$got")" = PASS ] || fail "complete VG: $(jq -c '{status,reason,message}' <<<"$got")"
want_size=$(lvmx vgs --noheadings --units b --nosuffix -o vg_size "$vg" | tr -d ' ')
want_free=$(lvmx vgs --noheadings --units b --nosuffix -o vg_free "$vg" | tr -d ' ')
got_size=$(jq -r --arg vg "$vg" '.metrics[] | select(.name == "nodegate_lvm_vg_size_bytes" and .labels.vg == $vg) | .value' <<<"$got")
got_free=$(jq -r --arg vg "$vg" '.metrics[] | select(.name == "nodegate_lvm_vg_free_bytes" and .labels.vg == $vg) | .value' <<<"$got")
[ "$got_size" = "$want_size" ] || fail "vg size $got_size, vgs says $want_size"
[ "$got_free" = "$want_free" ] || fail "vg free $got_free, vgs says $want_free"
echo "vg size $got_size (vgs: $want_size), free $got_free (vgs: $want_free)"

# The host's own lvm must not see the test VG (foreign system ID).
if lvm vgs --noheadings -o vg_name 2>/dev/null | grep -qw "$vg"; then fail "host lvm sees the test VG"; fi

# 1b. The real lvm run as a non-root user: it prints an empty, valid report and exits 5
# (/run/lock/lvm: permission denied, no device readable). A failed run is never a healthy result:
# UNKNOWN LvmCommandFailed, never PASS NoVolumeGroups. The empty host root makes the label scan
# undecided, so lvm runs.
nobody_cmd="setpriv --reuid=65534 --regid=65534 --clear-groups lvm"
real_out=$(setpriv --reuid=65534 --regid=65534 --clear-groups lvm fullreport --reportformat json 2>/dev/null) && real_rc=0 || real_rc=$?
echo "lvm as uid 65534: exit $real_rc, stdout $(tr -d ' \n' <<<"$real_out")"
[ "$real_rc" != 0 ] || fail "lvm as a non-root user exited 0: this test no longer shows a failing lvm"
"$NODEGATE" check --output json --host-root "$tmp/root" --lvm-command "$nobody_cmd" \
  >"$tmp/nobody.json" 2>"$tmp/err.txt" || true
got=$(jq -c '.checks[] | select(.check == "lvm")' "$tmp/nobody.json")
echo "non-root lvm: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got")"
[ "$(jq -r '"\(.status) \(.reason)"' <<<"$got")" = "UNKNOWN LvmCommandFailed" ] || fail "non-root lvm: $got"
case "$(jq -r .message <<<"$got")" in *"exit code $real_rc"*) ;; *) fail "non-root lvm message: $got";; esac

# 2. Detach the second PV's loop device: a real missing PV.
losetup -d "${loops[1]}"
unset 'loops[1]'
lvmx vgs -o vg_name,vg_attr,vg_missing_pv_count "$vg" 2>/dev/null || true
got=$(run)
echo "degraded: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got")"
[ "$(jq -r .status <<<"$got")" = FAIL ] || fail "missing PV status $(jq -r .status <<<"$got")"
[ "$(jq -r .reason <<<"$got")" = VolumeGroupDegraded ] || fail "missing PV reason $(jq -r .reason <<<"$got")"
case "$(jq -r .message <<<"$got")" in *"volume group $vg is partial: 1 of 2 PVs missing"*) ;;
  *) fail "message: $(jq -r .message <<<"$got")";; esac
[ "$(jq -r --arg vg "$vg" '.metrics[] | select(.name == "nodegate_lvm_pv_missing" and .labels.vg == $vg) | .value' <<<"$got")" = 1 ] \
  || fail "nodegate_lvm_pv_missing is not 1"
# lvm's stderr warning about the missing device is kept as evidence.
jq -e '.evidence[] | select(.source == "lvm warning") | select(.observed | test("missing PV|find device"))' <<<"$got" >/dev/null \
  || fail "lvm's missing-device warning not in the evidence"

[ "$fails" = 0 ] || { cat "$tmp/err.txt" >&2; exit 1; }
echo PASS
