#!/usr/bin/env bash
# The real image, built with Debian's tools (tools/image/build.sh: mmdebstrap + umoci, packages
# from Debian's archive) from this build, unpacked again with umoci, and its own binary run from
# its own root by image_test.sh: chart mounts, capabilities and arguments, until /readyz, /metrics
# and the page answer. Built twice (another time, directory, umask and time zone), the two digests
# must be equal: reproducible. Root and Debian's archive needed (CI has both). About 2.5 min, most
# of it mmdebstrap downloading and unpacking ~45 MB of packages, twice.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root for mmdebstrap --mode=root and unshare"; exit 77; fi
for t in mmdebstrap umoci; do
  command -v "$t" >/dev/null || { echo "FAIL: $t is missing (tools/install-deps.sh)" >&2; exit 1; }
done
out=$build/test-chart/image
trap 'rm -rf "$out/bundle" "$out-again"' EXIT
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || echo 0)}
bash "$src/tools/image/build.sh" "$build" "$out" test
# Reproducible: a second build from the same tree, at another time, in another directory, under
# another umask and time zone, must give the same image digest.
(umask 0002 && TZ=Pacific/Chatham bash "$src/tools/image/build.sh" "$build" "$out-again" test) >/dev/null
digest() { jq -r '.manifests[0].digest' "$1/oci/index.json"; }
if [ "$(digest "$out")" != "$(digest "$out-again")" ]; then
  echo "FAIL: two builds of the same tree differ: $(digest "$out") vs $(digest "$out-again")" >&2
  diff <(ls "$out/oci/blobs/sha256") <(ls "$out-again/oci/blobs/sha256") >&2 || true
  cmp "$out/rootfs.tar" "$out-again/rootfs.tar" >&2 || true
  exit 1
fi
rm -rf "$out-again"
echo "ok   reproducible: two builds give $(digest "$out")"
umoci unpack --image "$out/oci:test" "$out/bundle" >/dev/null
cfg=$(find "$out/bundle" -maxdepth 1 -name config.json)
entry=$(jq -r '.process.args | join(" ")' "$cfg")
[ "$entry" = "/usr/local/bin/nodegate agent --host-root=/host" ] || { echo "FAIL: the image runs '$entry'" >&2; exit 1; }
echo "ok   the image's entrypoint: $entry"
# The image holds no package lists (apt leaves only its empty lock and partial/ behind).
if find "$out/bundle/rootfs/var/lib/apt/lists" -type f ! -name lock | grep -q .; then
  find "$out/bundle/rootfs/var/lib/apt/lists" -type f >&2
  echo "FAIL: package lists in the image" >&2; exit 1
fi
echo "ok   no package lists in the image"
IMAGE_ROOTFS=$out/bundle/rootfs bash "$src/test/chart/image_test.sh"
