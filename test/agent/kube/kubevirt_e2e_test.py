#!/usr/bin/env python3
"""kubevirt-node end to end (#18 item 2): the real `nodegate agent` on THIS machine's host (its
real /dev/kvm, /dev/net/tun, /dev/vhost-net, judged by the real device checks) against the fake
API server, whose Node and virt-handler pod play KubeVirt's part.

The device checks' verdicts are this machine's, so what kubevirt-node must say is derived from
them (read back from the agent), not assumed: here /dev/kvm is kvm_pvm and cannot run a standard
guest (kvm-device FAIL), so KubeVirt offering devices.kubevirt.io/kvm is DeviceAdvertisedButUnusable;
on a machine where it PASSes the same case expects Agrees.

Covers, in one agent run with a resync of 300 s (so every re-run below is the `kube` trigger of a
Node or pod change, not the timer): KubeVirt absent (PASS KubeVirtNotInstalled, condition True);
KubeVirt's devices advertised (the device checks decide); tun working but allocatable 0 of 1k
(DevicePluginUnhealthy, condition False with that reason, an Event); a stale heartbeat
(HeartbeatStale); the virt-handler pod gone (VirtHandlerMissing); and that none of it made the
agent send one API request beyond its Node/pod watches and its own writes.

Needs $NODEGATE (CTest sets it). TCP ports 19520-19539 (fake server 19520-19524, agent listeners
19525-19539)."""

import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import FakeApi, agent_get, eventually, free_port, nodegate_binary, stop  # noqa: E402

NODE = "vm-node-7"
NS = "kubevirt"
FIXTURES = os.path.join(SRC, "test", "fixtures", "kubevirt")
DEVICES = [("kvm", "kvm-device"), ("tun", "tun"), ("vhost-net", "vhost-net")]


