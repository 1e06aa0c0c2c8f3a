#!/usr/bin/env bash
# local-pv on real mounts: a kubelet directory whose CSI volumes are a tmpfs, a loop-mounted ext4,
# a read-only bind mount and a block volume on a loop device set read-only with blockdev.
# statvfs figures must equal df's; both read-only volumes must be flagged (mountinfo, BLKROGET).
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root for mount and losetup"; exit 77; }

tmp=$(mktemp -d /tmp/nodegate-localpv-XXXXXX)
kubelet="$tmp/kubelet"
mounts=()
loops=()
cleanup() {
  set +e
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" 2>/dev/null; done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

csi() {  # csi POD PV -> mount dir, with kubelet's vol_data.json beside it
  local d="$kubelet/pods/$1/volumes/kubernetes.io~csi/$2"
  mkdir -p "$d/mount"
  printf '{"driverName":"topolvm.io","specVolID":"%s","volumeHandle":"%s"}' "$2" "$2" >"$d/vol_data.json"
  echo "$d/mount"
}

m=$(csi pod-1 pvc-tmpfs)
mount -t tmpfs -o size=64m nodegate-test "$m"; mounts+=("$m")
dd if=/dev/zero of="$m/data" bs=1M count=10 status=none

truncate -s 48M "$tmp/ext4.img"
mkfs.ext4 -q -F "$tmp/ext4.img"
loops+=("$(losetup -f --show "$tmp/ext4.img")")
m=$(csi pod-1 pvc-ext4)
mount "${loops[-1]}" "$m"; mounts+=("$m")
dd if=/dev/urandom of="$m/data" bs=1M count=5 status=none
sync

mkdir -p "$tmp/src"
m=$(csi pod-2 pvc-ro)
mount --bind "$tmp/src" "$m"; mounts+=("$m")
mount -o remount,bind,ro "$m"

truncate -s 16M "$tmp/blk.img"
loops+=("$(losetup -f --show "$tmp/blk.img")")
blockdev --setro "${loops[-1]}"
mkdir -p "$kubelet/pods/pod-3/volumeDevices/kubernetes.io~csi"
ln -s "${loops[-1]}" "$kubelet/pods/pod-3/volumeDevices/kubernetes.io~csi/pvc-blk"

cat >"$tmp/cfg.json" <<CFG
{"checks": {"local-pv": {"kubelet_dir": "$kubelet"}}}
CFG
run() {
  "$NODEGATE" check --output json --config "$1" --lvm-command "/nonexistent/lvm-$$" \
    >"$tmp/out.json" 2>"$tmp/err.txt" || true
  jq -c '.checks[] | select(.check == "local-pv")' "$tmp/out.json"
}
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
metric() { jq -r --arg n "$2" --arg pv "$3" '.metrics[] | select(.name == $n and .labels.pv == $pv) | .value' <<<"$1"; }

got=$(run "$tmp/cfg.json")
echo "local-pv: $(jq -r '"\(.status) \(.reason): \(.message)"' <<<"$got")"
[ "$(jq -r .status <<<"$got")" = FAIL ] || fail "status $(jq -r .status <<<"$got")"
[ "$(jq -r .reason <<<"$got")" = VolumeReadOnly ] || fail "reason $(jq -r .reason <<<"$got")"
msg=$(jq -r .message <<<"$got")
case $msg in *"PV pvc-ro is read-only: mounted ro"*) ;; *) fail "pvc-ro not flagged: $msg";; esac
case $msg in *"PV pvc-blk is read-only: block device read-only (BLKROGET)"*) ;; *) fail "pvc-blk not flagged: $msg";; esac
for pv in pvc-ro pvc-blk; do [ "$(metric "$got" nodegate_local_pv_read_only $pv)" = 1 ] || fail "$pv read_only metric"; done
for pv in pvc-tmpfs pvc-ext4; do [ "$(metric "$got" nodegate_local_pv_read_only $pv)" = 0 ] || fail "$pv read_only metric"; done

# statvfs against df, byte for byte (df's Used is f_blocks - f_bfree, as ours).
for pv in pvc-tmpfs pvc-ext4; do
  m="$kubelet/pods/pod-1/volumes/kubernetes.io~csi/$pv/mount"
  read -r df_used df_size < <(df -B1 --output=used,size "$m" | tail -1)
  used=$(metric "$got" nodegate_local_pv_used_bytes $pv)
  size=$(metric "$got" nodegate_local_pv_capacity_bytes $pv)
  echo "$pv: used $used (df $df_used), size $size (df $df_size)"
  [ "$used" = "$df_used" ] || fail "$pv used $used, df says $df_used"
  [ "$size" = "$df_size" ] || fail "$pv size $size, df says $df_size"
done
tmpfs_used=$(metric "$got" nodegate_local_pv_used_bytes pvc-tmpfs)
[ "$tmpfs_used" -ge $((10 << 20)) ] || fail "tmpfs used $tmpfs_used < the 10 MiB written"

# Read-only where the admin expects it is fine.
cat >"$tmp/cfg-ro.json" <<CFG
{"checks": {"local-pv": {"kubelet_dir": "$kubelet", "expected_read_only": ["pvc-ro", "pvc-blk"]}}}
CFG
got=$(run "$tmp/cfg-ro.json")
[ "$(jq -r '"\(.status) \(.reason)"' <<<"$got")" = "PASS LocalVolumesHealthy" ] || fail "with expected_read_only: $(jq -c '{status,reason,message}' <<<"$got")"

# Making the loop device writable again clears the flag: BLKROGET is read fresh every run.
blockdev --setrw "${loops[-1]}"
got=$(run "$tmp/cfg.json")
[ "$(metric "$got" nodegate_local_pv_read_only pvc-blk)" = 0 ] || fail "pvc-blk still read-only after --setrw"

[ "$fails" = 0 ] || { cat "$tmp/err.txt" >&2; exit 1; }
echo PASS
