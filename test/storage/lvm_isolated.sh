# Sourced by the real-LVM tests. isolated_lvm_config DIR DEVICE...: writes DIR/etc/lvm.conf and
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
