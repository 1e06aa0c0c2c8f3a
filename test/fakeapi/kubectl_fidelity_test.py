#!/usr/bin/env python3
"""The fake API server against the real kubectl: if kubectl (client-go underneath) is happy with
discovery, tables, patches, watches and describe, the fake speaks the real protocol. Also pins
the semantics nodegate relies on: resourceVersion preconditions (409), JSON patch test (422),
no-op patches, strategic merge of conditions by type, 410 on compacted watches, token expiry,
client certificates, and each injected fault."""

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import FakeApi, eventually  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


class KubectlFidelity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(KUBECTL, os.X_OK):
            raise unittest.SkipTest("kubectl not installed at %s (ENVIRONMENT.md says it is preinstalled)" % KUBECTL)
        cls.api = FakeApi("kubectl", nodes=["node-a", "node-b"], bookmark_interval=1)

    @classmethod
    def tearDownClass(cls):
        cls.api.close()

    def setUp(self):
        self.api.clear_faults()

    def kubectl(self, *args, check=True, kubeconfig=None, timeout=30):
        env = dict(os.environ, KUBECONFIG=kubeconfig or self.api.kubeconfig, HOME=self.api.dir)
        r = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            self.fail("kubectl %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def test_get_nodes_table(self):
        out = self.kubectl("get", "nodes").stdout
        lines = out.strip().splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"])
        self.assertTrue(any(l.split()[:2] == ["node-a", "Ready"] for l in lines[1:]), out)

    def test_get_node_json_and_jsonpath(self):
        node = json.loads(self.kubectl("get", "node", "node-b", "-o", "json").stdout)
        self.assertEqual(node["kind"], "Node")
        self.assertEqual(self.kubectl("get", "node", "node-b", "-o",
                                      "jsonpath={.status.nodeInfo.kubeletVersion}").stdout, "v1.32.0")
        r = self.kubectl("get", "node", "nope", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('nodes "nope" not found', r.stderr)

    def test_label_and_unlabel(self):
        self.kubectl("label", "node", "node-a", "team.io/owner=alice")
        self.assertEqual(self.api.node("node-a")["metadata"]["labels"]["team.io/owner"], "alice")
        r = self.kubectl("label", "node", "node-a", "team.io/owner=bob", check=False)
        self.assertNotEqual(r.returncode, 0, "kubectl refuses to overwrite without --overwrite")
        self.kubectl("label", "node", "node-a", "team.io/owner=bob", "--overwrite")
        self.kubectl("label", "node", "node-a", "team.io/owner-")
        self.assertNotIn("team.io/owner", self.api.node("node-a")["metadata"]["labels"])
        r = self.kubectl("label", "node", "node-a", "bad key!=x", check=False)
        self.assertNotEqual(r.returncode, 0)
        # A stale --resource-version is a conflict, as on a real server.
        r = self.kubectl("label", "node", "node-a", "x=y", "--resource-version=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the object has been modified", r.stderr)

    def test_watch_sees_modifications(self):
        env = dict(os.environ, KUBECONFIG=self.api.kubeconfig, HOME=self.api.dir)
        proc = subprocess.Popen([KUBECTL, "get", "node", "node-b", "-w", "--output-watch-events"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            self.assertTrue(eventually(lambda: any("ADDED" in l for l in lines), 15), lines)
            self.kubectl("label", "node", "node-b", "watched=yes")
            self.assertTrue(eventually(lambda: any("MODIFIED" in l and "node-b" in l for l in lines), 10), lines)
        finally:
            proc.terminate()
            proc.wait(5)
            proc.stdout.close()
            proc.stderr.close()

    def test_describe_node_shows_conditions_taints_events(self):
        api = self.api
        code, node = api.call("PATCH", "/api/v1/nodes/node-b/status",
                              {"status": {"conditions": [{"type": "VirtualizationReady", "status": "False",
                                                          "reason": "DeviceMissing", "message": "no kvm",
                                                          "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                              "application/strategic-merge-patch+json")
        self.assertEqual(code, 200, node)
        types = [c["type"] for c in node["status"]["conditions"]]
        self.assertEqual(types, ["Ready", "VirtualizationReady"], "merged by type, Ready kept")
        rv = node["metadata"]["resourceVersion"]
        code, _ = api.call("PATCH", "/api/v1/nodes/node-b",
                           {"metadata": {"resourceVersion": rv},
                            "spec": {"taints": [{"key": "nodegate.io/not-ready", "effect": "NoSchedule"}]}},
                           "application/merge-patch+json")
        self.assertEqual(code, 200)
        ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
              "metadata": {"name": "node-b.1", "namespace": "default"},
              "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "nodegate.io/agent",
              "reportingInstance": "nodegate.io/agent-node-b", "action": "CheckStatus",
              "reason": "DeviceMissing", "type": "Warning", "note": "VirtualizationReady is False: no kvm",
              "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-b", "uid": node["metadata"]["uid"]}}
        self.assertEqual(api.call("POST", "/apis/events.k8s.io/v1/namespaces/default/events", ev)[0], 201)
        out = self.kubectl("describe", "node", "node-b").stdout
        self.assertIn("nodegate.io/not-ready:NoSchedule", out)
        self.assertRegex(out, r"VirtualizationReady\s+False")
        self.assertIn("DeviceMissing", out)
        self.assertRegex(out, r"Warning\s+DeviceMissing")

    def test_patch_semantics(self):
        api = self.api
        rv0 = api.node("node-a")["metadata"]["resourceVersion"]
        # No-op: same content, same resourceVersion.
        labels = api.node("node-a")["metadata"]["labels"]
        code, n = api.call("PATCH", "/api/v1/nodes/node-a", {"metadata": {"labels": labels}},
                           "application/merge-patch+json")
        self.assertEqual((code, n["metadata"]["resourceVersion"]), (200, rv0))
        # JSON patch test failure is 422, a stale precondition in a merge patch 409.
        code, st = api.call("PATCH", "/api/v1/nodes/node-a",
                            [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                             {"op": "add", "path": "/spec/taints", "value": []}], "application/json-patch+json")
        self.assertEqual((code, st["reason"]), (422, "Invalid"))
        code, st = api.call("PATCH", "/api/v1/nodes/node-a", {"metadata": {"resourceVersion": "1"}},
                            "application/merge-patch+json")
        self.assertEqual((code, st["reason"]), (409, "Conflict"))
        # Status writes ignore metadata; main writes ignore status.
        code, n = api.call("PATCH", "/api/v1/nodes/node-a/status", {"metadata": {"labels": {"sneaky": "x"}}},
                           "application/merge-patch+json")
        self.assertNotIn("sneaky", n["metadata"]["labels"])
        code, n = api.call("PATCH", "/api/v1/nodes/node-a", {"status": {"conditions": []}},
                           "application/merge-patch+json")
        self.assertTrue(n["status"]["conditions"])
        # A strategic-merge delete directive removes one condition by type.
        api.call("PATCH", "/api/v1/nodes/node-a/status", {"status": {"conditions": [{"type": "X", "status": "True"}]}},
                 "application/strategic-merge-patch+json")
        code, n = api.call("PATCH", "/api/v1/nodes/node-a/status",
                           {"status": {"conditions": [{"type": "X", "$patch": "delete"}]}},
                           "application/strategic-merge-patch+json")
        self.assertEqual([c["type"] for c in n["status"]["conditions"]], ["Ready"])
        self.assertEqual(api.call("PATCH", "/api/v1/nodes/node-a", {}, "application/apply-patch+yaml")[0], 415)

    def raw_watch(self, query, max_lines=1, timeout=5, path="/api/v1/nodes"):
        """A watch over a raw TLS socket, to see exactly what the server streams."""
        ctx = ssl.create_default_context(cafile=self.api.ca)
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.api.port), timeout=timeout),
                            server_hostname="127.0.0.1")
        s.sendall(("GET %s?%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-a\r\n\r\n"
                   % (path, query)).encode())
        buf = b""
        end = time.time() + timeout
        while time.time() < end and buf.count(b"\n{") < max_lines and b'"type"' not in buf[-200:]:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            buf += chunk
        s.close()
        return buf.decode(errors="replace")

    def test_watch_gone_and_bookmarks(self):
        self.api.call("POST", "/fake/compact")
        out = self.raw_watch("fieldSelector=metadata.name%%3Dnode-a&watch=true&resourceVersion=%s"
                             % self.api.node("node-a")["metadata"]["resourceVersion"])
        self.assertIn('"type": "ERROR"', out)
        self.assertIn('"code": 410', out)
        rv = self.api.call("GET", "/fake/healthz")[1]["rv"]
        out = self.raw_watch("fieldSelector=metadata.name%%3Dnode-a&watch=true&allowWatchBookmarks=true"
                             "&resourceVersion=%s&timeoutSeconds=3" % rv, timeout=4)
        self.assertIn('"type": "BOOKMARK"', out)

    def pod_file(self, name, ns, node, selector=None):
        """The captured virt-launcher pod (test/fixtures/kubevirt), renamed and bound to node."""
        with open(os.path.join(FIXTURES, "kubevirt", "virt-launcher-pod.json")) as f:
            pod = json.load(f)
        for k in ("uid", "resourceVersion", "creationTimestamp", "generateName", "ownerReferences"):
            pod["metadata"].pop(k, None)
        pod["metadata"].update({"name": name, "namespace": ns})
        pod["spec"]["nodeName"] = node
        pod["spec"]["nodeSelector"].update(selector or {})
        path = os.path.join(self.api.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(pod, f)
        return path

    def test_pods_on_a_node_list_watch_status_delete(self):
        for name, ns, node in (("vl-a1", "default", "node-a"), ("vl-a2", "vms", "node-a"),
                               ("vl-b1", "default", "node-b")):
            self.kubectl("create", "-f", self.pod_file(name, ns, node, {"nodegate.io/vm-ready": "true"}))
        out = self.kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=node-a", "-o", "name").stdout
        self.assertEqual(sorted(out.split()), ["pod/vl-a1", "pod/vl-a2"])
        table = self.kubectl("get", "pods", "-n", "default", "--field-selector", "spec.nodeName=node-a").stdout
        lines = table.strip().splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"])
        self.assertEqual(lines[1].split()[:3], ["vl-a1", "0/1", "Pending"], table)
        # The nodeSelector came back as sent.
        sel = self.kubectl("get", "pod", "vl-a1", "-o", "jsonpath={.spec.nodeSelector}").stdout
        self.assertEqual(json.loads(sel), {"kubevirt.io/schedulable": "true", "nodegate.io/vm-ready": "true"})

        env = dict(os.environ, KUBECONFIG=self.api.kubeconfig, HOME=self.api.dir)
        proc = subprocess.Popen([KUBECTL, "get", "pods", "-A", "--field-selector", "spec.nodeName=node-a", "-w",
                                 "--output-watch-events"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        try:
            self.assertTrue(eventually(lambda: sum("ADDED" in l for l in lines) >= 2, 15), lines)
            # Status is written through the subresource, as kubelet does.
            self.kubectl("patch", "pod", "vl-a1", "--subresource=status", "--type=merge", "-p",
                         json.dumps({"status": {"phase": "Running", "containerStatuses": [
                             {"name": "compute", "ready": True, "restartCount": 0}]}}))
            self.assertTrue(eventually(lambda: any("MODIFIED" in l and "vl-a1" in l and "Running" in l
                                                   for l in lines), 10), lines)
            self.assertEqual(self.kubectl("get", "pod", "vl-a1", "-o", "jsonpath={.status.phase}").stdout,
                             "Running")
            # A pod on another node is not in this watch; a delete is (kubectl waits for it by watching).
            self.kubectl("delete", "pod", "vl-b1", "-n", "default")
            self.kubectl("delete", "pod", "vl-a2", "-n", "vms")
            self.assertTrue(eventually(lambda: any("DELETED" in l and "vl-a2" in l for l in lines), 10), lines)
            self.assertFalse(any("vl-b1" in l for l in lines), lines)
        finally:
            proc.terminate()
            proc.wait(5)
            proc.stdout.close()
            proc.stderr.close()
        r = self.kubectl("get", "pods", "-A", "--field-selector", "spec.bogus=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("spec.bogus", r.stderr)
        # A pod watch from before a compaction gets 410, like the node watch.
        rv = self.api.call("GET", "/fake/healthz")[1]["rv"]
        self.api.call("POST", "/fake/compact")
        out = self.raw_watch("fieldSelector=spec.nodeName%%3Dnode-a&watch=true&resourceVersion=%s" % rv,
                             path="/api/v1/pods")
        self.assertIn('"code": 410', out)
        self.kubectl("delete", "pod", "vl-a1", "-n", "default")

    def test_node_readiness_rule_crd(self):
        # node-readiness-controller's cluster-scoped CRD, applied and read back as its users do.
        rule = {"apiVersion": "readiness.node.x-k8s.io/v1alpha1", "kind": "NodeReadinessRule",
                "metadata": {"name": "fidelity-rule"},
                "spec": {"conditions": [{"type": "VirtualizationReady", "requiredStatus": "True"}],
                         "taint": {"key": "readiness.k8s.io/vm", "effect": "NoSchedule"},
                         "enforcementMode": "continuous",
                         "nodeSelector": {"matchLabels": {"node-role.kubernetes.io/vm": ""}}}}
        path = os.path.join(self.api.dir, "rule.json")
        with open(path, "w") as f:
            json.dump(rule, f)
        self.kubectl("apply", "-f", path)
        self.assertIn("fidelity-rule", self.kubectl("get", "nrr", "-o", "name").stdout)
        got = json.loads(self.kubectl("get", "nodereadinessrule", "fidelity-rule", "-o", "json").stdout)
        self.assertEqual(got["spec"]["taint"], rule["spec"]["taint"])
        self.kubectl("apply", "-f", path)  # unchanged: a no-op apply
        self.kubectl("delete", "nrr", "fidelity-rule")

    def test_auth_token_expiry_and_client_cert(self):
        api = self.api
        # kubectl needs a few seconds to start on a loaded CI machine: give the token 10.
        expires = time.time() + 10
        api.call("POST", "/fake/tokens", {"token": "short", "expires_in": 10})
        kc = api.write_kubeconfig("kc-short", {"token": "short"})
        self.kubectl("get", "node", "node-a", kubeconfig=kc)
        time.sleep(max(0, expires - time.time()) + 0.2)
        r = self.kubectl("get", "node", "node-a", kubeconfig=kc, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Unauthorized", r.stderr)
        kc = api.write_kubeconfig("kc-cert", {"client-certificate": os.path.join(api.dir, "tls", "client.crt"),
                                              "client-key": os.path.join(api.dir, "tls", "client.key")})
        self.kubectl("get", "node", "node-a", kubeconfig=kc)
        self.assertEqual(api.requests()[-1]["user"], "cert:system:node:test")

    def test_faults_seen_by_kubectl(self):
        api = self.api
        for status, text in ((403, "Forbidden"), (404, "NotFound"), (500, "injected fault")):
            api.fault(status=status, path_re="/nodes/node-a$", method="GET", count=1)
            r = self.kubectl("get", "node", "node-a", "-o", "name", check=False)
            self.assertNotEqual(r.returncode, 0, status)
            self.assertTrue(text.lower() in r.stderr.lower() or str(status) in r.stderr, r.stderr)
        # 429 with Retry-After: client-go waits and retries on its own, then succeeds.
        api.fault(status=429, retry_after=1, path_re="/nodes/node-a$", method="GET", count=1)
        t0 = time.time()
        self.kubectl("get", "node", "node-a", "-o", "name")
        self.assertGreaterEqual(time.time() - t0, 0.9)
        # A dropped connection and a slow answer.
        api.fault(drop=True, path_re="/nodes/node-a$", method="GET", count=1)
        r = self.kubectl("get", "node", "node-a", "-o", "name", check=False)
        api.fault(delay=1.5, path_re="/nodes/node-a$", method="GET", count=1)
        t0 = time.time()
        self.kubectl("get", "node", "node-a", "-o", "name")
        self.assertGreaterEqual(time.time() - t0, 1.4)
        log = api.requests()
        self.assertTrue(any(e["status"] == "dropped" for e in log))


if __name__ == "__main__":
    unittest.main(verbosity=2)
