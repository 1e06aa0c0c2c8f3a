#!/usr/bin/env bash
# Installs playwright-core (npm) into a directory of the build tree for the agent's page test.
# Only the library: the browser is Debian's chromium (/usr/bin/chromium), never downloaded.
set -euo pipefail
dir=${1:?usage: agent-page-deps.sh DIR}
mkdir -p "$dir"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --silent --no-audit --no-fund --prefix "$dir" playwright-core@1.65.1 >/dev/null
test -f "$dir/node_modules/playwright-core/package.json"
