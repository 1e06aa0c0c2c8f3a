#!/usr/bin/env bash
# The guest harness (test/guest/lib.sh) on the real thing: the stock Debian cloud kernel and a
# busybox initramfs under qemu-system-x86_64 -accel tcg, virtio-net on a real tap device in a
# network namespace, the control channel, and the hard time bound. Prints the boot times.
set -euo pipefail
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$SRC/test/guest/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespace and tap device)"; exit 77; }

NS=nggb$$
fails=0
check() {  # check "description" command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
quiet() { "$@" > /dev/null; }
cleanup() { guest_cleanup; ip netns del $NS 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

guest_assets
echo "kernel $GUEST_KVER ($GUEST_KERNEL_PKG), modules in load order: $GUEST_MODULES"

ip netns add $NS
ip -n $NS link set lo up
ip -n $NS tuntap add dev tap0 mode tap
ip -n $NS addr add 10.0.2.1/24 dev tap0
ip -n $NS link set tap0 up

# A guest whose bound ends it mid-boot, beside the real one: the bound holds whatever the guest does.
guest_boot bounded --accel tcg --bound 3
guest_boot vm --accel tcg --bound 120 --netns $NS --tap tap0 \
  --net static:10.0.2.2/24,10.0.2.1,10.0.2.1 --append ng.search=ns1.svc.cluster.local,cluster.local

check "TCG boot reaches the initramfs's init" guest_wait vm 'ng-guest: init reached' 90
T_INIT=$(guest_elapsed vm)
check "init loads the modules and configures eth0 (ready)" guest_ready vm 60
T_READY=$(guest_elapsed vm)
echo "boot: init reached after $T_INIT s, ready after $T_READY s (TCG, 1 vCPU, started with a second guest)"
if [ $fails -gt 0 ]; then tail -20 "$GUEST_RUN/vm/console.log"; exit 1; fi

# Every module is loaded after what modules.dep says it needs (read here with awk, not with the
# code that computed the order), and the eth0 the tap feeds is virtio_net's.
check "module order honours the kernel's modules.dep" awk -v order="$GUEST_MODULES" '
  BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) pos[o[i]] = i }
  { m = $1; sub(/:$/, "", m); sub(/.*\//, "", m); sub(/\.ko$/, "", m); if (!(m in pos)) next
    for (i = 2; i <= NF; i++) { d = $i; sub(/.*\//, "", d); sub(/\.ko$/, "", d)
      if (!(d in pos) || pos[d] > pos[m]) { print "out of order: " m " needs " d; bad = 1 } } }
  END { exit bad }' "$GUEST_ASSETS/kernel/lib/modules/$GUEST_KVER/modules.dep"
guest_run vm 10 'cut -d" " -f1 /proc/modules' > "$GUEST_RUN/modules" || true
check "the guest kernel has every module of the list loaded" bash -c \
  "for m in $GUEST_MODULES; do grep -qx \$m $GUEST_RUN/modules || exit 1; done"
check "eth0 is driven by virtio_net" bash -c \
  "guest_out=\$(python3 $GUEST_SRC/guest_ctl.py $GUEST_RUN/vm/ctl.sock 10 'basename \$(readlink /sys/class/net/eth0/device/driver)'); [ \"\$guest_out\" = virtio_net ]"

# (The fetched static busybox serves as the host's ping too: no ping package needed.)
check "host reaches the guest through the tap (ping 10.0.2.2)" \
  quiet ip netns exec $NS "$GUEST_ASSETS/busybox/bin/busybox" ping -c 2 -W 2 -q 10.0.2.2
check "guest reaches the host through virtio-net (ping 10.0.2.1)" \
  quiet guest_run vm 10 'ping -c 2 -W 2 -q 10.0.2.1'
guest_run vm 10 'cat /etc/resolv.conf' > "$GUEST_RUN/resolv" || true
check "static network: resolv.conf with the search list and nameserver" bash -c \
  "grep -qx 'search ns1.svc.cluster.local cluster.local' $GUEST_RUN/resolv && grep -qx 'nameserver 10.0.2.1' $GUEST_RUN/resolv"

set +e
guest_run vm 10 'echo out; echo err >&2; exit 7' > "$GUEST_RUN/run1" 2>&1; rc=$?
guest_run vm 1 'sleep 3' > /dev/null 2>&1; rc_timeout=$?
guest_run vm 10 'echo after' > "$GUEST_RUN/run2" 2>&1; rc_after=$?
set -e
check "control channel: output and exit code come back" bash -c \
  "[ $rc = 7 ] && grep -qx out $GUEST_RUN/run1 && grep -qx err $GUEST_RUN/run1"
check "control channel: a command over its time is 124, and the next one still works cleanly" bash -c \
  "[ $rc_timeout = 124 ] && [ $rc_after = 0 ] && [ \"\$(cat $GUEST_RUN/run2)\" = after ]"

# The bounded guest: gone once its 3 s (plus timeout's 5 s grace) are over.
check "hard time bound: the 3 s guest's QEMU has ended" bash -c \
  "for _ in \$(seq 100); do kill -0 ${GUEST_PID[bounded]} 2>/dev/null || exit 0; sleep 0.1; done; exit 1"

QEMU=$(pgrep -f "$GUEST_RUN/vm/" | tr '\n' ' ' || true)
guest_stop vm
check "guest_stop ends QEMU" bash -c "[ -n '$QEMU' ] && for p in $QEMU; do ! kill -0 \$p 2>/dev/null || exit 1; done"

if [ $fails -gt 0 ]; then
  echo "--- console (vm)"; tail -30 "$GUEST_RUN/vm/console.log"; cat "$GUEST_RUN/vm/qemu.log"
  echo "$fails check(s) failed"; exit 1
fi
echo "all checks passed"
