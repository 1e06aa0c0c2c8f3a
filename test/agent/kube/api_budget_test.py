#!/usr/bin/env python3
"""One Kubernetes connection per process: the real `nodegate agent` with every API reader on
(the publisher with its watch and heartbeats, the gate's pod list and watch, local-pv's PV
reader, the cluster-DNS reader),
each asking for far more than the budget, against the fake API server. Counted at the server by
arrival time, the agent's requests stay within kube.qps/kube.burst for the whole process (a
second rate limiter of the same size, as the PV reader had, lets twice as many through), and the
budget was the limit (the agent used most of it).

Needs $NODEGATE (the binary; CTest sets it). Ports 19400-19419 (test/agent/kube/CMakeLists.txt)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import FakeApi, eventually, free_port  # noqa: E402

NODE = "budget-node"
QPS, BURST = 2.0, 4.0
RUN_S = 14.0
# Requests in flight at once can reach the server bunched a little after their tokens were
# handed out: at most one per agent thread talking to the API (reconcile, node watch, pod watch,
# PV, cluster DNS).
IN_FLIGHT = 5


def pinned_pv(name):
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete",
                     "local": {"path": "/mnt/disks/" + name},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}}


class ApiBudget(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = os.environ.get("NODEGATE")
        if not cls.binary or not os.access(cls.binary, os.X_OK):
            raise unittest.SkipTest("$NODEGATE is not set to the nodegate binary (run through ctest)")
        cls.api = FakeApi("budget", nodes=[NODE], bookmark_interval=1, port_range="19400-19409")
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kube-budget-")

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_whole_process_stays_within_the_configured_budget(self):
        api = self.api
        for i in range(3):
            status, body = api.call("POST", "/api/v1/persistentvolumes", pinned_pv("pv-%d" % i))
            self.assertEqual(status, 201, body)
        root = os.path.join(self.tmp, "host")
        shutil.copytree(os.path.join(HERE, "..", "..", "fixtures", "agent", "vmx-host-e5"), root)
        config = os.path.join(self.tmp, "config.json")
        with open(config, "w") as f:
            json.dump({"gate": {"required": ["cpu-virt"]}, "checks": {
                "kube": {"qps": QPS, "burst": BURST, "startup_jitter_seconds": 0,
                         # Demand far above the budget from every reader:
                         "heartbeat_seconds": 1, "watch_timeout_seconds": 1,
                         "cluster_dns_refresh_seconds": 1},
                # One PV per page: every refresh is a GET of the Node and three LISTs.
                "local-pv": {"api_page_size": 1}}}, f)
        log_path = os.path.join(self.tmp, "agent.log")
        seq = api.last_seq()
        out = open(log_path, "w")
        agent = subprocess.Popen(
            [self.binary, "agent", "--host-root", root, "--kube", "kubeconfig", "--kubeconfig", api.kubeconfig,
             "--node-name", NODE, "--config", config, "--resync", "0.5",
             "--listen", "127.0.0.1:%d" % free_port(19410, 19419), "--debug-listen", "",
             "--dns-trace", "off", "--lvm-command", "false"],
            stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(RUN_S)
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(15)
            out.close()
        with open(log_path) as f:
            log = f.read()
        time.sleep(1.5)  # the last watch (1 to 1.5 s) is logged when it ends
        mine = [r for r in api.requests(seq) if r.get("user_agent", "").startswith("nodegate/")]
        self.assertTrue(mine, log[-3000:])

        def kind(r):
            p = r["path"]
            if "/persistentvolumes" in p:
                return "pv"
            if "/configmaps/" in p or "/endpointslices" in p or "/services/" in p:
                return "cluster-dns"
            if p == "/api/v1/pods":
                return "pods"  # the gate's pod view: its list and its watches
            if "watch=true" in r["query"]:
                return "watch"
            if r["method"] == "PATCH" and p.startswith("/api/v1/nodes/" + NODE):
                return "publisher"
            return "other"
        kinds = {}
        for r in mine:
            kinds[kind(r)] = kinds.get(kind(r), 0) + 1
        # Every reader was on and asking.
        for k in ("pv", "cluster-dns", "pods", "watch", "publisher"):
            self.assertGreater(kinds.get(k, 0), 0, "no %s requests: %s\n%s" % (k, kinds, log[-3000:]))

        arrivals = sorted(r["started"] for r in mine)
        first, last = arrivals[0], arrivals[-1]
        span = last - first
        report = "%d requests in %.1f s %s, budget qps=%g burst=%g" % (len(arrivals), span, kinds, QPS, BURST)
        print(report)
        # Every window of the run, and the whole run: no more than the bucket allows.
        for width in (4.0, 8.0, span):
            worst = max(sum(1 for t in arrivals if a <= t <= a + width) for a in arrivals)
            allowed = BURST + QPS * width + IN_FLIGHT
            print("  windows of %.1f s: at most %d requests (allowed %.1f)" % (width, worst, allowed))
            self.assertLessEqual(worst, allowed, report)
        # The budget was what held the agent back: it used most of it.
        self.assertGreaterEqual(len(arrivals), 0.75 * (BURST + QPS * span), report)


if __name__ == "__main__":
    unittest.main(verbosity=2)
