#!/usr/bin/env python3
"""Two models of kubelet's admission and the scheduler's filter, written separately from the
Kubernetes source — the agent's C++ one (agent/publish/kube/admission.h, through admission_cli)
and this test's oracle (placement_model.py) — must agree on thousands of generated pods and
nodes: node selectors, affinity terms with every operator (valid and not), matchFields, taints of
every effect, tolerations, static pods. Needs $ADMISSION_CLI (CTest sets it)."""

import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_model as model  # noqa: E402

KEYS = ["nodegate.io/vm-ready", "nodegate.io/kvm", "kubevirt.io/schedulable", "zone", "gen"]
VALUES = ["true", "false", "a", "b", "7", "12", "-3", "x1"]
OPS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


def rnd_values(r, op):
    if op in ("Exists", "DoesNotExist"):
        return [] if r.random() < 0.85 else [r.choice(VALUES)]
    if op in ("Gt", "Lt"):
        return [r.choice(["5", "10", "abc", "-1"])] if r.random() < 0.9 else ["1", "2"]
    return r.sample(VALUES, r.randint(0 if r.random() < 0.1 else 1, 3))


def rnd_requirement(r):
    op = r.choice(OPS)
    req = {"key": r.choice(KEYS + [""] if r.random() < 0.05 else KEYS), "operator": op}
    vals = rnd_values(r, op)
    if vals or r.random() < 0.5:
        req["values"] = vals
    return req


def rnd_pod(r):
    spec = {"nodeName": "n1" if r.random() < 0.95 else "n2"}
    if r.random() < 0.5:
        spec["nodeSelector"] = {k: r.choice(VALUES[:3]) for k in r.sample(KEYS[:3], r.randint(1, 2))}
    if r.random() < 0.6:
        terms = []
        for _ in range(r.randint(0, 3)):
            t = {}
            if r.random() < 0.9:
                t["matchExpressions"] = [rnd_requirement(r) for _ in range(r.randint(0, 3))]
            if r.random() < 0.2:
                op = r.choice(["In", "NotIn", "Exists"])
                t["matchFields"] = [{"key": r.choice(["metadata.name", "spec.x"]), "operator": op,
                                     "values": r.sample(["n1", "n2"], r.randint(1, 2))}]
            terms.append(t)
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                             {"nodeSelectorTerms": terms}}}
    if r.random() < 0.7:
        spec["tolerations"] = []
        for _ in range(r.randint(0, 3)):
            t = {"operator": r.choice(["Exists", "Equal", ""])}
            if r.random() < 0.8:
                t["key"] = r.choice(["nodegate.io/not-ready", "example.com/drain", "node.kubernetes.io/not-ready"])
            if r.random() < 0.6:
                t["effect"] = r.choice(EFFECTS)
            if t["operator"] != "Exists":
                t["value"] = r.choice(["", "x"])
            spec["tolerations"].append(t)
    md = {"name": "p", "namespace": "default", "uid": "u"}
    if r.random() < 0.1:
        md["annotations"] = {"kubernetes.io/config.source": r.choice(["file", "api", "http"])}
    return {"metadata": md, "spec": spec, "status": {"phase": "Running"}}


def rnd_node(r):
    labels = {k: r.choice(VALUES) for k in KEYS if r.random() < 0.75}
    taints = []
    for _ in range(r.randint(0, 2)):
        t = {"key": r.choice(["nodegate.io/not-ready", "example.com/drain", "node.kubernetes.io/not-ready"]),
             "effect": r.choice(EFFECTS)}
        if r.random() < 0.3:
            t["value"] = "x"
        taints.append(t)
    return {"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}}


class AdmissionModels(unittest.TestCase):
    def test_models_agree(self):
        cli = os.environ.get("ADMISSION_CLI")
        if not cli or not os.access(cli, os.X_OK):
            raise unittest.SkipTest("$ADMISSION_CLI is not set (run through ctest)")
        seed = int(os.environ.get("SEED", "18"))
        r = random.Random(seed)
        cases = [(rnd_pod(r), rnd_node(r)) for _ in range(4000)]
        stdin = "".join(json.dumps({"pod": p, "node": n}) + "\n" for p, n in cases)
        out = subprocess.run([cli], input=stdin, capture_output=True, text=True, timeout=60, check=True)
        got = [json.loads(l) for l in out.stdout.splitlines()]
        self.assertEqual(len(got), len(cases))
        admitted = refused = 0
        for (pod, node), g in zip(cases, got):
            want_k = model.kubelet_admits(pod, node)[0]
            want_s = model.scheduler_places(pod, node)[0]
            self.assertNotIn("error", g, json.dumps(pod))
            self.assertEqual((g["kubelet"], g["scheduler"]), (want_k, want_s),
                             "seed %d: pod %s node %s" % (seed, json.dumps(pod), json.dumps(node)))
            admitted += want_k
            refused += not want_k
        # The generator must exercise both outcomes, or agreement proves little.
        self.assertGreater(admitted, 300)
        self.assertGreater(refused, 300)
        print("%d cases agree (%d admitted by kubelet, %d refused)" % (len(cases), admitted, refused))


if __name__ == "__main__":
    unittest.main(verbosity=2)
