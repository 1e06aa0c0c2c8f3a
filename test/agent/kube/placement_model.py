"""An oracle for the gate tests: kubelet's admission and the scheduler's filter as far as a Node's
name, labels and taints decide them, written from the Kubernetes source (not from nodegate's C++
model, agent/publish/kube/admission.h, which it checks):

- pkg/kubelet/lifecycle/predicate.go: generalFilter = scheduler.AdmissionCheck (node affinity via
  component-helpers GetRequiredNodeAffinity(pod).Match, node name, resources, ports) plus, for
  non-static pods, every NoExecute taint tolerated ("Kubelet is only interested in the NoExecute
  taint").
- staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go: nodeSelector
  AND required terms ORed; an empty term matches nothing; a term with a requirement that does not
  parse matches nothing; matchFields only know metadata.name.
- apimachinery labels.Requirement.Matches for In, NotIn, Exists, DoesNotExist, Gt, Lt.
- v1 Toleration.ToleratesTaint; the scheduler's TaintToleration filter on NoSchedule and NoExecute.
Resources and ports are left out: nodegate writes neither.
"""

import re

INT_RE = re.compile(r"^[+-]?[0-9]+$")


def _requirement(req, labels):
    """True/False, or None when the requirement would not parse."""
    key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
    if not key:
        return None
    has = key in labels
    if op in ("In", "NotIn"):
        if not values:
            return None
        hit = has and labels[key] in values
        return hit if op == "In" else not hit
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return has if op == "Exists" else not has
    if op in ("Gt", "Lt"):
        if len(values) != 1 or not INT_RE.match(values[0]):
            return None
        if not has or not INT_RE.match(labels[key]):
            return False
        a, b = int(labels[key]), int(values[0])
        return a > b if op == "Gt" else a < b
    return None


def _field(req, node_name):
    if req.get("operator") not in ("In", "NotIn") or len(req.get("values") or []) != 1:
        return None
    actual = node_name if req.get("key") == "metadata.name" else ""
    return (actual == req["values"][0]) == (req["operator"] == "In")


def _term(term, labels, node_name):
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    ok = True
    for r in exprs:
        m = _requirement(r, labels)
        if m is None:
            return False
        ok = ok and m
    for r in fields:
        m = _field(r, node_name)
        if m is None:
            return False
        if node_name:
            ok = ok and m
    return ok


def node_affinity_matches(pod, node):
    labels = node["metadata"].get("labels") or {}
    spec = pod.get("spec") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if req is None:
        return True
    return any(_term(t, labels, node["metadata"]["name"]) for t in req.get("nodeSelectorTerms") or [])


def tolerates(tolerations, taint):
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("key") and t["key"] != taint.get("key"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists":
            return True
        if op == "Equal" and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _untolerated(pod, node, effects):
    tols = (pod.get("spec") or {}).get("tolerations")
    for t in (node.get("spec") or {}).get("taints") or []:
        if t.get("effect") in effects and not tolerates(tols, t):
            return t
    return None


def is_static(pod):
    src = ((pod.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/config.source")
    return bool(src) and src != "api"


def kubelet_admits(pod, node):
    """(admitted, reason) of kubelet admitting pod on node, e.g. after a kubelet restart."""
    if not node_affinity_matches(pod, node):
        return False, "NodeAffinity"
    if (pod.get("spec") or {}).get("nodeName") not in (None, "", node["metadata"]["name"]):
        return False, "NodeName"
    if not is_static(pod):
        t = _untolerated(pod, node, ("NoExecute",))
        if t:
            return False, "TaintToleration %s:%s" % (t.get("key"), t.get("effect"))
    return True, ""


def scheduler_places(pod, node):
    """(placed, reason) of the scheduler's node affinity and taint filters for a new pod."""
    if not node_affinity_matches(pod, node):
        return False, "NodeAffinity"
    t = _untolerated(pod, node, ("NoSchedule", "NoExecute"))
    if t:
        return False, "TaintToleration %s:%s" % (t.get("key"), t.get("effect"))
    return True, ""


def running(pod):
    """kubelet admits again, at its restart, every pod bound to the node that is not terminal."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
