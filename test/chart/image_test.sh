#!/usr/bin/env bash
# The image's contents, proven without a container engine (ENVIRONMENT.md: no Docker here):
#  1. `cmake --install` the build into a staging root, as tools/image/Dockerfile's build stage does,
#     plus the cleanup hook script;
#  2. every shared library the binary links directly comes from a package the Dockerfile installs
#     (RUNTIME_PKGS) or from the debian:12-slim base;
#  3. the staged binary runs in its own mount namespace, chrooted into a read-only root made of the
#     staging tree and the host's /usr (standing in for the Debian layer), with every volume of the
#     DaemonSet that `helm template` renders mounted where the chart mounts it, the capability set
#     the chart grants (setpriv bounding set), and exactly the container args the chart renders;
#     it must become ready (/readyz) and serve /metrics and the debug page;
#  4. the chart's second container, the device-probe helper, runs from the same root with its own
#     volumes and args and full capabilities (privileged), sharing the device-probe emptyDir with
#     the agent: the agent's device checks must be answered by it, and `nodegate check` inside the
#     agent's container with nothing but the container's environment (the preflight of
#     docs/install.md, `kubectl exec ... -c nodegate -- nodegate check`) must agree.
# With IMAGE_ROOTFS=DIR (test/chart/image_build_test.sh) steps 1-2 are skipped and the root is
# DIR, an unpacked built image, with nothing of the host's /usr.
# Root only (mount namespaces, chroot). Ports 19830/19831. Test values: the ports and dnsTrace=off.
set -euo pipefail
src=${NODEGATE_SRC:?}
build=${NODEGATE_BUILD:?}
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root for unshare -m and chroot"; exit 77; fi
for t in unshare chroot setpriv dbus-daemon curl jq objdump ldd dpkg python3; do
  command -v "$t" >/dev/null || { echo "FAIL: $t is missing (tools/install-deps.sh)" >&2; exit 1; }
done
helm=$("$src/tools/helm.sh") || { echo "FAIL: helm is not available" >&2; exit 1; }

work=$(mktemp -d /tmp/nodegate-image.XXXXXX)
dbus_pid=""
inner=""
cleanup() {
  if [ -n "$inner" ]; then kill "$inner" 2>/dev/null || true; fi
  if [ -n "$dbus_pid" ]; then kill "$dbus_pid" 2>/dev/null || true; fi
  for p in agent helper; do
    if [ -f "$work/$p.pid" ]; then kill "$(cat "$work/$p.pid")" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
root=$work/root

if [ -n "${IMAGE_ROOTFS:-}" ]; then
  # The root of a built image (test/chart/image_build_test.sh): its own /usr, nothing of the host's.
  root=$IMAGE_ROOTFS
  [ -x "$root/usr/local/bin/nodegate" ] || { echo "FAIL: the image has no /usr/local/bin/nodegate" >&2; exit 1; }
else
# 1. Staging root.
DESTDIR=$root cmake --install "$build" --prefix /usr/local >/dev/null
install -D -m 0755 "$src/tools/image/nodegate-cleanup" "$root/usr/local/bin/nodegate-cleanup"
[ -x "$root/usr/local/bin/nodegate" ] || { echo "FAIL: cmake --install did not stage usr/local/bin/nodegate" >&2; exit 1; }

# 2. Direct library dependencies against the Dockerfile's package list.
pkgs=$(python3 - "$src/tools/image/Dockerfile" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
m = re.search(r'ARG RUNTIME_PKGS="([^"]*)"', text)
print(" ".join(m.group(1).split()) if m else "")
PY
)
[ -n "$pkgs" ] || { echo "FAIL: no RUNTIME_PKGS in tools/image/Dockerfile" >&2; exit 1; }
# libcurl4 is dlopen()ed (agent/kube/curl_lazy.cpp), so no ELF dependency would reveal it missing.
for p in lvm2 util-linux curl jq libcurl4; do
  case " $pkgs " in *" $p "*) ;; *) echo "FAIL: the image lacks $p" >&2; exit 1 ;; esac
