#!/usr/bin/env python3
"""Trust and ownership, end to end (issue #22 items 1-4): the real `nodegate agent` on a fixture
host root against the fake API server.

- An owned-labels annotation that names labels outside the agent's prefix and gate label is
  ignored and reported (log and a Warning event); those labels are never PATCHed.
- A gate label already on the Node that nodegate did not write is left alone, with an error.
- --prefix and --gate-label are refused at start with the flag and value named.
- An API server restored from an etcd backup (every resourceVersion back in time) and a Node
  recreated with a new uid are relisted and reconciled at once, and logged.
- Credentials in the server URL never reach the log.

Needs $NODEGATE (CTest sets it). TCP ports 19420-19449 (fake server 19420-19439, metrics
19440-19449)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import FakeApi, eventually, free_port, nodegate_binary, stop, to_yaml  # noqa: E402

NODE = "trust-node"
GATE = "nodegate.io/vm-ready"
FOREIGN = {"kubernetes.io/hostname": NODE, "team": "storage", "kubevirt.io/schedulable": "true"}


class Trust(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = nodegate_binary()
        cls.api = FakeApi("trust", nodes=[], bookmark_interval=2, port_range="19420-19439")
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kube-trust-")
        cls.root = os.path.join(cls.tmp, "host")
        shutil.copytree(os.path.join(HERE, "..", "..", "fixtures", "agent", "vmx-host-e5"), cls.root)
        cls.config = os.path.join(cls.tmp, "config.json")
        with open(cls.config, "w") as f:
            json.dump({"gate": {"required": ["cpu-virt"]},
                       "checks": {"kube": {"startup_jitter_seconds": 0, "heartbeat_seconds": 300,
                                           "watch_timeout_seconds": 30}}}, f)

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.api.call("POST", "/fake/reset")
        self.agent = None
        self.log_path = os.path.join(self.tmp, "%s.log" % self._testMethodName)

    def tearDown(self):
        self.stop_agent()

    def start_agent(self, extra=(), kubeconfig=None):
        port = free_port(19440, 19449)
        args = [self.binary, "agent", "--host-root", self.root, "--kube", "kubeconfig",
                "--kubeconfig", kubeconfig or self.api.kubeconfig, "--node-name", NODE,
                "--config", self.config, "--resync", "1", "--listen", "127.0.0.1:%d" % port,
                "--debug-listen", "", "--dns-trace", "off", "--lvm-command", "false"] + list(extra)
        with open(self.log_path, "w") as out:
            self.agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    def stop_agent(self):
        stop(self.agent, 10)
        self.agent = None

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def labels(self):
        return self.api.node(NODE)["metadata"].get("labels", {})

    def annotations(self):
        return self.api.node(NODE)["metadata"].get("annotations", {})

    def label_writes(self, since=0):
        """Every label key the agent's PATCHes touched."""
        keys = set()
        for r in self.api.requests(since):
            body = r.get("body")
            if r["method"] == "PATCH" and isinstance(body, dict):
                keys |= set(((body.get("metadata") or {}).get("labels") or {}).keys())
        return keys

    def warning_events(self, reason):
        return [e for e in self.api.events() if e.get("reason") == reason and e.get("type") == "Warning"]

    def create_node(self, labels=None, annotations=None):
        status, node = self.api.call("POST", "/fake/nodes", {"name": NODE, "labels": labels or {}})
        self.assertEqual(status, 201, node)
        if annotations:
            status, node = self.api.call("PATCH", "/api/v1/nodes/" + NODE,
                                         {"metadata": {"annotations": annotations}},
                                         content_type="application/merge-patch+json")
            self.assertEqual(status, 200, node)
        return node

    def test_annotation_naming_foreign_labels_is_ignored(self):
        self.create_node(labels=FOREIGN, annotations={
            "nodegate.io/owned-labels": ",".join(sorted(FOREIGN)) + ",nodegate.io/stale"})
        self.api.call("PATCH", "/api/v1/nodes/" + NODE, {"metadata": {"labels": {"nodegate.io/stale": "x"}}},
                      content_type="application/merge-patch+json")
        self.start_agent()
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 30), self.log()[-3000:])
        self.assertTrue(eventually(lambda: self.warning_events("OwnedLabelsIgnored"), 10), self.log()[-3000:])
        time.sleep(2)  # more reconciles with the same annotation in place
        labels = self.labels()
        for k, v in FOREIGN.items():
            self.assertEqual(labels.get(k), v, k)
        self.assertEqual(self.label_writes() & set(FOREIGN), set())
        # Under our prefix and recorded: ours, and stale, so removed.
        self.assertNotIn("nodegate.io/stale", labels)
        owned = self.annotations()["nodegate.io/owned-labels"].split(",")
        self.assertTrue(all(k.startswith("nodegate.io/") for k in owned), owned)
        self.assertIn("kubevirt.io/schedulable", self.log())
        self.assertEqual(len(self.warning_events("OwnedLabelsIgnored")), 1)

    def test_foreign_gate_label_is_left_alone(self):
        self.create_node(labels={"team": "other"})
        self.start_agent(["--gate-label", "team=storage"])
        self.assertTrue(eventually(lambda: self.labels().get("nodegate.io/cpu-virt") == "vmx", 30),
                        self.log()[-3000:])
        self.assertTrue(eventually(lambda: self.warning_events("GateLabelNotOwned"), 10), self.log()[-3000:])
        time.sleep(2)
        self.assertEqual(self.labels().get("team"), "other")
        self.assertNotIn("team", self.label_writes())
        self.assertNotIn("team", self.annotations()["nodegate.io/owned-labels"].split(","))
        self.assertIn("gate label team is on the node but nodegate did not write it", self.log())

    def test_own_gate_label_outside_prefix_is_written(self):
        """The control: the same gate label, absent before, is nodegate's and is written."""
        self.create_node()
        self.start_agent(["--gate-label", "team=storage"])
        self.assertTrue(eventually(lambda: self.labels().get("team") == "storage", 30), self.log()[-3000:])
        self.assertIn("team", self.annotations()["nodegate.io/owned-labels"].split(","))

    def test_bad_label_flags_are_refused(self):
        for flag, value in [("--prefix", "Bad_Prefix!"), ("--prefix", ""), ("--prefix", "kubevirt.io"),
                            ("--prefix", "node.kubernetes.io"), ("--gate-label", "a=b=c"),
                            ("--gate-label", "kubevirt.io"), ("--gate-label", ""),
                            ("--gate-label", "kubevirt.io/schedulable=true"),
                            ("--gate-label", "Bad_Key!=true")]:
            r = subprocess.run([self.binary, "agent", "--kube", "none", "--host-root", self.root, flag, value],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 2, (flag, value, r.stderr))
            self.assertIn('invalid value "%s' % value, r.stderr)
            self.assertIn(flag, r.stderr.splitlines()[0])

    def test_restored_etcd_is_relisted_and_reconciled(self):
        self.create_node()
        self.api.call("POST", "/fake/backup")
        self.start_agent()
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 30), self.log()[-3000:])
        time.sleep(1.5)
        self.api.call("POST", "/fake/restore")
        self.assertNotIn(GATE, self.labels())
        t0 = time.time()
        # Relisted within the watch cache's 3 s wait plus a reconcile; the old code waited until
        # another writer pushed the versions past ours.
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 15), self.log()[-3000:])
        print("restore-to-relabel: %.1f s" % (time.time() - t0))
        self.assertIn("node resourceVersion went backwards", self.log())
        conds = {c["type"] for c in self.api.node(NODE)["status"].get("conditions", [])}
        self.assertIn("VirtualizationReady", conds)

    def test_recreated_node_is_relisted_and_reconciled(self):
        old_uid = self.create_node()["metadata"]["uid"]
        self.start_agent()
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 30), self.log()[-3000:])
        self.assertEqual(self.api.call("DELETE", "/api/v1/nodes/" + NODE)[0], 200)
        new_uid = self.create_node()["metadata"]["uid"]
        self.assertNotEqual(old_uid, new_uid)
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 15), self.log()[-3000:])
        self.assertIn("node was recreated", self.log())
        self.assertIn(new_uid, self.log())

    def test_server_url_credentials_are_redacted(self):
        self.create_node()
        server = self.api.server.replace("https://", "https://agent:s3cr3t-pw@")
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": server, "certificate-authority": self.api.ca}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
               "users": [{"name": "agent", "user": {"token": "token-a"}}]}
        path = os.path.join(self.tmp, "userinfo.kubeconfig")
        with open(path, "w") as f:
            f.write(to_yaml(doc))
        self.start_agent(["--log-level", "debug"], kubeconfig=path)
        self.assertTrue(eventually(lambda: "kubernetes publisher started" in self.log(), 15), self.log()[-3000:])
        self.assertTrue(eventually(lambda: self.labels().get(GATE) == "true", 30), self.log()[-3000:])
        text = self.log()
        self.assertNotIn("s3cr3t-pw", text)
        self.assertIn("https://REDACTED@127.0.0.1", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
