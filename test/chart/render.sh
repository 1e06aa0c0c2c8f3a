#!/usr/bin/env bash
# Lints the chart and renders it for every case the other chart tests read (ctest fixture
# chart_render). Cases: values file x Kubernetes version (x monitoring APIs). Output:
# $NODEGATE_BUILD/test-chart/render/<case>.yaml.
set -euo pipefail
src=${NODEGATE_SRC:?}
out=${NODEGATE_BUILD:?}/test-chart/render
helm=$("$src/tools/helm.sh") || { echo "FAIL: helm is not available (tools/install-deps.sh installs it)" >&2; exit 1; }
chart=$src/charts/nodegate
values=$src/test/chart/values
rm -rf "$out" && mkdir -p "$out"
mon=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PodMonitor
     --api-versions monitoring.coreos.com/v1/PrometheusRule --api-versions monitoring.coreos.com/v1)

# The one value without a default: nodegate publishes no image (the chart refuses to render
# without one, below).
img=(--set image.repository=registry.example/nodegate)
"$helm" lint --strict "$chart" "${img[@]}"
# helm lint has no --api-versions: with monitoring.yaml the guarded templates stop at their fail,
# which lint reports as INFO; helm template below renders them with the APIs present.
for f in "$values"/*.yaml; do
  for kube in 1.29.0 1.31.0; do
    "$helm" lint --strict "$chart" "${img[@]}" -f "$f" --kube-version "$kube" >"$out/lint.out" 2>&1 \
      || { cat "$out/lint.out" >&2; echo "FAIL: helm lint --strict -f $f --kube-version $kube" >&2; exit 1; }
  done
done

render() {  # render CASE VALUES KUBE [extra helm args]
  local name=$1 vals=$2 kube=$3; shift 3
  "$helm" template nodegate "$chart" --namespace nodegate "${img[@]}" -f "$values/$vals.yaml" --kube-version "$kube" "$@" \
    >"$out/$name.yaml"
  echo "rendered $name: $(grep -c '^kind:' "$out/$name.yaml") objects"
}
render defaults-1.31 defaults 1.31.0
render defaults-1.29 defaults 1.29.0
render privileged-1.31 privileged 1.31.0
render monitoring-1.31 monitoring 1.31.0 "${mon[@]}"
render monitoring-1.29 monitoring 1.29.0 "${mon[@]}"
render rbac-proxy-1.31 rbac-proxy 1.31.0 "${mon[@]}"
render custom-1.31 custom 1.31.0
render no-device-probe-1.31 defaults 1.31.0 --set deviceProbe.enabled=false
# Without hostNetwork the kubelet reaches the pod's address only (chart_test: health probes).
render podnet-1.31 defaults 1.31.0 --set hostNetwork=false

# No image: a clear error that says how to get one, not pods in ImagePullBackOff.
if "$helm" template nodegate "$chart" >"$out/no-image.out" 2>&1; then
  echo "FAIL: the chart rendered without image.repository" >&2; exit 1
fi
for want in "image.repository is not set" "tools/image/Dockerfile" "--set image.repository="; do
  grep -q -- "$want" "$out/no-image.out" || { cat "$out/no-image.out" >&2; echo "FAIL: the no-image error does not say $want" >&2; exit 1; }
done
# Asking for monitoring objects on a cluster without the prometheus-operator API is a clear error.
if "$helm" template nodegate "$chart" "${img[@]}" -f "$values/monitoring.yaml" >"$out/no-api.out" 2>&1; then
  echo "FAIL: monitoring values rendered without the monitoring.coreos.com/v1 API" >&2; exit 1
fi
grep -q "needs the monitoring.coreos.com/v1" "$out/no-api.out" || { cat "$out/no-api.out" >&2; exit 1; }
# Bad values are rejected by values.schema.json, with the key named.
for bad in agent.prefix=kubevirt.io agent.kube=sometimes agent.metricsPort=0 unknownKey=1; do
  if "$helm" template nodegate "$chart" "${img[@]}" --set "$bad" >"$out/bad.out" 2>&1; then
    echo "FAIL: --set $bad was accepted" >&2; exit 1
  fi
  grep -q "schema" "$out/bad.out" || { cat "$out/bad.out" >&2; exit 1; }
done
# NOTES.txt (helm template does not render it; a client-side dry-run install does, offline).
"$helm" install nodegate "$chart" --namespace nodegate "${img[@]}" --dry-run=client >"$out/install.out"
sed -n '/^NOTES:/,$p' "$out/install.out" >"$out/NOTES.txt"
for want in "port-forward" "127.0.0.1:9811" "developerConfiguration" "nodeSelectors" "nodegate.io/vm-ready" \
            "workloads.nodePlacement" "Wait until" "kubectl get nodes -L nodegate.io/vm-ready" \
            "pod-security.kubernetes.io/enforce=privileged" "HyperConverged" "SecurityContextConstraints"; do
  grep -q -- "$want" "$out/NOTES.txt" || { cat "$out/NOTES.txt" >&2; echo "FAIL: NOTES.txt does not mention $want" >&2; exit 1; }
done
echo "render: ok"
