#!/usr/bin/env bash
# tools/image/nodegate-cleanup (the chart's post-delete hook) against test/chart/fake_nodes_api.py:
# it removes exactly nodegate's labels, annotations, taint and conditions, waits for the agents to
# go, survives a concurrent writer, leaves everyone else's keys alone and writes nothing to a node
# that has nothing of nodegate's. Port 19840.
set -euo pipefail
src=${NODEGATE_SRC:?}
for t in curl jq python3; do command -v "$t" >/dev/null || { echo "FAIL: $t is missing" >&2; exit 1; }; done
work=$(mktemp -d /tmp/nodegate-cleanup.XXXXXX)
server=""
# On a failure, what the fake server said first (a traceback, or nothing): the cleanup once lost
# its connection to it mid-run in a parallel suite, and the cause was not kept.
trap 'rc=$?; [ "$rc" = 0 ] || { echo "--- fake API server output:" >&2; cat "$work/server.out" >&2 2>/dev/null; }
      [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT

cond() { printf '{"type":"%s","status":"%s","reason":"R","message":"m"}' "$1" "$2"; }
cat >"$work/state.json" <<JSON
{"pods_for_polls": 2, "nodes": [
 {"metadata": {"name": "n1", "resourceVersion": "1",
   "labels": {"kubernetes.io/hostname": "n1", "nodegate.io/kvm": "true", "nodegate.io/vm-ready": "true",
              "nodegate.io/cpu-virt": "vmx", "nodegate.iox/not-ours": "keep", "example.com/x": "keep"},
   "annotations": {"nodegate.io/owned-labels": "kvm,cpu-virt,vm-ready", "node.alpha.kubernetes.io/ttl": "0"}},
  "spec": {"taints": [{"key": "nodegate.io/not-ready", "effect": "NoSchedule"},
                      {"key": "dedicated", "value": "vms", "effect": "NoSchedule"}]},
  "status": {"conditions": [$(cond Ready True), $(cond VirtualizationReady False), $(cond TimeSynchronized True),
                            $(cond MemoryPressure False), $(cond LocalStorageHealthy True), $(cond GuestDNSHealthy True)]}},
 {"metadata": {"name": "racy", "resourceVersion": "1", "labels": {"nodegate.io/tun": "true"}},
  "spec": {}, "status": {"conditions": [$(cond Ready True), $(cond VirtualizationReady True)]}},
 {"metadata": {"name": "clean", "resourceVersion": "1", "labels": {"kubernetes.io/hostname": "clean"}},
  "spec": {"taints": [{"key": "dedicated", "value": "vms", "effect": "NoSchedule"}]},
  "status": {"conditions": [$(cond Ready True)]}}
]}
JSON
echo secret-token >"$work/token"
python3 "$src/test/chart/fake_nodes_api.py" 19840 "$work/state.json" secret-token >"$work/server.out" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q ready "$work/server.out" 2>/dev/null && break; sleep 0.1; done

# A wrong token is a clear failure, not a silent success.
if NODEGATE_API=http://127.0.0.1:19840 NODEGATE_TOKEN_FILE=/dev/null NODEGATE_PREFIX=nodegate.io \
   sh "$src/tools/image/nodegate-cleanup" >"$work/bad.out" 2>&1; then
  echo "FAIL: the cleanup succeeded without a valid token" >&2; exit 1
fi
grep -q "failed to list nodes: HTTP 401" "$work/bad.out" || { cat "$work/bad.out" >&2; exit 1; }

NODEGATE_API=http://127.0.0.1:19840 NODEGATE_TOKEN_FILE=$work/token NODEGATE_PREFIX=nodegate.io \
NODEGATE_GATE_LABEL=nodegate.io/vm-ready NODEGATE_TAINT=nodegate.io/not-ready \
NODEGATE_CONDITIONS="VirtualizationReady LocalStorageHealthy GuestDNSHealthy TimeSynchronized" \
NODEGATE_NAMESPACE=nodegate NODEGATE_WAIT_SELECTOR=app.kubernetes.io/name=nodegate NODEGATE_WAIT_SECONDS=10 \
  sh "$src/tools/image/nodegate-cleanup" | tee "$work/run.out"
kill "$server"; wait "$server" 2>/dev/null || true; server=""

python3 - "$work/state.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
log = open(sys.argv[1] + ".log").read().splitlines()
n = {x["metadata"]["name"]: x for x in st["nodes"]}
def check(ok, what):
    if not ok:
        sys.exit("FAIL: " + what)
    print("ok   " + what)
check(n["n1"]["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "nodegate.iox/not-ours": "keep", "example.com/x": "keep"},
      "n1 keeps exactly the labels that are not nodegate's")
check(n["n1"]["metadata"]["annotations"] == {"node.alpha.kubernetes.io/ttl": "0"}, "n1 loses only nodegate's annotation")
check(n["n1"]["spec"]["taints"] == [{"key": "dedicated", "value": "vms", "effect": "NoSchedule"}], "n1 loses only nodegate's taint")
check([c["type"] for c in n["n1"]["status"]["conditions"]] == ["Ready", "MemoryPressure"], "n1 keeps only the kubelet's conditions")
check(n["racy"]["metadata"]["labels"] == {"other.example.com/raced": "yes"}, "a concurrent writer's label survives and the patch was redone")
check([c["type"] for c in n["racy"]["status"]["conditions"]] == ["Ready"], "racy's condition removed")
check(not [l for l in log if l.startswith("PATCH /api/v1/nodes/clean")], "no write to a node without nodegate's keys")
check(sum(1 for l in log if "/pods?labelSelector=" in l) >= 3, "waited until the agent pods were gone")
check(any(l.startswith("PATCH /api/v1/nodes/racy") and "test" in l for l in log), "patches carry a resourceVersion test")
PY
grep -q "2 nodes cleaned, 0 failed" "$work/run.out" || { echo "FAIL: summary line" >&2; exit 1; }
echo "cleanup: ok"