done
# Always in debian:12-slim (essential packages and apt's own dependencies).
base="libc6 libgcc-s1 libstdc++6 zlib1g libsystemd0 libudev1 libzstd1 liblzma5 liblz4-1 libgcrypt20 libcap2 libselinux1"
missing=0
while read -r lib; do
  path=$(ldd "$root/usr/local/bin/nodegate" | awk -v l="$lib" '$1 == l {print $3}')
  [ -n "$path" ] || { echo "FAIL: $lib is not resolvable" >&2; missing=1; continue; }
  real=$(readlink -f "$path")
  pkg=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$path" 2>/dev/null || dpkg -S "/usr$path" 2>/dev/null || true)
  pkg=${pkg%%:*}
  case " $pkgs $base " in
    *" $pkg "*) echo "ok   $lib from $pkg" ;;
    *) echo "FAIL: $lib ($real) comes from package '${pkg:-?}', which tools/image/Dockerfile does not install" >&2; missing=1 ;;
  esac
done < <(objdump -p "$root/usr/local/bin/nodegate" | awk '$1 == "NEEDED" {print $2}')
[ "$missing" = 0 ]
fi

# 3. The DaemonSet as helm renders it, on test ports.
# dnsTrace off: a tracer here would attach to the namespaces of the DNS tests running beside it.
"$helm" template nodegate "$src/charts/nodegate" --namespace nodegate --kube-version 1.31.0 \
  --set image.repository=registry.example/nodegate \
  --set agent.metricsPort=19830 --set agent.debugPort=19831 --set agent.healthPort=19832 \
  --set agent.dnsTrace=off >"$work/render.yaml"
