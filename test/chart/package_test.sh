#!/usr/bin/env bash
# The packaged chart: tools/chart-package.sh makes a .tgz and an index.yaml that names it with the
# Chart.yaml version, and the packaged chart renders like the source tree (values and schema
# included: a bad value is still refused).
set -euo pipefail
src=${NODEGATE_SRC:?}
out=${NODEGATE_BUILD:?}/test-chart/repo
rm -rf "$out"
bash "$src/tools/chart-package.sh" "$out" https://charts.example/nodegate >/dev/null
version=$(awk '$1 == "version:" {print $2}' "$src/charts/nodegate/Chart.yaml")
tgz=$out/nodegate-$version.tgz
[ -f "$tgz" ] || { echo "FAIL: $tgz was not made" >&2; exit 1; }
grep -q "https://charts.example/nodegate/nodegate-$version.tgz" "$out/index.yaml" \
  || { cat "$out/index.yaml" >&2; echo "FAIL: index.yaml does not list nodegate-$version.tgz" >&2; exit 1; }
helm=$("$src/tools/helm.sh")
# Rendered into a file: grep -q leaving early would fail helm with SIGPIPE under pipefail.
"$helm" template nodegate "$tgz" --set image.repository=r/nodegate > "$out/rendered.yaml"
grep -q '^kind: DaemonSet' "$out/rendered.yaml" \
  || { echo "FAIL: the packaged chart does not render a DaemonSet" >&2; exit 1; }
if "$helm" template nodegate "$tgz" --set image.repository=r/nodegate --set agent.kube=sometimes >/dev/null 2>&1; then
  echo "FAIL: the packaged chart lost its values.schema.json" >&2; exit 1
fi
echo "package: nodegate-$version.tgz and index.yaml ok"
