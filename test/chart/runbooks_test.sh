#!/usr/bin/env bash
# Every check the real binary runs has a runbook page (docs/runbooks/checks/<check>.md, linked by
# the page, the API and `nodegate check`), and every page there belongs to a check.
set -euo pipefail
: "${NODEGATE:?}" "${NODEGATE_SRC:?}"
dir=$NODEGATE_SRC/docs/runbooks/checks
# Exit 1 or 3 is a verdict about the fixture host, not an error here.
json=$(env -u NODEGATE_CONFIG "$NODEGATE" check --host-root "$NODEGATE_SRC/test/fixtures/hosts/intel-baremetal-vmx" \
         --lvm-command false --output json) || [ $? -le 3 ]
checks=$(jq -r '.checks[].check' <<<"$json" | sort)
[ -n "$checks" ] || { echo "FAIL: nodegate check listed no checks" >&2; exit 1; }
pages=$(cd "$dir" && ls -- *.md | sed 's/\.md$//' | sort)
fail=0
for c in $checks; do
  [ -f "$dir/$c.md" ] || { echo "FAIL: check $c has no runbook page $dir/$c.md" >&2; fail=1; }
done
for p in $pages; do
  grep -qx "$p" <<<"$checks" || { echo "FAIL: $dir/$p.md belongs to no check" >&2; fail=1; }
done
[ "$fail" = 0 ]
echo "runbooks: $(wc -w <<<"$checks") checks, each with a page"

# The device checks share one evaluation of the device node (probes/device_node.cpp): each of
# its reasons, and each reason a device check adds, is named in that check's page, so the
# on-call engineer finds every reason the check can show.
reasons_of() { grep -oE 'Status::(Fail|Warn|Unknown), "[A-Z][A-Za-z]+"|t\.bad, "[A-Z][A-Za-z]+"|^ +"[A-Z][A-Za-z]+",$' "$@" |
                 grep -oE '"[A-Z][A-Za-z]+"' | tr -d '"' | sort -u; }
shared=$(reasons_of "$NODEGATE_SRC/probes/device_node.cpp")
[ "$(wc -w <<<"$shared")" -ge 8 ] || { echo "FAIL: found only '$shared' in device_node.cpp" >&2; exit 1; }
for pair in kvm-device:kvm_device.cpp tun:tun.cpp vhost-net:vhost_net.cpp; do
  c=${pair%%:*}
  own=$(reasons_of "$NODEGATE_SRC/probes/${pair#*:}")
  for r in $shared $own; do
    grep -qw "$r" "$dir/$c.md" || { echo "FAIL: $dir/$c.md does not name reason $r" >&2; fail=1; }
  done
done
[ "$fail" = 0 ]
echo "runbooks: every device-node reason named in kvm-device, tun and vhost-net"

# kubevirt-node's page names every reason its evaluator and probe give.
own=$(grep -oE 'Status::(Fail|Warn|Unknown|Pass), "[A-Z][A-Za-z]+"|when_broken, "[A-Z][A-Za-z]+"' \
        "$NODEGATE_SRC/probes/kubevirt_node.cpp" | grep -oE '"[A-Z][A-Za-z]+"' | tr -d '"' | sort -u)
[ "$(wc -w <<<"$own")" -ge 14 ] || { echo "FAIL: found only '$own' in kubevirt_node.cpp" >&2; exit 1; }
for r in $own; do
  grep -qw "$r" "$dir/kubevirt-node.md" || { echo "FAIL: $dir/kubevirt-node.md does not name reason $r" >&2; fail=1; }
done
[ "$fail" = 0 ]
echo "runbooks: every kubevirt-node reason named in its page"
