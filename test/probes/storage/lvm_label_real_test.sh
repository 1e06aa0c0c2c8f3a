#!/usr/bin/env bash
# The lvm probe's label scan on real loop devices with real lvm metadata, judged against blkid
# (util-linux, a program someone else wrote) as the oracle of "this device is an LVM2 PV":
#   - a zeroed device: no label, so `nodegate check` must not run lvm and must say PASS
#     NoVolumeGroups with the scan in the evidence;
#   - pvcreate (label in sector 1, lvm's default) with a VG on it, and pvcreate --labelsector 3:
#     the scan must find the label in that sector and run lvm, which then reports the VG;
#   - this host as it is (`nodegate check` on /): lvm skipped exactly when blkid finds no
#     LVM2_member on any device; a device nobody may open (EPERM) makes it UNKNOWN
#     BlockDevicesRefused, never PASS NoVolumeGroups.
# Each case gets a sysfs/devfs of its own (--path.sysfs/--path.devfs) holding only the loop
# device under test, as symlinks to the real sysfs directory and device node. lvm runs with a
# private LVM_SYSTEM_DIR and system ID, as in lvm_real_test.sh, so the host ignores the test VG.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
command -v blkid >/dev/null || { echo "SKIP: blkid (util-linux) is not installed"; exit 77; }
# shellcheck source=lvm_isolated.sh
. "$(dirname "$0")/lvm_isolated.sh"
lvm_sandbox nglabel
lvm_of() { jq -c '.checks[] | select(.check == "lvm")' "$1"; }
evidence() { jq -r --arg s "$2" '.evidence[] | select(.source == $s) | .observed' <<<"$1"; }

# 1. This host as it is, before any test device exists. blkid -p probes the device itself
# (no cache); a device blkid cannot open is one lvm cannot open either.
# A device whose open is refused with EPERM (a device cgroup, or this sandbox's policy for its
# mounted root disk) is one neither blkid nor lvm can read: nodegate must say UNKNOWN for it.
labelled_by_blkid=()
refused=()
for d in /sys/class/block/*; do
  name=${d##*/}
  [ "$(cat "$d/size")" != 0 ] || continue
  node=/dev/${name//!//}
  if ! python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK))' "$node" 2>/dev/null; then
    python3 -c 'import os, sys
try: os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
except PermissionError as e: sys.exit(0 if e.errno == 1 else 1)
sys.exit(1)' "$node" && refused+=("$name")
    continue
  fi
  [ "$(blkid -p -s TYPE -o value "$node" 2>/dev/null || true)" = LVM2_member ] && labelled_by_blkid+=("$name")
done
"$NODEGATE" check --output json >"$tmp/host.json" 2>"$tmp/host.err" || true
got=$(lvm_of "$tmp/host.json")
scan=$(evidence "$got" "lvm label scan")
echo "host: blkid finds LVM2 PVs on: ${labelled_by_blkid[*]:-none}; open refused (EPERM): ${refused[*]:-none}"
echo "host: nodegate: $(evidence "$got" "lvm command") | $scan"
echo "host: lvm probe took $(jq -r .duration_seconds <<<"$got") s"
if [ "${#refused[@]}" != 0 ]; then
  [ "$(jq -r .reason <<<"$got")" = BlockDevicesRefused ] || fail "host with refused ${refused[*]}: $(jq -r '"\(.status) \(.reason)"' <<<"$got")"
  for r in "${refused[@]}"; do
    case "$scan" in *" $r"*) ;; *) fail "host scan evidence does not name the refused $r: $scan";; esac
  done
elif [ "${#labelled_by_blkid[@]}" = 0 ]; then
  [ "$(evidence "$got" "lvm command")" = "lvm (not run)" ] || fail "host without PVs: lvm was run ($scan)"
  case "$scan" in *"none carries an LVM2 label") ;; *) fail "host scan evidence: $scan";; esac
  [ "$(jq -r '"\(.status) \(.reason)"' <<<"$got")" = "PASS NoVolumeGroups" ] || fail "host verdict: $got"
else
  [ "$(evidence "$got" "lvm command")" = "lvm" ] || fail "host with PVs (${labelled_by_blkid[*]}): lvm not run"
  case "$scan" in *"carries an LVM2 label") ;; *) fail "host scan evidence: $scan";; esac
fi

