#!/usr/bin/env bash
# promtool check rules and promtool test rules on the PrometheusRule helm renders, and a check that
# every alert has at least one test case in test/chart/alerts_test.yaml that expects it to fire.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
command -v promtool >/dev/null || { echo "FAIL: promtool is missing (Debian package prometheus)" >&2; exit 1; }
dir=$build/test-chart/rules
rm -rf "$dir" && mkdir -p "$dir"
bash "$src/test/chart/py.sh" - "$build/test-chart/render/monitoring-1.31.yaml" "$dir/nodegate-rules.yaml" \
  "$src/test/chart/alerts_test.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
(rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
yaml.safe_dump(rule["spec"], open(sys.argv[2], "w"), sort_keys=False)
alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
tests = yaml.safe_load(open(sys.argv[3]))["tests"]
fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a.get("exp_alerts")}
silent = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if not a.get("exp_alerts")}
missing = sorted(alerts - fired)
quiet = sorted(alerts - silent)
unknown = sorted((fired | silent) - alerts)
if missing or quiet or unknown:
    sys.exit(f"FAIL: alerts without a firing test: {missing}; without a silent case: {quiet}; tests of unknown alerts: {unknown}")
print(f"{len(alerts)} alerts, each with a firing and a silent test case")
PY
cp "$src/test/chart/alerts_test.yaml" "$dir/"
promtool check rules "$dir/nodegate-rules.yaml"
(cd "$dir" && promtool test rules alerts_test.yaml)
