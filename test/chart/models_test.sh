#!/usr/bin/env bash
# Validates every rendered object with kubernetes-models 4.5.1 (npm), installed into the build tree
# on first use.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
render=$build/test-chart/render
npmdir=$build/test-chart/npm
if [ ! -f "$npmdir/node_modules/kubernetes-models/package.json" ] \
   || [ ! -f "$npmdir/node_modules/@kubernetes-models/prometheus-operator/package.json" ]; then
  command -v npm >/dev/null || { echo "FAIL: npm is missing (tools/install-deps.sh installs it)" >&2; exit 1; }
  mkdir -p "$npmdir"
  echo '{"name":"nodegate-chart-test","private":true}' >"$npmdir/package.json"
  # prometheus-operator 4.4.4 is the last release on kubernetes-models 4.x (5.x needs Node 22).
  (cd "$npmdir" && npm install --no-audit --no-fund --silent kubernetes-models@4.5.1 \
      @kubernetes-models/prometheus-operator@4.4.4) \
    || { echo "FAIL: npm install of kubernetes-models failed" >&2; exit 1; }
fi
jsons=()
for f in "$render"/*.yaml; do
  bash "$src/test/chart/py.sh" -c 'import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))' \
    "$f" >"${f%.yaml}.json"
  jsons+=("${f%.yaml}.json")
done
[ "${#jsons[@]}" -gt 0 ] || { echo "FAIL: nothing rendered in $render" >&2; exit 1; }
node "$src/test/chart/validate_models.js" "$npmdir/node_modules" "${jsons[@]}"