bash "$src/test/chart/py.sh" - "$work/render.yaml" "$work" <<'PY'
import json, sys, yaml, shlex
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
work = sys.argv[2]
import os
(ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
spec = ds["spec"]["template"]["spec"]
containers = {x["name"]: x for x in spec["containers"]}
c = containers["nodegate"]
vols = {v["name"]: v for v in spec["volumes"]}
cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
def write_mounts(container, path):
    with open(path, "w") as out:
        for m in container["volumeMounts"]:
            v = vols[m["name"]]
            ro = "ro" if m.get("readOnly") else "rw"
            if "hostPath" in v:
                out.write(f"hostPath {v['hostPath']['path']} {v['hostPath'].get('type', '')} {m['mountPath']} {ro}\n")
            elif "configMap" in v:
                d = f"{work}/configmap-{m['name']}"
                os.makedirs(d, exist_ok=True)
                for k, val in cms[v["configMap"]["name"]]["data"].items():
                    open(f"{d}/{k}", "w").write(val)
                out.write(f"dir {d} - {m['mountPath']} {ro}\n")
            elif "emptyDir" in v:
                # One directory per volume: containers of the pod share it.
                out.write(f"emptyDir {m['name']} - {m['mountPath']} {ro}\n")
            elif "projected" in v:
                # The service-account token the kubelet would project: none without a cluster.
                d = f"{work}/projected-{m['name']}"
                os.makedirs(d, exist_ok=True)
                out.write(f"dir {d} - {m['mountPath']} {ro}\n")
            else:
                sys.exit(f"unsupported volume {v}")
write_mounts(c, f"{work}/mounts")
with open(f"{work}/probes", "w") as out:  # what the kubelet would ask: host port path
    for p in ["startupProbe", "livenessProbe", "readinessProbe"]:
        g = c[p]["httpGet"]
        out.write(f"{g.get('host', '')} {g['port']} {g['path']}\n")
with open(f"{work}/args", "w") as out:
    out.write(" ".join(shlex.quote(a) for a in c["args"]) + "\n")
h = containers.get("device-probe")
if h is None or not h["securityContext"].get("privileged"):
    sys.exit("the chart renders no privileged device-probe container")
write_mounts(h, f"{work}/helper-mounts")
with open(f"{work}/helper-args", "w") as out:
    out.write(" ".join(shlex.quote(a) for a in h["args"]) + "\n")
caps = c["securityContext"]["capabilities"]["add"]
with open(f"{work}/caps", "w") as out:
    out.write(",".join("+" + x.lower() for x in caps) + "\n")
with open(f"{work}/env", "w") as out:
    for e in c["env"]:
        if "value" in e:
            out.write(f"{e['name']}={e['value']}\n")
PY
echo "container args: $(cat "$work/args")"
echo "helper args:    $(cat "$work/helper-args")"
echo "capabilities:   $(cat "$work/caps")"

# The host has no system bus (ENVIRONMENT.md): a private dbus-daemon's socket in a directory of
# its own stands in for the host's /run/dbus that the chart mounts (the socket's directory).
mkdir -p "$work/run-dbus"
dbus-daemon --session --nofork --address="unix:path=$work/run-dbus/system_bus_socket" >/dev/null 2>&1 &
dbus_pid=$!
for _ in $(seq 50); do [ -S "$work/run-dbus/system_bus_socket" ] && break; sleep 0.1; done

cat >"$work/inner.sh" <<'INNER'
#!/usr/bin/env bash
# Runs inside `unshare -m`: builds each container's view of the image and its volumes, starts
# the device-probe helper (privileged: every capability) and the agent (the chart's capabilities).
set -euo pipefail
work=$1 image=$2 image_mode=$3
if [ "$image_mode" = staged ]; then
  mkdir -p "$image"/{proc,sys,dev,tmp,etc,usr/bin,usr/sbin,usr/lib,usr/lib64,usr/share}
  for d in bin sbin lib lib64; do ln -sfn "usr/$d" "$image/$d"; done
  cp -a /etc/ld.so.cache /etc/passwd /etc/group /etc/nsswitch.conf /etc/hosts "$image/etc/"
fi
mkdir -p "$image"/{proc,sys,dev,tmp}
# view ROOT MOUNTS: the image at ROOT, read-only, with the volumes listed in MOUNTS.
view() {
  local root=$1 kind src type dst mode
  mkdir -p "$root"
  mount --bind "$image" "$root"
  if [ "$image_mode" = staged ]; then
    # The Debian layer of the image: the host's /usr, read-only.
    for d in usr/bin usr/sbin usr/lib usr/lib64 usr/share; do
      mount --bind "/$d" "$root/$d" && mount -o remount,bind,ro "$root/$d"
    done
  fi
  # What every container gets from its runtime.
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys" && mount -o remount,bind,ro "$root/sys"
  mount --bind /dev "$root/dev"
  # The chart's volumes.
  while read -r kind src type dst mode; do
    case "$kind" in
      hostPath)
        if [ "$src" = /run/dbus ] && [ ! -S /run/dbus/system_bus_socket ]; then src=$work/run-dbus; fi
        if [ ! -e "$src" ]; then
          case "$type" in
            # The kubelet would create it on the node; create it in the work dir instead.
            DirectoryOrCreate) src=$work/created$src; mkdir -p "$src" ;;
            # A node has its kubelet directory (this build machine is no node): an empty stand-in.
            Directory) [ "$src" = /var/lib/kubelet ] || { echo "FAIL: hostPath $src ($type) is missing" >&2; exit 1; }
                       src=$work/node$src; mkdir -p "$src" ;;
            *) echo "FAIL: hostPath $src ($type) is missing on this host" >&2; exit 1 ;;
          esac
        fi ;;
      # One directory per volume name: the containers of the pod share it.
      emptyDir) src=$work/emptydir-$src; mkdir -p "$src" ;;
    esac
    if [ -d "$src" ]; then mkdir -p "$root$dst"; else mkdir -p "$(dirname "$root$dst")"; touch "$root$dst"; fi
    mount --rbind "$src" "$root$dst"
    if [ "$mode" = ro ]; then mount -o remount,bind,ro "$root$dst"; fi
  done <"$2"
  # readOnlyRootFilesystem.
  mount -o remount,bind,ro "$root"
  if touch "$root/should-fail" 2>/dev/null; then echo "FAIL: the root is writable" >&2; exit 1; fi
}
view "$work/agent-root" "$work/mounts"
view "$work/helper-root" "$work/helper-mounts"
env=(NODE_NAME=image-test PATH=/usr/local/bin:/usr/bin:/usr/sbin)
while read -r e; do env+=("$e"); done <"$work/env"
eval "helper_args=($(cat "$work/helper-args"))"
chroot "$work/helper-root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/usr/sbin \
  /usr/local/bin/nodegate "${helper_args[@]}" >"$work/helper.log" 2>&1 &
