#!/usr/bin/env bash
# Headless Chromium (Debian package) loads the status page from a running agent; page_check.js
# asserts on the rendered DOM and saves a screenshot to $NODEGATE_BUILD/artifacts/page.png.
# The host is this machine (--host-root /): it has no vmx/svm, so cpu-virt FAILs with a hint
# and the gate is closed, which is exactly what the page must make obvious.
source "$(dirname "$0")/lib.sh"
[ -x /usr/bin/chromium ] || fail "chromium not installed (tools/install-deps.sh installs it)"
command -v node >/dev/null || fail "node not installed"

pw="$NODEGATE_BUILD/tools/playwright"
if [ ! -f "$pw/node_modules/playwright-core/package.json" ]; then
  bash "$NODEGATE_SRC/tools/agent-page-deps.sh" "$pw" || fail "could not install playwright-core"
fi
work=$(mktemp -d /tmp/nodegate-agent-page.XXXXXX)
on_exit "rm -rf $work"
start_agent "$work/agent.log" --kube none --listen 127.0.0.1:19220 --debug-listen 127.0.0.1:19221 --resync 30

curl -sf http://127.0.0.1:19221/api/v1/checks >"$work/checks.json"
mkdir -p "$NODEGATE_BUILD/artifacts"
PW_DIR="$pw" PAGE_URL="http://127.0.0.1:19221/" CHECKS_JSON="$work/checks.json" \
  SCREENSHOT="$NODEGATE_BUILD/artifacts/page.png" HOME="$work" \
  node "$TEST_SRC/page_check.js"
