#!/usr/bin/env bash
# The rendered ValidatingAdmissionPolicy's CEL, evaluated on admission requests an agent could send
# (test/chart/vap_test.mjs). The CEL engine comes from npm into the build tree on first use.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
npmdir=$build/test-chart/npm-cel
cel=$npmdir/node_modules/@marcbachmann/cel-js/lib/index.js
if [ ! -f "$cel" ]; then
  command -v npm >/dev/null || { echo "FAIL: npm is missing (tools/install-deps.sh installs it)" >&2; exit 1; }
  mkdir -p "$npmdir"
  echo '{"name":"nodegate-chart-cel","private":true}' >"$npmdir/package.json"
  (cd "$npmdir" && npm install --no-audit --no-fund --silent @marcbachmann/cel-js@8.0.0) \
    || { echo "FAIL: npm install of @marcbachmann/cel-js failed" >&2; exit 1; }
fi
render=$build/test-chart/render/defaults-1.31.yaml
bash "$src/test/chart/py.sh" -c 'import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))' \
  "$render" >"$build/test-chart/vap-render.json"
node "$src/test/chart/vap_test.mjs" "$cel" "$build/test-chart/vap-render.json"