echo $! >"$work/helper.pid"
for _ in $(seq 100); do [ -S "$work/emptydir-device-probe/device-probe.sock" ] && break; sleep 0.05; done
eval "args=($(cat "$work/args"))"
chroot "$work/agent-root" /usr/bin/setpriv --bounding-set "-all,$(cat "$work/caps")" --inh-caps -all \
  /usr/bin/env -i "${env[@]}" /usr/local/bin/nodegate "${args[@]}" >"$work/agent.log" 2>&1 &
echo $! >"$work/agent.pid"
# `kubectl exec ds/nodegate -c nodegate -- nodegate check --output json` (docs/install.md,
# preflight): the same view, capabilities and environment, no flag but the output format, once
# the agent has answered.
for _ in $(seq 1200); do [ -f "$work/run-check" ] && break; sleep 0.1; done
[ -f "$work/run-check" ] || exit 1
chroot "$work/agent-root" /usr/bin/setpriv --bounding-set "-all,$(cat "$work/caps")" --inh-caps -all \
  /usr/bin/env -i "${env[@]}" /usr/local/bin/nodegate check --output json \
  >"$work/check.json" 2>"$work/check.err" || true
touch "$work/check-done"
wait
INNER
mode=staged
if [ -n "${IMAGE_ROOTFS:-}" ]; then mode=image; fi
unshare -m --propagation private bash "$work/inner.sh" "$work" "$root" "$mode" &
inner=$!

ready=0
for _ in $(seq 150); do
  if ! kill -0 "$inner" 2>/dev/null; then break; fi
  if [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:19830/readyz)" = 200 ]; then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  echo "FAIL: the staged agent did not become ready on 127.0.0.1:19830 in 30 s; its log:" >&2
  cat "$work/agent.log" >&2 2>/dev/null || true
  exit 1
