#!/usr/bin/env bash
# promtool check rules and promtool test rules on the PrometheusRule that helm renders: the cases
# of the check, gate, thin-pool and clock alerts are built from real scrapes of the agent on
# fixture hosts (alerts_test.py), the others are hand-written (alerts_test.yaml). Every alert needs
# a case that fires and one that stays silent.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
: "${NODEGATE:?}"
command -v promtool >/dev/null || { echo "FAIL: promtool is missing (Debian package prometheus)" >&2; exit 1; }
dir=$build/test-chart/rules
rm -rf "$dir" && mkdir -p "$dir"
bash "$src/test/chart/py.sh" - "$build/test-chart/render/monitoring-1.31.yaml" "$dir/nodegate-rules.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
(rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
yaml.safe_dump(rule["spec"], open(sys.argv[2], "w"), sort_keys=False)
PY
promtool check rules "$dir/nodegate-rules.yaml"
bash "$src/test/chart/py.sh" "$src/test/chart/alerts_test.py" "$dir/nodegate-rules.yaml" \
  "$src/test/chart/alerts_test.yaml" "$dir"
