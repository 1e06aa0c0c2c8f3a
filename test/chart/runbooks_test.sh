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
