#!/usr/bin/env bash
# virt-host-validate (libvirt, a program no one here wrote) against nodegate: every check it
# makes must map to a nodegate check that ran, on this host for real and on captured outputs of
# other hosts; and where both speak about the same thing on this host they must agree.
set -euo pipefail
: "${NODEGATE:?}" "${NODEGATE_SRC:?}"
tool="$NODEGATE_SRC/tools/compare-virt-host-validate.sh"
tmp=$(mktemp -d /tmp/nodegate-vhvtest-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v virt-host-validate >/dev/null || fail "virt-host-validate missing: tools/install-deps.sh installs libvirt-clients"
NODEGATE="$NODEGATE" bash "$tool" >"$tmp/here.txt" || { cat "$tmp/here.txt"; fail "nodegate does not cover every check on this host"; }
cat "$tmp/here.txt"
grep -q ", 0 not covered" "$tmp/here.txt" || fail "coverage line missing"

# Agreement on this host where both judge the same thing (statuses as virt-host-validate prints).
row() { grep -E "^$1 " "$tmp/here.txt" | head -1; }
if virt-host-validate qemu 2>/dev/null | grep -q "hardware virtualization.*FAIL"; then
  row "for hardware virtualization" | grep -qE "FAIL +cpu-virt +FAIL" || fail "cpu-virt disagrees with virt-host-validate"
fi
if row "if device /dev/vhost-net exists" | grep -q " WARN "; then
  row "if device /dev/vhost-net exists" | grep -qE " vhost-net +WARN" || fail "vhost-net disagrees"
fi
if row "if device /dev/net/tun exists" | grep -q " PASS "; then
  row "if device /dev/net/tun exists" | grep -qE " tun +(PASS|WARN)" || fail "tun disagrees"
fi

# Captured outputs of other hosts (test/fixtures/real, see SOURCES.md): all lines covered.
n=0
for f in "$NODEGATE_SRC"/test/fixtures/real/virt-host-validate-*.txt; do
  bash "$tool" --vhv-output "$f" >"$tmp/cap.txt" 2>&1 || { cat "$tmp/cap.txt"; fail "unmapped line in $(basename "$f")"; }
  n=$((n + 1))
done
[ "$n" -ge 4 ] || fail "expected at least 4 captured outputs, found $n"

# The mapping is not a catch-all: an unknown check must be reported as not covered.
printf '  QEMU: Checking for frobnicator support                       : PASS\n' >"$tmp/bogus.txt"
if bash "$tool" --vhv-output "$tmp/bogus.txt" >/dev/null 2>&1; then fail "an unknown check was accepted"; fi
echo "ok: this host and $n captured outputs fully covered"
