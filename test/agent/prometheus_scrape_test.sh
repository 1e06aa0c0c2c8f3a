#!/usr/bin/env bash
# A real Prometheus server (Debian package) scrapes a running agent; its query API must return
# nodegate_check_success for every check the agent reports, and `promtool check metrics` must
# accept a real scrape.
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || fail "prometheus not installed (tools/install-deps.sh installs it)"
command -v promtool >/dev/null || fail "promtool not installed"

work=$(mktemp -d /tmp/nodegate-agent-prom.XXXXXX)
on_exit "rm -rf $work"
start_agent "$work/agent.log" --kube none --listen 127.0.0.1:19210 --debug-listen 127.0.0.1:19211 --resync 2

curl -sf http://127.0.0.1:19210/metrics >"$work/scrape.txt"
if ! promtool check metrics <"$work/scrape.txt" >"$work/promtool.txt" 2>&1; then
  cat "$work/promtool.txt" >&2
  fail "promtool check metrics rejected the scrape"
fi
echo "promtool check metrics: ok ($(grep -vc '^#' "$work/scrape.txt") samples)"

mapfile -t checks < <(curl -sf http://127.0.0.1:19211/api/v1/checks | jq -r '.checks[].check' | sort)
[ "${#checks[@]}" -gt 0 ] || fail "agent reports no checks"

cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: nodegate
    static_configs:
      - targets: ["127.0.0.1:19210"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:19212 --log.level=warn >"$work/prometheus.log" 2>&1 &
prom=$!
on_exit "kill $prom 2>/dev/null; wait $prom 2>/dev/null"

query() { curl -sf --get http://127.0.0.1:19212/api/v1/query --data-urlencode "query=$1"; }
got_all() {
  local have
  have=$(query 'nodegate_check_success{job="nodegate"}' | jq -r '.data.result[].metric.check' | sort)
  [ "$have" = "$(printf '%s\n' "${checks[@]}")" ]
}
if ! wait_until 60 got_all; then
  cat "$work/prometheus.log" >&2
  query 'nodegate_check_success' >&2 || true
  fail "prometheus did not return nodegate_check_success for every check (${checks[*]})"
fi
up=$(query 'up{job="nodegate"}' | jq -r '.data.result[0].value[1]')
[ "$up" = "1" ] || fail "prometheus says the target is down"
gate=$(query 'nodegate_gate_open' | jq -r '.data.result | length')
[ "$gate" = "1" ] || fail "nodegate_gate_open missing in prometheus"
states=$(query 'sum by (check) (nodegate_check_status)' | jq -r '[.data.result[].value[1]] | unique | join(",")')
[ "$states" = "1" ] || fail "state set does not sum to 1 per check: $states"
echo "prometheus returned nodegate_check_success for ${#checks[@]} checks: ${checks[*]}"
