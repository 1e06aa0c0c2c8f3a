#!/usr/bin/env bash
# Packages charts/nodegate the way a chart repository serves it: `helm package` into OUT_DIR
# (default build/chart-repo) and `helm repo index` over it, with the chart's version from
# Chart.yaml. Usage: tools/chart-package.sh [OUT_DIR] [REPO_URL]. test/chart/package_test.sh runs it.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/build/chart-repo}
url=${2:-https://nodegate.github.io/charts}
helm=$("$src/tools/helm.sh")
mkdir -p "$out"
"$helm" lint --strict "$src/charts/nodegate" --set image.repository=registry.example/nodegate >/dev/null
"$helm" package "$src/charts/nodegate" --destination "$out"
"$helm" repo index "$out" --url "$url"
echo "chart repository in $out"
