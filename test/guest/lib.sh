# Real QEMU guests for tests (sourced). A stock Debian kernel and busybox-static, fetched from
# Debian's archive into the build tree the first time a test needs them, a busybox initramfs
# built around test/guest/init, and QEMU runs with a hard time bound, the serial console in a
# file and a command channel on the second serial port. test/guest/README.md has the whole story.
#
#   guest_assets                        fetch/unpack/build once per build tree (locked); sets
#                                       GUEST_KERNEL GUEST_INITRD GUEST_KVER GUEST_MODULES
#   guest_boot NAME [options]           start a guest in the background (options below)
#   guest_boot_auto NAME [options]      the same under guest_accel's choice, TCG if KVM fails
#   guest_wait NAME PATTERN SECONDS     until the console shows PATTERN (grep -E); 1 if the time
#                                       ran out or QEMU ended first
#   guest_ready NAME SECONDS            guest_wait for init's "ready" marker, fail fast on "fatal"
#   guest_run NAME SECONDS COMMAND      run COMMAND (one line of sh) in the guest: its output and
#                                       exit code (124: no answer in time)
#   guest_stop NAME                     end the guest (idempotent); guest_cleanup ends them all
#   guest_accel [NODEGATE]              "kvm" if nodegate's kvm-device says a guest can run, else
#                                       "tcg"
# Per guest: $GUEST_RUN/NAME/{console.log,qemu.log,ctl.sock}; GUEST_PID[NAME], GUEST_T0[NAME].

GUEST_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GUEST_ASSETS=${GUEST_ASSETS:-${NODEGATE_BUILD:?NODEGATE_BUILD must point at the build tree}/guest}
GUEST_RUN=${GUEST_RUN:-$(mktemp -d /tmp/ngguest.XXXXXX)}
# The modules eth0 needs: virtio_net on virtio_pci. Their dependencies come from modules.dep.
GUEST_MODULE_ROOTS=${GUEST_MODULE_ROOTS:-"virtio_pci virtio_net"}
declare -A GUEST_PID=() GUEST_T0=() GUEST_ACCEL=()

guest_log() { echo "guest: $*" >&2; }

# _guest_fetch DIR PACKAGE...: apt-get download into DIR. Stale package lists (the archive moved
# on to a newer kernel ABI) get one `apt-get update` and a second try.
_guest_fetch() {
  local dir=$1; shift
  local opts=()
  [ "$(id -u)" != 0 ] || opts=(-o APT::Sandbox::User=root)  # root: no _apt sandbox for DIR
  if (cd "$dir" && apt-get "${opts[@]}" -qq download "$@") >&2; then return 0; fi
  [ "$(id -u)" = 0 ] || { guest_log "failed to download $*: not root, cannot apt-get update"; return 1; }
  guest_log "download of $* failed; updating the package lists once"
  apt-get update -qq >&2 && (cd "$dir" && apt-get "${opts[@]}" -qq download "$@") >&2
}

# _guest_module_order MODDIR ROOT...: the .ko paths (relative to MODDIR) in a load order where every
# module comes after what modules.dep says it needs.
_guest_module_order() {
  local moddir=$1; shift
  python3 - "$moddir/modules.dep" "$@" <<'PY'
import os, sys
deps, by_name = {}, {}
for line in open(sys.argv[1]):
    mod, _, rest = line.partition(":")
    deps[mod] = rest.split()
    by_name[os.path.basename(mod).split(".ko")[0].replace("-", "_")] = mod
order, seen = [], set()
def visit(mod):
    if mod in seen:
        return
    seen.add(mod)
    for d in deps[mod]:
        visit(d)
    order.append(mod)
for root in sys.argv[2:]:
    if root not in by_name:
        sys.exit(f"module {root} not in modules.dep")
    visit(by_name[root])
print("\n".join(order))
PY
}