fi
echo "ok   /readyz answered 200"
# The kubelet's probes, as the chart renders them (host, port, path), answer 200.
while read -r host port path; do
  [ -n "$host" ] || { echo "FAIL: a probe without host: the kubelet would not reach the loopback listener" >&2; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://$host:$port$path")
  [ "$code" = 200 ] || { echo "FAIL: probe http://$host:$port$path answered $code" >&2; exit 1; }
done <"$work/probes"
echo "ok   the kubelet's probes ($(sort -u "$work/probes" | tr '\n' ' ')) answered 200"
pid=$(cat "$work/agent.pid")
agent=$pid  # chroot, setpriv and env all exec: the same process
# The capabilities the process really holds are the chart's, no more.
eff=$(awk '/^CapEff/ {print $2}' "/proc/$agent/status")
want=$(setpriv --bounding-set "-all,$(cat "$work/caps")" grep CapBnd /proc/self/status | awk '{print $2}')
[ "$eff" = "$want" ] || { echo "FAIL: the agent holds capabilities $eff, the chart grants $want" >&2; exit 1; }
echo "ok   capabilities $eff"
# Into a file first: under pipefail, grep -q leaving at the first match makes curl fail with
# SIGPIPE (exit 23) once the scrape is larger than the pipe buffer.
curl -sf http://127.0.0.1:19830/metrics > "$work/metrics" || { echo "FAIL: /metrics did not answer" >&2; exit 1; }
grep -q '^nodegate_build_info' "$work/metrics" || { echo "FAIL: no nodegate_build_info in /metrics" >&2; exit 1; }
echo "ok   /metrics"
curl -sf -o /dev/null http://127.0.0.1:19831/ || { echo "FAIL: the debug page on 127.0.0.1:19831 does not answer" >&2; exit 1; }
echo "ok   debug page"
# What the checks saw through the chart's mounts (printed for the CI log).
curl -sf http://127.0.0.1:19831/api/v1/checks >"$work/checks.json" \
  || { echo "FAIL: /api/v1/checks does not answer" >&2; exit 1; }
jq -r '.checks[] | "     \(.check): \(.status) \(.reason): \(.message)"' "$work/checks.json"
# The D-Bus probes reach the bus through the read-only directory mount (connect() needs no
# writable mount): they may find no timedate1/systemd on this private bus, but never "no socket".
bus_msg=$(jq -r '.checks[] | select(.check == "node-services") | .message' "$work/checks.json")
case "$bus_msg" in
  *"does not exist"*|*"failed to connect"*) echo "FAIL: node-services did not reach the bus through /host/run/dbus: $bus_msg" >&2; exit 1 ;;
esac
echo "ok   the D-Bus socket is reachable through the read-only /host/run/dbus mount"
# The chart's capability set must be enough for `nsenter -t 1 -m -- lvm` wherever root itself may
# enter PID 1's mount namespace (some sandboxes deny that even to root: then say so).
lvm_msg=$(jq -r '.checks[] | select(.check == "lvm") | .message' "$work/checks.json")
if nsenter -t 1 -m -- true 2>/dev/null; then
  case "$lvm_msg" in
    *nsenter:*) echo "FAIL: with the chart's capabilities nsenter fails: $lvm_msg" >&2; exit 1 ;;
  esac
  echo "ok   nsenter -t 1 -m works with the chart's capabilities"
else
  echo "note: this host denies nsenter into PID 1 even to root; the lvm path is not exercised here"
fi
# 4. The device-probe helper, from the same image, answered the agent's device checks and the
# preflight check run in the agent's container.
grep -q "device-probe helper serving" "$work/helper.log" || { cat "$work/helper.log" >&2; echo "FAIL: the helper did not start" >&2; exit 1; }
for c in kvm-device vhost-net tun; do
  ev=$(jq -r --arg c "$c" '.checks[] | select(.check == $c) | .evidence[] | select(.source == "device-probe helper") | .observed' "$work/checks.json")
  case "$ev" in "checked by the helper"*) ;; *) echo "FAIL: the agent's $c was not answered by the helper: $ev" >&2; exit 1 ;; esac
done
echo "ok   the agent's device checks were answered by the device-probe container"
touch "$work/run-check"
for _ in $(seq 100); do [ -f "$work/check-done" ] && break; sleep 0.2; done
[ -s "$work/check.json" ] || { cat "$work/check.err" >&2; echo "FAIL: nodegate check in the agent's container printed nothing" >&2; exit 1; }
for c in kvm-device vhost-net tun lvm; do
  a=$(jq -r --arg c "$c" '.checks[] | select(.check == $c) | "\(.status) \(.reason)"' "$work/checks.json")
  b=$(jq -r --arg c "$c" '.checks[] | select(.check == $c) | "\(.status) \(.reason)"' "$work/check.json")
  echo "     $c: agent $a, preflight check $b"
  [ "$a" = "$b" ] || { echo "FAIL: preflight check and agent disagree on $c" >&2; exit 1; }
done
echo "ok   nodegate check in the agent's container agrees"
kill "$(cat "$work/agent.pid")" "$(cat "$work/helper.pid")" 2>/dev/null || true
wait "$inner" 2>/dev/null || true
echo "image: ok"
