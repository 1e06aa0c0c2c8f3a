#!/usr/bin/env bash
# Builds the nodegate OCI image with Debian's own tools, no container engine and no registry but
# Debian's: mmdebstrap makes the root from Debian 12 packages (the Dockerfile's RUNTIME_PKGS), the
# build's `cmake --install` output and the cleanup hook's script go on top, and umoci writes an
# OCI image layout. Reproducible: the package set is pinned by the suite's state, every timestamp
# is SOURCE_DATE_EPOCH (default: the last commit's time), apt's caches and logs are left out, the
# builder's umask and time zone do not count (test/chart/image_build_test.sh builds twice).
#
#   tools/image/build.sh BUILD_DIR OUT_DIR [TAG]     (root; BUILD_DIR: a configured cmake build)
#
# Result: OUT_DIR/oci (an OCI image layout, tag TAG, default the version in Chart.yaml's appVersion)
# and OUT_DIR/rootfs.tar. Push it with `skopeo copy oci:OUT_DIR/oci:TAG docker://REGISTRY/nodegate:TAG`.
# test/chart/image_build_test.sh builds it and runs the image's own binary.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: build.sh BUILD_DIR OUT_DIR [TAG]}
out=${2:?usage: build.sh BUILD_DIR OUT_DIR [TAG]}
tag=${3:-$(awk -F'"' '$1 == "appVersion: " {print $2}' "$src/charts/nodegate/Chart.yaml")}
for t in mmdebstrap umoci cmake python3; do
  command -v "$t" >/dev/null || { echo "build.sh: $t is missing (apt-get install mmdebstrap umoci)" >&2; exit 1; }
done
# The builder's umask and time zone must not reach the image (file modes, timestamps in logs).
umask 0022
export TZ=UTC LC_ALL=C.UTF-8
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || echo 0)}
pkgs=$(python3 - "$src/tools/image/Dockerfile" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
print(",".join(re.search(r'ARG RUNTIME_PKGS="([^"]*)"', text).group(1).split()))
PY
)
rm -rf "$out" && mkdir -p "$out/staging"
DESTDIR="$out/staging" cmake --install "$build" --prefix /usr/local --strip >/dev/null
install -D -m 0755 "$src/tools/image/nodegate-cleanup" "$out/staging/usr/local/bin/nodegate-cleanup"

# The root: Debian's essential set plus the runtime packages, the staged tree copied in by a hook,
# apt's lists, caches and logs removed so that only package contents and our files remain.
# The archive is a network peer: a download that fails (a mirror mid-sync, a dropped connection)
# is tried again, at most three times in all.
# Its own output goes to a log, shown (the end of it: apt's own error) when an attempt fails.
# mmdebstrap hands apt a pipe on its first free fd, and apt's hook runs `cat >&N` through dash,
# which knows only fds 0-9 ("Bad fd number"): fds the caller left open (flock, a test runner) push
# N past 9, so mmdebstrap runs with only stdin, stdout and stderr.
only_std_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
  done
}
for attempt in 1 2 3; do
  if (only_std_fds && exec mmdebstrap --variant=essential --include="$pkgs" --mode=root \
    --customize-hook="cp -a '$out/staging/.' \"\$1/\"" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/var/cache/ldconfig/aux-cache' \
    bookworm "$out/rootfs.tar") >"$out/mmdebstrap.log" 2>&1; then
    break
  fi
  echo "build.sh: mmdebstrap failed (attempt $attempt of 3); the end of its output:" >&2
  grep -v '^Get:' "$out/mmdebstrap.log" | tail -n 25 >&2
  [ "$attempt" -lt 3 ] || { echo "build.sh: mmdebstrap failed three times" >&2; exit 1; }
  echo "build.sh: trying again in 10 s" >&2
  rm -f "$out/rootfs.tar"
  sleep 10
done
rm -f "$out/mmdebstrap.log"

# The OCI layout: one layer from the root, the chart's entrypoint, timestamps clamped.
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$tag"
umoci unpack --rootless --image "$out/oci:$tag" "$out/bundle" >/dev/null 2>&1 || umoci unpack --image "$out/oci:$tag" "$out/bundle" >/dev/null
tar -xpf "$out/rootfs.tar" -C "$out/bundle/rootfs" --numeric-owner
find "$out/bundle/rootfs" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + 2>/dev/null || true
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
umoci repack --image "$out/oci:$tag" --history.created "$created" --history.created_by "tools/image/build.sh" "$out/bundle"
umoci config --image "$out/oci:$tag" --created "$created" --history.created "$created" \
  --config.entrypoint /usr/local/bin/nodegate --config.cmd agent --config.cmd --host-root=/host \
  --config.env PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin
umoci gc --layout "$out/oci"
rm -rf "$out/bundle" "$out/staging"
echo "image $out/oci:$tag ($(du -sh "$out/oci" | cut -f1))"
