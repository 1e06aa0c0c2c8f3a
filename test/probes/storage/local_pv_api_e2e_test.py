#!/usr/bin/env python3
"""local-pv with API discovery, end to end: the real `nodegate agent` against the project's fake
API server (test/fakeapi, proven against kubectl), with PersistentVolumes, claims and a
DataVolume created by the real kubectl (`kubectl apply`, status set the way the PV controller
and CDI would, through the status subresource), a kubelet tree on a temporary host root and
a fake lvm printing a recorded report (test/fixtures/lvm/healthy.json: VG vmdata with thin LVs
pvc-aaa and pvc-bbb).

Walks through: a stopped VM's disk (PV bound, no pod) is not an orphan and names its VM; the
PV deleted -> its LV is an orphan (WARN OrphanedVolumes); a PV pinned here whose LV is missing
-> FAIL VolumeBackingMissing naming the PV and claim; RBAC denied (403) -> UNKNOWN
VolumeDiscoveryForbidden while the kubelet view still counts; healed. The node condition is read
back with kubectl. The agent must never write a PV or a claim. Ports 19300-19399.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SRC, "test", "fakeapi"))
from harness import FakeApi, eventually, free_port  # noqa: E402

NODE = "pv-node"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
MOUNT = "/var/lib/kubelet/pods/uid-alice/volumes/kubernetes.io~csi/pvc-aaa/mount"




def topolvm_pv(name, handle, claim_ns, claim, claim_uid=""):
    ref = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim_ns, "name": claim}
    if claim_uid:
        ref["uid"] = claim_uid
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": "topolvm.io"}},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "topolvm-provisioner",
                     "volumeMode": "Block", "claimRef": ref,
                     "csi": {"driver": "topolvm.io", "volumeHandle": handle, "fsType": "xfs"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "topology.topolvm.io/node", "operator": "In", "values": [NODE]}]}]}}}}


class LocalPvApiE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = os.environ.get("NODEGATE")
        if not cls.binary or not os.access(cls.binary, os.X_OK):
            raise unittest.SkipTest("$NODEGATE is not set to the nodegate binary (run through ctest)")
        if not os.access(KUBECTL, os.X_OK):
            raise unittest.SkipTest("kubectl not installed at %s (ENVIRONMENT.md says it is preinstalled)" % KUBECTL)
        cls.api = FakeApi("localpv-e2e", nodes=[NODE])
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-localpv-api-")
        cls.root = os.path.join(cls.tmp, "host")
        # One running VM (alice) with its filesystem volume mounted by the kubelet.
        vol = cls.root + os.path.dirname(MOUNT)
        os.makedirs(cls.root + MOUNT)
        with open(os.path.join(vol, "vol_data.json"), "w") as f:
            json.dump({"driverName": "topolvm.io", "specVolID": "pvc-aaa", "volumeHandle": "pvc-aaa"}, f)
        os.makedirs(os.path.join(cls.root, "proc", "1"))
        with open(os.path.join(cls.root, "proc", "1", "mountinfo"), "w") as f:
            f.write("22 1 0:21 / /proc rw,relatime - proc proc rw\n"
                    "100 1 253:3 / %s rw,relatime shared:1 - xfs /dev/topolvm/pvc-aaa rw\n" % MOUNT)
        cls.config = os.path.join(cls.tmp, "config.json")
        with open(cls.config, "w") as f:
            # The mount dir is a directory on the test machine's disk: its fill level is not ours.
            json.dump({"gate": {"required": ["local-pv"]},
                       "checks": {"local-pv": {"api_discovery": True, "used_warn_percent": 100,
                                               "used_fail_percent": 100, "lvm_max_age_seconds": 0},
                                  "lvm": {"volume_group": "vmdata"},
                                  "kube": {"startup_jitter_seconds": 0}}}, f)
        cls.debug_port = free_port(19300, 19399)
        cls.metrics_port = free_port(19300, cls.debug_port - 1)
        fixture = os.path.join(SRC, "test", "fixtures", "lvm", "healthy.json")
        cls.log_path = os.path.join(cls.tmp, "agent.log")
        cls.log = open(cls.log_path, "w")
        cls.agent = subprocess.Popen(
            [cls.binary, "agent", "--host-root", cls.root, "--kube", "kubeconfig", "--kubeconfig",
             cls.api.kubeconfig, "--node-name", NODE, "--config", cls.config, "--resync", "1",
             "--listen", "127.0.0.1:%d" % cls.metrics_port, "--debug-listen", "127.0.0.1:%d" % cls.debug_port,
             "--dns-trace", "off", "--lvm-command", "sh %s %s" % (os.path.join(HERE, "fake-lvm.sh"), fixture)],
            stdout=cls.log, stderr=subprocess.STDOUT)

    @classmethod
    def tearDownClass(cls):
        agent = getattr(cls, "agent", None)
        if agent and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        if getattr(cls, "log", None):
            cls.log.close()
        if getattr(cls, "api", None):
            cls.api.close()
        if getattr(cls, "tmp", None):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def kubectl(self, *args, stdin=None):
        env = dict(os.environ, KUBECONFIG=self.api.kubeconfig, HOME=self.tmp)
        r = subprocess.run([KUBECTL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, "kubectl %s: %s" % (" ".join(args), r.stderr))
        return r.stdout

    def apply(self, *objs):
        for o in objs:
            self.kubectl("apply", "-f", "-", stdin=json.dumps(o))

    def set_phase(self, kind, name, phase, ns=None):
        args = ["patch", kind, name, "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"phase": phase}})]
        self.kubectl(*(args + (["-n", ns] if ns else [])))

    def check(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/checks/local-pv" % self.debug_port,
                                        timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def wait_for(self, reason, also=lambda r: True, timeout=20):
        last = {}

        def ok():
            nonlocal last
            last = self.check() or {}
            return last.get("reason") == reason and also(last)
        if not eventually(ok, timeout):
            with open(self.log_path) as f:
                log = f.read()[-2000:]
            self.fail("local-pv never became %s; last: %s\nagent log: %s" % (reason, json.dumps(last)[:1500], log))
        return last

    def condition(self):
        node = json.loads(self.kubectl("get", "node", NODE, "-o", "json"))
        return {c["type"]: c for c in node["status"].get("conditions", [])}.get("LocalStorageHealthy", {})

    def evidence(self, result, source):
        return next((e["observed"] for e in result["evidence"] if e["source"] == source), "")

    def test_api_discovery_end_to_end(self):
        seq0 = self.api.last_seq()
        self.kubectl("label", "node", NODE, "topology.topolvm.io/node=%s" % NODE)
        # alice's claim is owned by her VM; bob's was made by CDI for his VM's dataVolumeTemplate.
        self.apply({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                    "metadata": {"name": "bob-root", "namespace": "vms",
                                 "labels": {"kubevirt.io/created-by": "uid-vm-bob"},
                                 "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                                      "name": "bob", "uid": "uid-vm-bob", "controller": True}]},
                    "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "10Gi"}}}}})
        dv_uid = self.kubectl("get", "dv", "-n", "vms", "bob-root", "-o", "jsonpath={.metadata.uid}")
        self.assertTrue(dv_uid)
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block",
                          "resources": {"requests": {"storage": "10Gi"}}}}
        self.apply(dict(claim, metadata={"name": "alice-root", "namespace": "vms", "ownerReferences": [
                       {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "alice", "uid": "uid-vm-alice"}]}),
                   dict(claim, metadata={"name": "bob-root", "namespace": "vms",
                                         "labels": {"app": "containerized-data-importer",
                                                    "kubevirt.io/created-by": "uid-vm-bob"},
                                         "annotations": {"cdi.kubevirt.io/createdForDataVolume": dv_uid},
                                         "ownerReferences": [{"apiVersion": "cdi.kubevirt.io/v1beta1",
                                                              "kind": "DataVolume", "name": "bob-root",
                                                              "uid": dv_uid, "controller": True}]}))
        uid = {n: self.kubectl("get", "pvc", "-n", "vms", n, "-o", "jsonpath={.metadata.uid}")
               for n in ("alice-root", "bob-root")}
        self.apply(topolvm_pv("pvc-aaa", "pvc-aaa", "vms", "alice-root", uid["alice-root"]),
                   topolvm_pv("pvc-bbb", "pvc-bbb", "vms", "bob-root", uid["bob-root"]))
        for pv in ("pvc-aaa", "pvc-bbb"):
            self.set_phase("pv", pv, "Bound")
        for c in ("alice-root", "bob-root"):
            self.set_phase("pvc", c, "Bound", "vms")

        # bob's VM is stopped: its disk is bound, used by no pod, and not an orphan.
        # (The first cycles run before the first list: wait for the API's view to be merged.)
        # Phases are set just after creation, as the controllers would: wait for them too.
        r = self.wait_for("LocalVolumesHealthy", lambda r: "Bound, claim vms/bob-root Bound, VM vms/bob"
                          in self.evidence(r, "PV pvc-bbb"))
        self.assertEqual(r["status"], "PASS")
        bbb = self.evidence(r, "PV pvc-bbb")
        self.assertIn("claim vms/bob-root Bound, VM vms/bob", bbb)
        self.assertIn("not in use by a pod on this node", bbb)
        self.assertIn("VM vms/alice", self.evidence(r, "PV pvc-aaa"))
        self.assertIn("pinned to %s" % NODE, self.evidence(r, "pv discovery api"))
        self.assertTrue(eventually(lambda: self.condition().get("status") == "True", 15), self.condition())

        # The PV object deleted (a Retain PV cleaned up by hand): its LV is left, an orphan.
        self.kubectl("delete", "pv", "pvc-bbb")
        r = self.wait_for("OrphanedVolumes")
        self.assertEqual(r["status"], "WARN")
        self.assertIn("1 LVs in vmdata have no PersistentVolume in the cluster (pvc-bbb)", r["message"])
        self.assertTrue(eventually(lambda: self.condition().get("reason") == "OrphanedVolumes", 15),
                        self.condition())

        # A PV pinned here whose LV is not: FAIL, naming the PV and its claim.
        self.apply(topolvm_pv("pvc-ccc", "6b3c1a9e-lost", "vms", "carol-root"))
        r = self.wait_for("VolumeBackingMissing")
        self.assertEqual(r["status"], "FAIL")
        self.assertIn("PV pvc-ccc (claim vms/carol-root): backing LV 6b3c1a9e-lost is not in volume group vmdata",
                      r["message"])
        self.assertTrue(eventually(lambda: self.condition().get("reason") == "VolumeBackingMissing", 15),
                        self.condition())

        # RBAC taken away: the API part is UNKNOWN with a hint; the kubelet view still counts.
        self.api.call("POST", "/fake/faults", {"path_re": "^/api/v1/persistentvolumes$", "status": 403,
                                               "count": -1, "message": "persistentvolumes is forbidden"})
        r = self.wait_for("VolumeDiscoveryForbidden")
        self.assertEqual(r["status"], "UNKNOWN")
        self.assertIn("HTTP 403", r["message"])
        self.assertIn("persistentvolumes", r["hint"])
        self.assertIn("PV pvc-aaa", {e["source"] for e in r["evidence"]})
        self.api.clear_faults()
        self.wait_for("VolumeBackingMissing")

        # Read only: the agent listed and got, in pages, and never wrote a PV or a claim.
        reqs = [q for q in self.api.requests(seq0) if q["user_agent"].lower().startswith("nodegate")]
        pv_reqs = [q for q in reqs if "persistentvolume" in q["path"] or "datavolume" in q["path"]]
        self.assertTrue(pv_reqs)
        self.assertEqual({q["method"] for q in pv_reqs}, {"GET"}, pv_reqs[:5])
        lists = [q for q in pv_reqs if q["path"] == "/api/v1/persistentvolumes"]
        self.assertTrue(all("limit=" in q["query"] for q in lists))
        self.assertTrue(any("resourceVersionMatch=NotOlderThan" in q["query"] for q in lists))
        self.assertTrue(any(q["path"] == "/apis/cdi.kubevirt.io/v1beta1/namespaces/vms/datavolumes/bob-root"
                            for q in pv_reqs))


if __name__ == "__main__":
    unittest.main(verbosity=2)
