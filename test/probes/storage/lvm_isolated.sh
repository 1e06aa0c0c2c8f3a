# Sourced by the real-LVM tests.
#
# lvm_sandbox NAME: the frame every real-LVM test shares. Skips (exit 77, saying why) without lvm
# or root; sets tmp (a fresh directory), vg (a VG name of this run), loops (attach_loop appends),
# fails and fail(), lvmx (lvm under the private configuration) and lvm_cmd (the same, as a
# --lvm-command value); on exit removes the VG, detaches the loop devices and deletes tmp, also
# when the test fails half-way.
lvm_sandbox() {
  command -v lvm >/dev/null || { echo "SKIP: lvm2 is not installed (tools/install-deps.sh installs it)"; exit 77; }
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root for losetup"; exit 77; }
  tmp=$(mktemp -d "/tmp/nodegate-$1-XXXXXX")
  vg="$1$$"
  loops=()
  fails=0
  lvm_cmd="env LVM_SYSTEM_DIR=$tmp/etc LVM_SUPPRESS_FD_WARNINGS=1 lvm"
  export LVM_SUPPRESS_FD_WARNINGS=1
  trap lvm_sandbox_cleanup EXIT
}
lvm_sandbox_cleanup() {
  set +e
  [ -d "$tmp/etc" ] && lvmx vgremove -f "$vg" >/dev/null 2>&1
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  rm -rf "$tmp"
}
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
lvmx() { LVM_SYSTEM_DIR="$tmp/etc" lvm "$@"; }
# attach_loop IMAGE: a loop device for IMAGE, remembered for the cleanup.
attach_loop() { loops+=("$(losetup -f --show "$1")"); }

# isolated_lvm_config DIR DEVICE...: writes DIR/etc/lvm.conf and
# lvmlocal.conf so that lvm run with LVM_SYSTEM_DIR=DIR/etc sees only DEVICEs, locks under
# DIR/lock, and stamps VGs with a system ID of its own — every other lvm on this machine (the
# host's config, other tests' `nodegate check`) then treats the test VGs as foreign and ignores
# them. No udev, no dmeventd, no backups: this kernel has no device-mapper to activate anything.
isolated_lvm_config() {
  local dir=$1; shift
  local accept="" d
  for d in "$@"; do accept+="\"a|^${d}\$|\", "; done
  mkdir -p "$dir/etc" "$dir/lock"
  cat >"$dir/etc/lvm.conf" <<CONF
devices {
  filter = [ ${accept}"r|.*|" ]
  global_filter = [ ${accept}"r|.*|" ]
  use_devicesfile = 0
  hints = "none"
  obtain_device_list_from_udev = 0
}
global {
  system_id_source = "lvmlocal"
  locking_dir = "$dir/lock"
}
activation { udev_sync = 0  udev_rules = 0  monitoring = 0 }
backup { backup = 0  archive = 0 }
CONF
  echo "local { system_id = \"nodegate-test-$$\" }" >"$dir/etc/lvmlocal.conf"
}
