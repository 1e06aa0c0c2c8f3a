#!/usr/bin/env bash
# `nodegate check` against / on this machine, a real host where no ordinary guest runs (see
# ENVIRONMENT.md): the CPU shows no vmx/svm, and /dev/kvm is backed by kvm_pvm, which creates VMs
# but cannot take a standard guest to long mode. So cpu-virt and kvm-device must FAIL, telling
# the same story, and the exit code must be 1. tun and vhost-net are asserted against what the
# kernel really shows.
set -euo pipefail
: "${NODEGATE:?path of the nodegate binary}"
out=$(mktemp /tmp/nodegate-realhost-XXXXXX.json)
trap 'rm -f "$out"' EXIT

rc=0
"$NODEGATE" check --output json >"$out" || rc=$?
status() { jq -r --arg c "$1" '.checks[] | select(.check == $c) | .status' "$out"; }
fail() { echo "FAIL: $*" >&2; jq '.checks[] | {check, status, reason, message}' "$out" >&2; exit 1; }

[ "$rc" = 1 ] || fail "exit code $rc, want 1 (a check fails on this host)"
if grep -qwE 'vmx|svm' /proc/cpuinfo; then
  echo "SKIP: this machine's CPU shows vmx/svm; it is not the no-KVM host the test expects" >&2
  exit 0
fi
[ "$(status cpu-virt)" = FAIL ] || fail "cpu-virt is $(status cpu-virt), want FAIL"
# kvm-device follows the KVM backend the kernel really has (/sys/module): no KVM, FAIL; kvm_pvm
# (this machine), FAIL at the test guest's way to long mode, naming the backend; a hardware
# backend with a working /dev/kvm, PASS. python's ioctl is the independent witness that /dev/kvm
# answers at all.
field() { jq -r --arg c "$1" --arg f "$2" '.checks[] | select(.check == $c) | .[$f]' "$out"; }
if [ ! -e /sys/class/misc/kvm ]; then
  [ "$(status kvm-device)" = FAIL ] || fail "kvm-device is $(status kvm-device) without a kvm driver, want FAIL"
elif [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] && [ ! -d /sys/module/kvm_amd ]; then
  python3 -c 'import os,fcntl,sys; fd=os.open("/dev/kvm",os.O_RDWR); sys.exit(0 if fcntl.ioctl(fd,0xAE00,0)==12 else 1)' ||
    fail "/dev/kvm does not answer KVM_GET_API_VERSION here"
  [ "$(status kvm-device)" = FAIL ] || fail "kvm-device is $(status kvm-device) on kvm_pvm, want FAIL"
  [ "$(field kvm-device reason)" = GuestCannotEnterLongMode ] || fail "kvm-device reason $(field kvm-device reason)"
  field kvm-device message | grep -q "cannot enter long mode" || fail "kvm-device message does not say long mode"
  field kvm-device message | grep -q kvm_pvm || fail "kvm-device message does not name kvm_pvm"
  field cpu-virt message | grep -q "KVM here is kvm_pvm" || fail "cpu-virt does not name kvm_pvm"
  [ "$(jq -r '.checks[] | select(.check=="kvm-device") | .labels.kvm' "$out")" = false ] ||
    fail "kvm label should be false"
  # No KVM module is guessed from the CPU vendor: kvm_amd is not loaded here.
  if jq -r '.checks[] | select(.check=="kernel-modules" or .check=="nested-virt") | .message, (.evidence[] | .source + " " + .observed)' "$out" | grep -q kvm_amd; then
    fail "kernel-modules or nested-virt names kvm_amd, which is not loaded"
  fi
elif [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; then
  [ "$(status kvm-device)" = PASS ] || fail "kvm-device is $(status kvm-device) on a hardware KVM backend"
else
  [ "$(status kvm-device)" != PASS ] || fail "kvm-device PASS without a known KVM backend"
fi

# tun: the real node and driver decide.
if [ -c /dev/net/tun ] && [ -e /sys/class/misc/tun ]; then
  case "$(status tun)" in PASS | WARN) ;; *) fail "tun is $(status tun) but /dev/net/tun works" ;; esac
else
  [ "$(status tun)" = FAIL ] || fail "tun is $(status tun) but there is no usable /dev/net/tun"
fi
# vhost-net: absent here means WARN (QEMU falls back to userspace virtio-net), never FAIL.
if [ ! -e /dev/vhost-net ]; then
  [ "$(status vhost-net)" = WARN ] || fail "vhost-net is $(status vhost-net), want WARN"
  [ "$(jq -r '.checks[] | select(.check=="vhost-net") | .labels["vhost-net"]' "$out")" = false ] ||
    fail "vhost-net label should be false"
fi
# Every non-PASS line carries a hint; the gate is closed.
missing=$(jq -r '.checks[] | select(.status != "PASS" and .hint == "") | .check' "$out")
[ -z "$missing" ] || fail "no hint on: $missing"
[ "$(jq -r .gate.open "$out")" = false ] || fail "gate open on a no-KVM host"

# The table form agrees and exits the same way.
rc=0
"$NODEGATE" check --color never >/dev/null || rc=$?
[ "$rc" = 1 ] || fail "table exit code $rc, want 1"
echo "ok: cpu-virt=$(status cpu-virt) kvm-device=$(status kvm-device) tun=$(status tun) vhost-net=$(status vhost-net)"
