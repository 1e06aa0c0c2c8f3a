#!/usr/bin/env bash
# ctest's fixture for every real-guest test: fetches and unpacks the kernel and packages, builds
# the initramfs (test/guest/lib.sh guest_assets), once per build tree, and says what it holds.
set -euo pipefail
SRC=${NODEGATE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$SRC/test/guest/lib.sh"
trap guest_cleanup EXIT
guest_assets
grep '^#' "$GUEST_ASSETS/fetched.env" | sed 's/^# /fetched: /'
echo "kernel: $GUEST_KERNEL"
echo "initramfs: $GUEST_INITRD ($(stat -c %s "$GUEST_INITRD") bytes), modules: $GUEST_MODULES"