# _guest_build_initrd: the initramfs from the unpacked packages and test/guest's files.
_guest_build_initrd() {
  local a=$GUEST_ASSETS root=$GUEST_ASSETS/root moddir m
  moddir=$(echo "$a"/kernel/lib/modules/*)
  rm -rf "$root" && mkdir -p "$root"/{bin,etc/ng,proc,sys,dev,tmp,run,lib/modules,lib64,usr/bin}
  mkdir -p "$root/lib/x86_64-linux-gnu"
  install -m 0755 "$a/busybox/bin/busybox" "$root/bin/busybox"
  for m in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$m" ] || ln -s busybox "$root/bin/$m"
  done
  # glibc and its getent: the stub resolver a Debian guest's programs use (search list, ndots,
  # timeout/attempts, TCP with use-vc, parallel A+AAAA), beside busybox's own nslookup.
  install -m 0755 "$a/libc6/lib/x86_64-linux-gnu/libc.so.6" "$a/libc6/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
    "$root/lib/x86_64-linux-gnu/"
  ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
  install -m 0755 "$a/libc-bin/usr/bin/getent" "$root/usr/bin/getent"
  printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n' > "$root/etc/hosts"
  : > "$root/etc/ng/modules"
  while read -r m; do
    local name; name=$(basename "$m" .ko)
    install -m 0644 "$moddir/$m" "$root/lib/modules/$name.ko"
    echo "$name" >> "$root/etc/ng/modules"
  done < <(_guest_module_order "$moddir" $GUEST_MODULE_ROOTS)
  install -m 0755 "$GUEST_SRC/init" "$root/init"
  install -m 0755 "$GUEST_SRC/udhcpc.script" "$root/etc/ng/udhcpc.script"
  # /dev/console comes from the kernel's built-in initramfs; ours is unpacked on top of it.
  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1) > "$a/initrd.gz.tmp"
  mv "$a/initrd.gz.tmp" "$a/initrd.gz"
}

# guest_assets: the kernel, modules and initramfs, once per build tree. Concurrent tests wait on
# the lock; the second finds the stamp. The initramfs is rebuilt when test/guest's inputs change.
guest_assets() {
  local need
  for need in apt-get apt-cache dpkg-deb depmod cpio gzip python3 qemu-system-x86_64; do
    command -v $need >/dev/null || { guest_log "missing $need (tools/install-deps.sh)"; return 1; }
  done
  mkdir -p "$GUEST_ASSETS"
  (
    flock 9
    set -e
    cd "$GUEST_ASSETS"
    if [ ! -f fetched.env ]; then
      local t0=$SECONDS kpkg
      # The stock cloud kernel: whatever image package the metapackage depends on today.
      kpkg=$(apt-cache depends linux-image-cloud-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')
      [ -n "$kpkg" ] || { guest_log "failed to resolve linux-image-cloud-amd64's kernel package"; exit 1; }
      rm -rf debs kernel busybox libc6 libc-bin && mkdir debs
      _guest_fetch debs "$kpkg" busybox-static libc6 libc-bin
      dpkg-deb -x debs/"$kpkg"_*.deb kernel
      dpkg-deb -x debs/busybox-static_*.deb busybox
      dpkg-deb -x debs/libc6_*.deb libc6
      dpkg-deb -x debs/libc-bin_*.deb libc-bin
      local kver; kver=$(basename "$(echo kernel/lib/modules/*)")
      # The package's postinst would run depmod; nothing is installed, so run it on the tree.
      depmod -b "$PWD/kernel" "$kver"
      { echo "GUEST_KVER=$kver"; echo "GUEST_KERNEL_PKG=$kpkg"
        for d in debs/*.deb; do echo "# $(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version)"; done
      } > fetched.env.tmp
      mv fetched.env.tmp fetched.env
      guest_log "fetched and unpacked $kpkg, busybox-static, libc6, libc-bin in $((SECONDS - t0)) s"
    fi
    local sum; sum=$(cat "$GUEST_SRC/init" "$GUEST_SRC/udhcpc.script" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
    sum="$sum-$(echo $GUEST_MODULE_ROOTS | tr ' ' +)"
    if [ "$(cat initrd.sum 2>/dev/null)" != "$sum" ] || [ ! -f initrd.gz ]; then
      _guest_build_initrd
      echo "$sum" > initrd.sum
    fi
  ) 9> "$GUEST_ASSETS/.lock" || return 1
  # shellcheck disable=SC1091
  source "$GUEST_ASSETS/fetched.env"
  GUEST_KERNEL=$(echo "$GUEST_ASSETS"/kernel/boot/vmlinuz-*)
  GUEST_INITRD=$GUEST_ASSETS/initrd.gz
  GUEST_MODULES=$(tr '\n' ' ' < "$GUEST_ASSETS/root/etc/ng/modules")
}

# guest_boot NAME [--accel kvm|tcg] [--bound SECONDS] [--netns NS] [--tap IFNAME] [--mac MAC]
#            [--net none|dhcp|static:IP/PFX,GW,DNS...] [--append WORDS] [--mem MB]
# QEMU in the background, ended by `timeout` after --bound seconds (default 300) whatever happens.
# earlyprintk puts the real-mode setup code's lines ("Probing EDD") on the serial console too, so
# a boot that stops before the kernel proper still says how far it got.
# With --tap, QEMU runs inside --netns and opens that existing tap device (virtio-net, no vhost).
guest_boot() {
  local name=$1; shift
  local accel=tcg bound=300 netns="" tap="" mac=02:00:00:00:00:02 net=none append="" mem=256
  while [ $# -gt 0 ]; do
    case $1 in
      --accel) accel=$2 ;; --bound) bound=$2 ;; --netns) netns=$2 ;; --tap) tap=$2 ;;
      --mac) mac=$2 ;; --net) net=$2 ;; --append) append=$2 ;; --mem) mem=$2 ;;
      *) guest_log "guest_boot: unknown option $1"; return 2 ;;
    esac
    shift 2
  done
  [ -n "${GUEST_KERNEL:-}" ] || guest_assets || return 1
  local dir=$GUEST_RUN/$name
  rm -rf "$dir" && mkdir -p "$dir"
  local args=(-accel "$accel" -m "$mem" -smp 1 -nodefaults -no-user-config -display none -no-reboot
    -kernel "$GUEST_KERNEL" -initrd "$GUEST_INITRD"
    -append "console=ttyS0 earlyprintk=ttyS0,115200 panic=-1 ng.net=$net $append"
    -serial "file:$dir/console.log"
    -chardev "socket,id=ctl,path=$dir/ctl.sock,server=on,wait=off" -serial chardev:ctl)
  if [ -n "$tap" ]; then
    args+=(-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no"
      -device "virtio-net-pci,netdev=n0,mac=$mac")
  fi
  local run=(timeout --kill-after=5 "$bound" qemu-system-x86_64 "${args[@]}")
  [ -z "$netns" ] || run=(ip netns exec "$netns" "${run[@]}")
  GUEST_T0[$name]=$(date +%s.%N)
  "${run[@]}" < /dev/null > "$dir/qemu.log" 2>&1 &
  GUEST_PID[$name]=$!
}

# guest_boot_auto NAME [guest_boot options]: boots under guest_accel's choice. A KVM guest that
# has not reached init after GUEST_KVM_INIT_SECONDS (30) is ended and booted again under TCG, with
# a warning: judging kvm-device is kvm_oracle_test.sh's job, the caller's test is about something
# else. Sets GUEST_ACCEL[NAME] to the accelerator the guest runs under.
guest_boot_auto() {
  local name=$1; shift
  local accel; accel=${ACCEL:-$(guest_accel)}
  guest_boot "$name" --accel "$accel" "$@" || return
  if [ "$accel" = kvm ] && ! guest_wait "$name" 'ng-guest: init reached' "${GUEST_KVM_INIT_SECONDS:-30}"; then
    guest_log "WARNING: kvm-device says a guest can run, but a KVM guest did not reach init in" \
      "${GUEST_KVM_INIT_SECONDS:-30} s (last console line: $(tail -1 "$GUEST_RUN/$name/console.log" 2>/dev/null | tr -d '\r'));" \
      "booting under TCG instead"
    guest_stop "$name"
    accel=tcg
    guest_boot "$name" --accel tcg "$@" || return
  fi
  GUEST_ACCEL[$name]=$accel
}

# guest_elapsed NAME: seconds since the guest was started (to two decimals).
guest_elapsed() {
  echo "$(date +%s.%N) ${GUEST_T0[$1]}" | awk '{printf "%.2f", $1 - $2}'
}

guest_wait() {  # NAME PATTERN SECONDS
  local name=$1 pattern=$2 deadline=$((SECONDS + $3)) log=$GUEST_RUN/$1/console.log
  while :; do
    grep -qaE "$pattern" "$log" 2>/dev/null && return 0
    [ $SECONDS -lt $deadline ] || return 1
    kill -0 "${GUEST_PID[$name]:-0}" 2>/dev/null || { grep -qaE "$pattern" "$log" 2>/dev/null; return; }
    sleep 0.1
  done
}

guest_ready() {  # NAME SECONDS
  guest_wait "$1" 'ng-guest: (ready|fatal)' "$2" && ! grep -qa 'ng-guest: fatal' "$GUEST_RUN/$1/console.log"
}

guest_run() {  # NAME SECONDS COMMAND
  python3 "$GUEST_SRC/guest_ctl.py" "$GUEST_RUN/$1/ctl.sock" "$2" "$3"
}

guest_stop() {
  local pid=${GUEST_PID[$1]:-}
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true  # its status: 124 when the bound ended it, 143 when we did
  unset "GUEST_PID[$1]"
}

guest_cleanup() {
  local n
  for n in "${!GUEST_PID[@]}"; do guest_stop "$n"; done
  [ -n "${KEEP:-}" ] || rm -rf "$GUEST_RUN"
}

# guest_accel [NODEGATE]: the accelerator nodegate itself says works. kvm only when kvm-device is
# PASS: that verdict is the claim a guest can run (test/guest/kvm_oracle_test.sh holds it to it).
guest_accel() {
  local ng=${1:-${NODEGATE:-}} status
  if [ -n "$ng" ] && [ -e /dev/kvm ]; then
    status=$("$ng" check --output json 2>/dev/null | python3 -c '
import json, sys
for c in json.load(sys.stdin).get("checks", []):
    if c.get("check") == "kvm-device":
        print(c.get("status", ""))' 2>/dev/null || true)
    if [ "$status" = PASS ]; then echo kvm; return; fi
  fi
  echo tcg
}