# 2. Three loop devices: zeros, a PV in a VG (label in sector 1), a PV labelled in sector 3.
truncate -s 64M "$tmp/zero.img" "$tmp/pv1.img" "$tmp/pv3.img"
for f in zero pv1 pv3; do attach_loop "$tmp/$f.img"; done
zero=${loops[0]} pv1=${loops[1]} pv3=${loops[2]}
isolated_lvm_config "$tmp" "$pv1" "$pv3" "$zero"
lvmx pvcreate -q "$pv1" >/dev/null
lvmx vgcreate -q "$vg" "$pv1" >/dev/null
lvmx pvcreate -q --labelsector 3 "$pv3" >/dev/null
cmd=$lvm_cmd

# check_one LOOP: `nodegate check` with a sysfs and devfs holding only LOOP; prints the lvm check.
check_one() {
  local name=${1##*/} dir=$tmp/root-${1##*/}
  mkdir -p "$dir/sys/class/block" "$dir/dev"
  ln -sfn "/sys/class/block/$name" "$dir/sys/class/block/$name"
  ln -sfn "$1" "$dir/dev/$name"
  "$NODEGATE" check --output json --path.sysfs "$dir/sys" --path.devfs "$dir/dev" \
    --lvm-command "$cmd" >"$dir/out.json" 2>"$dir/err.txt" || true
  lvm_of "$dir/out.json"
}

for l in "$zero" "$pv1" "$pv3"; do
  echo "blkid $l: $(blkid -p -s TYPE -o value "$l" 2>/dev/null || echo none)"
done
[ "$(blkid -p -s TYPE -o value "$zero" 2>/dev/null || true)" = "" ] || fail "blkid sees a type on the zeroed device"
[ "$(blkid -p -s TYPE -o value "$pv1")" = LVM2_member ] || fail "blkid does not see the PV on $pv1"
[ "$(blkid -p -s TYPE -o value "$pv3")" = LVM2_member ] || fail "blkid does not see the PV on $pv3"

got=$(check_one "$zero")
echo "zeros: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got") | $(evidence "$got" "lvm label scan") ($(jq -r .duration_seconds <<<"$got") s)"
[ "$(jq -r '"\(.status) \(.reason)"' <<<"$got")" = "PASS NoVolumeGroups" ] || fail "zeros: $got"
[ "$(evidence "$got" "lvm command")" = "$cmd (not run)" ] || fail "zeros: lvm was run: $(evidence "$got" "lvm command")"
[ "$(evidence "$got" "lvm label scan")" = "1 block devices read; none carries an LVM2 label" ] \
  || fail "zeros: scan evidence $(evidence "$got" "lvm label scan")"

got=$(check_one "$pv1")
echo "pv1: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got") | $(evidence "$got" "lvm label scan") ($(jq -r .duration_seconds <<<"$got") s)"
[ "$(evidence "$got" "lvm label scan")" = "1 block devices read; ${pv1##*/} (sector 1) carries an LVM2 label" ] \
  || fail "pv1: scan evidence $(evidence "$got" "lvm label scan")"
[ "$(evidence "$got" "lvm command")" = "$cmd" ] || fail "pv1: lvm not run"
[ "$(jq -r '"\(.status) \(.reason)"' <<<"$got")" = "PASS VolumeGroupsHealthy" ] || fail "pv1: $got"
[ -n "$(evidence "$got" "volume group $vg")" ] || fail "pv1: lvm's report lacks $vg"

got=$(check_one "$pv3")
echo "pv3: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got") | $(evidence "$got" "lvm label scan")"
[ "$(evidence "$got" "lvm label scan")" = "1 block devices read; ${pv3##*/} (sector 3) carries an LVM2 label" ] \
  || fail "pv3: scan evidence $(evidence "$got" "lvm label scan")"
[ "$(evidence "$got" "lvm command")" = "$cmd" ] || fail "pv3: lvm not run"

# 3. The same PV, but the devfs entry is not its node: never judged as "no label".
mkdir -p "$tmp/wrong/sys/class/block" "$tmp/wrong/dev"
ln -sfn "/sys/class/block/${pv1##*/}" "$tmp/wrong/sys/class/block/${pv1##*/}"
ln -sfn "$zero" "$tmp/wrong/dev/${pv1##*/}"
"$NODEGATE" check --output json --path.sysfs "$tmp/wrong/sys" --path.devfs "$tmp/wrong/dev" \
  --lvm-command "$cmd" >"$tmp/wrong.json" 2>/dev/null || true
got=$(lvm_of "$tmp/wrong.json")
case "$(evidence "$got" "lvm label scan")" in *"lvm decides") ;; *) fail "wrong node: $(evidence "$got" "lvm label scan")";; esac
[ "$(evidence "$got" "lvm command")" = "$cmd" ] || fail "wrong node: lvm not run"

[ "$fails" = 0 ] || exit 1
echo PASS