def rfc3339(delta_s=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delta_s)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeVirtE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = nodegate_binary()
        cls.api = FakeApi("kubevirt", nodes=[], bookmark_interval=1, port_range="19520-19524")
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kubevirt-e2e-")
        cls.log_path = os.path.join(cls.tmp, "agent.log")
        cls.agent = None

    @classmethod
    def tearDownClass(cls):
        stop(cls.agent, 10)
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ----- the agent -----
    def start_agent(self):
        config = os.path.join(self.tmp, "config.json")
        with open(config, "w") as f:
            json.dump({"gate": {"required": ["cpu-virt"]},
                       "checks": {"kube": {"startup_jitter_seconds": 0, "heartbeat_seconds": 300,
                                           "watch_timeout_seconds": 60}}}, f)
        self.metrics_port = free_port(19525, 19531, reuse=True)
        self.debug_port = free_port(19532, 19539, reuse=True)
        # The machine's own host (the default --host-root): the device checks are the real ones.
        args = [self.binary, "agent", "--kube", "kubeconfig", "--kubeconfig", self.api.kubeconfig,
                "--node-name", NODE, "--config", config, "--resync", "300",
                "--listen", "127.0.0.1:%d" % self.metrics_port,
                "--debug-listen", "127.0.0.1:%d" % self.debug_port, "--dns-trace", "off",
                "--lvm-command", "false"]
        with open(self.log_path, "a") as out:
            type(self).agent = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.assertTrue(eventually(lambda: self.http("/readyz")[0] == 200, 30), self.log()[-3000:])

    def http(self, path, port=None):
        return agent_get(port or self.debug_port, path)

    def check(self, name="kubevirt-node"):
        status, body = self.http("/api/v1/checks/" + name)
        return json.loads(body) if status == 200 else {}

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def settles(self, reason, timeout=10):
        """kubevirt-node reaches `reason`, fast: the kube trigger re-runs it (the resync is 300 s)."""
        ok = eventually(lambda: self.check().get("reason") == reason, timeout)
        self.assertTrue(ok, "kubevirt-node is %s, not %s\n%s" % (
            json.dumps(self.check(), indent=1)[:3000], reason, self.log()[-2000:]))
        return self.check()

    # ----- the cluster side: what KubeVirt would write -----
    def patch_node(self, body, status=False):
        path = "/api/v1/nodes/%s%s" % (NODE, "/status" if status else "")
        code, made = self.api.call("PATCH", path, body, content_type="application/merge-patch+json")
        self.assertEqual(code, 200, made)

    def devices(self, capacity, allocatable):
        res = lambda m: {"devices.kubevirt.io/" + d: v for d, v in m.items()}
        self.patch_node({"status": {"capacity": res(capacity), "allocatable": res(allocatable)}}, status=True)

    def heartbeat(self, delta_s=0):
        self.patch_node({"metadata": {"labels": {"kubevirt.io/schedulable": "true"},
                                      "annotations": {"kubevirt.io/heartbeat": rfc3339(delta_s)}}})

    def run_virt_handler(self):
        with open(os.path.join(FIXTURES, "virt-handler-pod.json")) as f:
            pod = json.load(f)
        status = copy.deepcopy(pod["status"])
        md = pod["metadata"]
        md["namespace"] = NS
        for k in ("uid", "resourceVersion", "creationTimestamp", "selfLink"):
            md.pop(k, None)
        pod["spec"]["nodeName"] = NODE
        pod.pop("status", None)
        code, made = self.api.call("POST", "/api/v1/namespaces/%s/pods" % NS, pod)
        self.assertEqual(code, 201, made)
        code, made = self.api.call("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (NS, md["name"]),
                                   {"status": status}, content_type="application/merge-patch+json")
        self.assertEqual(code, 200, made)
        return md["name"]

    def condition(self):
        for c in self.api.node(NODE).get("status", {}).get("conditions", []):
            if c["type"] == "KubeVirtNodeHealthy":
                return c
        return {}

    def kubevirt_events(self):
        return [e for e in self.api.events() if e["regarding"]["name"] == NODE
                and e["note"].startswith("KubeVirtNodeHealthy")]

    def usable(self, check, label):
        """What the agent's own device check says of the device, as kubevirt-node reads it."""
        r = self.check(check)
        labels = r.get("labels") or {}
        return labels[label] == "true" if label in labels else r.get("status") == "PASS"

    # ----- the case -----
    def test_kubevirts_view_against_this_machines_devices(self):
        code, _ = self.api.call("POST", "/fake/nodes", {"name": NODE})
        self.assertEqual(code, 201)
        self.start_agent()

        # No KubeVirt on the node: a PASS that says so, and the condition True.
        r = self.settles("KubeVirtNotInstalled")
        self.assertEqual(r["status"], "PASS")
        self.assertTrue(eventually(lambda: self.condition().get("status") == "True", 10), self.condition())
        # The first write sets every condition at once; each that is not True gets its Event
        # (they are queued together and once shared one name: all but the first were refused).
        def first_events():
            conds = {c["type"]: c for c in self.api.node(NODE)["status"]["conditions"] if c["type"] != "Ready"}
            want = sorted((t, c["reason"]) for t, c in conds.items() if c["status"] != "True")
            got = sorted((e["note"].split(" is ")[0], e["reason"]) for e in self.api.events()
                         if e["regarding"]["name"] == NODE)
            return want, got
        self.assertTrue(eventually(lambda: first_events()[0] == first_events()[1] != [], 15), first_events())
        seq0 = self.api.last_seq()  # from here on, KubeVirt's changes only

        # KubeVirt arrives: every device advertised, virt-handler Ready, heartbeat fresh. What
        # kubevirt-node must say follows from this machine's device verdicts.
        handler = self.run_virt_handler()
        self.heartbeat()
        self.devices({"kvm": "1k", "tun": "1k", "vhost-net": "1k"}, {"kvm": "1k", "tun": "1k", "vhost-net": "1k"})
        verdicts = {res: self.usable(check, res) for res, check in DEVICES}
        unusable = [res for res, ok in verdicts.items() if not ok]
        sys.stderr.write("this machine's devices: %s\n" % verdicts)
        if unusable:
            r = self.settles("DeviceAdvertisedButUnusable")
            for res in unusable:
                self.assertIn("devices.kubevirt.io/%s but" % res, r["message"])
            # kvm broken is a FAIL (no VM starts), vhost-net alone a WARN (slow, not broken).
            self.assertEqual(r["status"], "FAIL" if set(unusable) - {"vhost-net"} else "WARN")
            if not verdicts["kvm"]:
                self.assertIn(self.check("kvm-device")["reason"], r["message"])
        else:
            r = self.settles("Agrees")
        if r["status"] == "FAIL":
            # The condition goes False with the reason (True -> False: one Warning Event).
            # KubeVirt's three writes above land one by one, so the Event's reason is whichever
            # disagreement the first of them left; a later change of the reason alone is no
            # transition.
            reason = r["reason"]
            self.assertTrue(eventually(lambda: self.condition().get("reason") == reason, 10), self.condition())
            self.assertEqual(self.condition()["status"], "False")
            warnings = lambda: [e for e in self.kubevirt_events() if e["type"] == "Warning"]
            self.assertTrue(eventually(lambda: len(warnings()) == 1, 10), self.kubevirt_events())
        else:
            # A WARN (vhost-net alone) does not make an optional condition False.
            self.assertTrue(eventually(lambda: self.condition().get("status") == "True", 10), self.condition())
        evidence = {e["source"]: e["observed"] for e in r["evidence"]}
        self.assertEqual(evidence["node status devices.kubevirt.io/kvm"], "capacity 1k, allocatable 1k")
        self.assertIn("Running, Ready", evidence["virt-handler pod %s/%s" % (NS, handler)])
        _, metrics = self.http("/metrics", self.metrics_port)
        self.assertIn('nodegate_kubevirt_device_allocatable{device="kvm"} 1000', metrics)
        self.assertIn("nodegate_kubevirt_handler_ready 1", metrics)

        # KubeVirt offers exactly what works here: they agree, the condition is True again.
        self.devices({}, {res: ("1k" if ok else "0") for res, ok in verdicts.items()})
        self.settles("Agrees")
        self.assertTrue(eventually(lambda: self.condition().get("status") == "True", 10), self.condition())

        # tun works on this machine; KubeVirt offers 0 of 1k: its plugin marked it unhealthy. The
        # devices that do not work here are offered 0 too, so that is the only disagreement.
        self.assertTrue(verdicts["tun"], "this case needs a working /dev/net/tun")
        self.devices({}, {res: ("0" if res == "tun" or not ok else "1k") for res, ok in verdicts.items()})
        r = self.settles("DevicePluginUnhealthy")
        self.assertEqual(r["status"], "FAIL")
        self.assertIn("KubeVirt offers 0 of capacity 1k devices.kubevirt.io/tun", r["message"])
        self.assertIn("restart virt-handler", r["hint"])
        self.assertTrue(eventually(lambda: self.condition().get("reason") == "DevicePluginUnhealthy", 10),
                        self.condition())
        self.assertEqual(self.condition()["status"], "False")
        self.assertIn("KubeVirt offers 0 of capacity 1k", self.condition()["message"])
        # A transition of the condition: a Warning Event with the reason (the return to True
        # before it was a Normal one).
        self.assertTrue(eventually(lambda: ("Warning", "DevicePluginUnhealthy") in
                                   [(e["type"], e["reason"]) for e in self.kubevirt_events()], 10),
                        self.kubevirt_events())

        # The plugin recovers: KubeVirt and nodegate agree again.
        self.devices({}, {res: ("1k" if ok else "0") for res, ok in verdicts.items()})
        self.settles("Agrees")
        self.assertTrue(eventually(lambda: self.condition().get("status") == "True", 10), self.condition())

        # virt-handler's heartbeat an hour old (checks.kubevirt-node.heartbeat_stale_seconds: 300).
        self.heartbeat(-3600)
        r = self.settles("HeartbeatStale")
        self.assertIn("3600 s old", r["message"])
        self.heartbeat()
        self.settles("Agrees")

        # The virt-handler pod goes: a pod change re-runs the check.
        code, _ = self.api.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (NS, handler))
        self.assertEqual(code, 200)
        self.settles("VirtHandlerMissing")
        self.assertTrue(eventually(lambda: self.condition().get("reason") == "VirtHandlerMissing", 10),
                        self.condition())

        # None of this cost a request of its own: after the first look, the agent only kept its
        # Node and pod watches (re-established, at most) and wrote the Node and Events.
        mine = [r for r in self.api.requests(seq0) if r.get("user_agent", "").startswith("nodegate/")]
        self.assertTrue(any(r["path"] == "/api/v1/nodes/%s/status" % NODE for r in mine), mine)  # it did write
        reads = [r for r in mine if r["method"] == "GET"]
        for r in reads:
            self.assertIn("watch=", r["query"] + r["path"], "a read that is not a watch: %s" % r)
            self.assertTrue(r["path"] in ("/api/v1/nodes", "/api/v1/pods"), r)
        for r in mine:
            if r["method"] != "GET":
                self.assertTrue(r["path"].startswith("/api/v1/nodes/" + NODE) or "/events" in r["path"], r)
            self.assertNotIn("virt", r["path"] + r["query"], r)


if __name__ == "__main__":
    unittest.main(verbosity=2)
