#!/usr/bin/env python3
"""A small but faithful fake of the Kubernetes API server, for nodegate's tests.

It serves what nodegate and kubectl need: nodes and nodes/status (GET, LIST, WATCH, PATCH with
JSON merge patch, strategic merge patch with list merge keys, JSON patch incl. `test`), Node
creation, events.k8s.io/v1 events (create, patch, list) and their core/v1 view for `kubectl
describe`, ConfigMaps and discovery.k8s.io/v1 EndpointSlices (what the DNS side reads), Pods (list and watch across
namespaces with field selectors such as spec.nodeName, status through /status),
discovery documents, server-side Table printing for `kubectl get`, TLS, bearer tokens with
expiry and client certificates. Semantics follow the real server where a client could tell
the difference: resourceVersion increments on every real write and not on no-op patches, a
patch whose metadata.resourceVersion is stale gets 409, a failed JSON patch `test` gets 422, a
watch from a compacted resourceVersion gets a 410 ERROR event, status writes ignore spec and
metadata and main-resource writes ignore status.

Test control lives under /fake/ (no auth): fault injection, tokens, compaction, the request log,
watch events injected as given, certificate rotation, an etcd backup and its restore (every
resourceVersion goes back to the backup's; a watch from a newer one gets 504 "Too large resource
version" as from the real watch cache), and a reset between test cases.
Python 3 standard library only.
"""

import argparse
import base64
import bisect
import copy
import datetime
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HISTORY_LIMIT = 20000
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Strategic-merge list keys of the Node fields we serve (from the upstream Go struct tags).
MERGE_KEYS = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
    ("status", "images"): None,  # atomic list: replaced
    ("spec", "taints"): None,   # no merge key: replaced whole
}


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            s["details"] = self.details
        return s


def not_found(kind, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (kind, name),
                    {"name": name, "kind": kind})


# ---------- patch algorithms ----------

def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge(target, patch, path=()):
    """Strategic merge patch as the API server applies it to the Node fields above."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$retainKeys", "$patch"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            result[field] = [x for x in result.get(field, []) if x not in v]
            continue
        sub = path + (k,)
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and MERGE_KEYS.get(sub):
            result[k] = merge_list(result.get(k) or [], v, MERGE_KEYS[sub], sub)
        elif isinstance(v, dict):
            merged = strategic_merge(result.get(k), v, sub)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        else:
            result[k] = copy.deepcopy(v)
    return result


def merge_list(current, patch, key, path):
    """A list merged by `key`, with the list directives of apimachinery's strategicpatch: every
    `{"$patch": "delete", key: v}` first removes all live entries with that key (absent: no-op),
    `{"$patch": "replace"}` makes the remaining items the whole list, `merge` and unknown
    directives are errors, and an item without the merge key is a 400."""
    out = copy.deepcopy(current)
    items, replace = [], False
    for item in patch:
        if not isinstance(item, dict):
            raise ApiError(400, "BadRequest", "map: %s does not contain declared merge key: %s" % (item, key))
        directive = item.get("$patch")
        if directive is None:
            items.append(item)
        elif directive == "delete":
            if key not in item:
                raise ApiError(400, "BadRequest",
                               "map: %s does not contain declared merge key: %s" % (item, key))
            out = [e for e in out if not (isinstance(e, dict) and e.get(key) == item[key])]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise ApiError(400, "BadRequest", "merging lists cannot yet be specified in the patch")
        else:
            raise ApiError(400, "BadRequest", "Unknown patch type: %s in map: %s" % (directive, item))
    if replace:
        return [{k: v for k, v in i.items() if not k.startswith("$")} for i in items]
    for item in items:
        if key not in item:
            raise ApiError(400, "BadRequest",
                           "map: %s does not contain declared merge key: %s" % (item, key))
        idx = next((i for i, e in enumerate(out) if isinstance(e, dict) and e.get(key) == item[key]), None)
        if idx is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge(out[idx], item, path)
    return out


def _pointer(doc, pointer):
    if pointer == "":
        return None, None
    if not pointer.startswith("/"):
        raise ApiError(422, "Invalid", "invalid JSON pointer %r" % pointer)
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]
    parent = doc
    for p in parts[:-1]:
        if isinstance(parent, list):
            parent = parent[int(p)]
        elif isinstance(parent, dict) and p in parent:
            parent = parent[p]
        else:
            raise ApiError(422, "Invalid", "doc is missing path: %s" % pointer)
    return parent, parts[-1]


def _get(doc, pointer):
    if pointer == "":
        return doc
    parent, last = _pointer(doc, pointer)
    try:
        if isinstance(parent, list):
            return parent[int(last)]
        return parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, "Invalid", "doc is missing path: %s" % pointer)


def _add(doc, pointer, value):
    parent, last = _pointer(doc, pointer)
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            parent.insert(int(last), value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", "doc is missing path: %s" % pointer)


def _remove(doc, pointer):
    parent, last = _pointer(doc, pointer)
    try:
        if isinstance(parent, list):
            return parent.pop(int(last))
        return parent.pop(last)
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, "Invalid", "doc is missing path: %s" % pointer)


def json_patch(doc, ops):
    """RFC 6902; a failed `test` is 422 as in the real server."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, "Invalid",
                               "the server rejected our request due to an error in our request: "
                               "testing value %s failed" % path)
        else:
            raise ApiError(400, "BadRequest", "unexpected json patch op %r" % kind)
    return doc


# ---------- validation ----------

def validate_labels(obj):
    errs = []
    for k, v in (obj.get("metadata", {}).get("labels") or {}).items():
        prefix, _, name = k.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN_RE.match(prefix)):
            errs.append("metadata.labels: Invalid value: %r: prefix part must be a DNS subdomain" % k)
        if not name or len(name) > 63 or not LABEL_NAME_RE.match(name):
            errs.append("metadata.labels: Invalid value: %r: name part must be a valid label name" % k)
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE_RE.match(v):
            errs.append("metadata.labels: Invalid value: %r: a valid label must be an empty string "
                        "or consist of alphanumeric characters, '-', '_' or '.'" % (v,))
    for c in obj.get("status", {}).get("conditions") or []:
        if not c.get("type") or c.get("status") not in ("True", "False", "Unknown"):
            errs.append("status.conditions: Invalid value: %r" % (c,))
    for t in obj.get("spec", {}).get("taints") or []:
        if not t.get("key") or t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append("spec.taints: Invalid value: %r" % (t,))
    if errs:
        name = obj.get("metadata", {}).get("name", "")
        raise ApiError(422, "Invalid", 'Node "%s" is invalid: %s' % (name, "; ".join(errs)),
                       {"name": name, "kind": "Node"})


def validate_event(ev, ns):
    errs = []
    md = ev.get("metadata") or {}
    if not md.get("name"):
        errs.append("metadata.name: Required value")
    if md.get("namespace", ns) != ns:
        errs.append("metadata.namespace: Invalid value: does not match the namespace in the path")
    for f in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not ev.get(f):
            errs.append("%s: Required value" % f)
    if ev.get("type") not in ("Normal", "Warning"):
        errs.append("type: Unsupported value: %r" % ev.get("type"))
    if len(ev.get("note") or "") > 1024:
        errs.append("note: Too long: must have at most 1024 bytes")
    if len(ev.get("action") or "") > 128 or len(ev.get("reason") or "") > 128:
        errs.append("action/reason: Too long: must have at most 128 bytes")
    if not isinstance(ev.get("regarding"), dict) or not ev["regarding"].get("kind"):
        errs.append("regarding: Required value")
    series = ev.get("series")
    if series is not None and (series.get("count", 0) < 2 or not series.get("lastObservedTime")):
        errs.append("series.count: Invalid value: must be at least 2 with lastObservedTime")
    if errs:
        raise ApiError(422, "Invalid", 'Event.events.k8s.io "%s" is invalid: %s' % (md.get("name", ""), "; ".join(errs)))


# ---------- state ----------

class State:
    def __init__(self, bookmark_interval):
        self.mutex = threading.RLock()
        self.lock = threading.Condition(self.mutex)  # wakes watchers without a name selector
        self.node_conds = {}  # name -> Condition on the same mutex: a write wakes only its watchers
        self.rv = 100
        self.nodes = {}
        self.events = {}  # (ns, name) -> events.k8s.io/v1 object
        self.objects = {}  # (plural, ns or "", name) -> object of a STORED_KINDS resource
        self.history = []  # (rv, type, node)
        self.history_rvs = []  # the rvs of history, for bisect
        self.obj_history = []  # (rv, type, plural, object) of STORED_KINDS writes, for their watches
        self.obj_history_rvs = []
        self.oldest_rv = self.rv  # watches from before this get 410
        self.tokens = {}  # token -> expiry (epoch seconds) or None
        self.faults = []
        self.log = []
        self.seq = 0
        self.watch_generation = 0  # bumping it ends every open watch (dropped connections)
        self.bookmark_interval = bookmark_interval
        self.injected = {}  # node name -> watch events to deliver as they are (stale ones, for tests)
        self.initial_tokens, self.initial_nodes = {}, []  # what /fake/reset goes back to
        self.backup = ({}, {}, self.rv)  # /fake/backup's snapshot

    def next_rv(self):
        self.rv += 1
        return self.rv

    def cond_for(self, name):
        c = self.node_conds.get(name)
        if c is None:
            c = self.node_conds[name] = threading.Condition(self.mutex)
        return c

    def record(self, kind, node):
        self.history.append((self.rv, kind, copy.deepcopy(node)))
        self.history_rvs.append(self.rv)
        if len(self.history) > HISTORY_LIMIT:
            cut = len(self.history) - HISTORY_LIMIT
            self.oldest_rv = self.history[cut - 1][0]  # the newest dropped event
            self.history = self.history[cut:]
            self.history_rvs = self.history_rvs[cut:]
        self.lock.notify_all()
        self.cond_for(node["metadata"]["name"]).notify_all()

    def since(self, rv):
        """History entries newer than rv."""
        return self.history[bisect.bisect_right(self.history_rvs, rv):]

    def record_obj(self, kind, plural, obj):
        """A write of a stored object, for watches of its kind (the node history is separate)."""
        self.obj_history.append((self.rv, kind, plural, copy.deepcopy(obj)))
        self.obj_history_rvs.append(self.rv)
        if len(self.obj_history) > HISTORY_LIMIT:
            cut = len(self.obj_history) - HISTORY_LIMIT
            self.oldest_rv = max(self.oldest_rv, self.obj_history[cut - 1][0])
            self.obj_history = self.obj_history[cut:]
            self.obj_history_rvs = self.obj_history_rvs[cut:]
        self.lock.notify_all()

    def obj_since(self, rv):
        return self.obj_history[bisect.bisect_right(self.obj_history_rvs, rv):]

    def forget_history(self):
        """Compaction: every watch from before now gets 410."""
        self.rv += 1
        self.oldest_rv = self.rv
        self.history, self.history_rvs = [], []
        self.obj_history, self.obj_history_rvs = [], []

    def wake_all(self):
        self.lock.notify_all()
        for c in self.node_conds.values():
            c.notify_all()

    def new_node(self, name, labels=None):
        node = {
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(),
                         "labels": dict({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                         "kubernetes.io/arch": "amd64"}, **(labels or {})),
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {
                "capacity": {"cpu": "4", "memory": "16363512Ki", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "16261112Ki", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}],
                "addresses": [{"type": "InternalIP", "address": "192.0.2.10"},
                              {"type": "Hostname", "address": name}],
                "nodeInfo": {"machineID": "fake", "systemUUID": "fake", "bootID": "fake",
                             "kernelVersion": "6.18.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "containerRuntimeVersion": "containerd://1.7.0", "kubeletVersion": "v1.32.0",
                             "kubeProxyVersion": "v1.32.0", "operatingSystem": "linux", "architecture": "amd64"},
            },
        }
        return node

    def create_node(self, node):
        with self.lock:
            name = node.get("metadata", {}).get("name")
            if not name:
                raise ApiError(422, "Invalid", "Node is invalid: metadata.name: Required value")
            if name in self.nodes:
                raise ApiError(409, "AlreadyExists", 'nodes "%s" already exists' % name,
                               {"name": name, "kind": "nodes"})
            full = self.new_node(name)
            full["metadata"].update({k: v for k, v in node.get("metadata", {}).items()
                                     if k in ("labels", "annotations")})
            if "spec" in node:
                full["spec"] = node["spec"]
            validate_labels(full)
            full["metadata"]["resourceVersion"] = str(self.next_rv())
            self.nodes[name] = full
            self.record("ADDED", full)
            return copy.deepcopy(full)

    def patch_node(self, name, ctype, body, subresource):
        with self.lock:
            if name not in self.nodes:
                raise not_found("nodes", name)
            cur = self.nodes[name]
            try:
                patch = json.loads(body or b"null")
            except ValueError as e:
                raise ApiError(400, "BadRequest", "error decoding patch: %s" % e)
            if ctype == "application/merge-patch+json":
                new = merge_patch(cur, patch)
            elif ctype == "application/strategic-merge-patch+json":
                new = strategic_merge(cur, patch)
            elif ctype == "application/json-patch+json":
                new = json_patch(cur, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media "
                               "types include: application/json-patch+json, "
                               "application/merge-patch+json, application/strategic-merge-patch+json")
            if not isinstance(new, dict):
                raise ApiError(400, "BadRequest", "patch produced a non-object")
            return self._update(name, cur, new, subresource)

    def _update(self, name, cur, new, subresource):
        want_rv = (new.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict",
                           'Operation cannot be fulfilled on nodes "%s": the object has been '
                           "modified; please apply your changes to the latest version and try again" % name,
                           {"name": name, "kind": "nodes"})
        if (new.get("metadata") or {}).get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if subresource == "status":
            # Status writes change status only (ResetObjectMetaForStatus + spec kept).
            merged = copy.deepcopy(cur)
            merged["status"] = new.get("status", {})
        else:
            merged = copy.deepcopy(new)
            merged["status"] = copy.deepcopy(cur.get("status", {}))
            for k in ("uid", "creationTimestamp"):
                merged["metadata"][k] = cur["metadata"][k]
        validate_labels(merged)
        merged["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        if merged == cur:
            return copy.deepcopy(cur)  # a no-op write is not a write: no new resourceVersion
        merged["metadata"]["resourceVersion"] = str(self.next_rv())
        self.nodes[name] = merged
        self.record("MODIFIED", merged)
        return copy.deepcopy(merged)

    def put_node(self, name, body, subresource):
        with self.lock:
            if name not in self.nodes:
                raise not_found("nodes", name)
            try:
                new = json.loads(body)
            except ValueError as e:
                raise ApiError(400, "BadRequest", "error decoding body: %s" % e)
            if not (new.get("metadata") or {}).get("resourceVersion"):
                raise ApiError(422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be "
                               "specified for an update")
            return self._update(name, self.nodes[name], new, subresource)

    def delete_node(self, name):
        with self.lock:
            if name not in self.nodes:
                raise not_found("nodes", name)
            node = self.nodes.pop(name)
            node["metadata"]["resourceVersion"] = str(self.next_rv())
            self.record("DELETED", node)
            return node


def field_selector_match(selector, getter):
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^!=]+)(==|!=|=)(.*)$", term)
        if not m:
            raise ApiError(400, "BadRequest", "invalid field selector %r" % term)
        field, op, value = m.groups()
        actual = getter(field)
        if actual is None:
            raise ApiError(400, "BadRequest", '"%s" is not a known field selector' % field)
        if (op == "!=") == (actual == value):
            return False
    return True


def node_field(node):
    def get(field):
        if field == "metadata.name":
            return node["metadata"]["name"]
        if field == "spec.unschedulable":
            return "true" if node.get("spec", {}).get("unschedulable") else "false"
        return None
    return get


def label_selector_match(selector, labels):
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def age(ts):
    try:
        t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    if s < 120:
        return "%ds" % s
    if s < 7200:
        return "%dm" % (s // 60)
    return "%dh" % (s // 3600)


def column(name, description, priority=0, fmt=""):
    """One columnDefinition of a server-side Table (every column here is a string)."""
    return {"name": name, "type": "string", "format": fmt, "description": description, "priority": priority}


NODE_COLUMNS = [
    column("Name", "Name", fmt="name"),
    column("Status", "Node status"),
    column("Roles", "Node roles"),
    column("Age", "CreationTimestamp"),
    column("Version", "Kubelet version"),
]


def node_row(node):
    ready = next((c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), None)
    status = "Unknown" if not ready else ("Ready" if ready.get("status") == "True" else "NotReady")
    if node.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in node["metadata"].get("labels", {})
                   if k.startswith("node-role.kubernetes.io/"))
    md = copy.deepcopy(node["metadata"])
    return {"cells": [md["name"], status, ",".join(roles) or "<none>", age(md.get("creationTimestamp")),
                      node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}}


def node_table(nodes, rv, with_columns=True):
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
         "rows": [node_row(n) for n in nodes]}
    if with_columns:
        t["columnDefinitions"] = NODE_COLUMNS
    return t


def core_event(ev):
    """The core/v1 view of an events.k8s.io/v1 Event (what kubectl describe reads)."""
    series = ev.get("series")
    count = series["count"] if series else 1
    return {
        "kind": "Event", "apiVersion": "v1", "metadata": copy.deepcopy(ev["metadata"]),
        "involvedObject": copy.deepcopy(ev.get("regarding", {})), "reason": ev.get("reason"),
        "message": ev.get("note", ""), "source": {"component": ev.get("reportingController", "")},
        "firstTimestamp": None, "lastTimestamp": None, "count": count, "type": ev.get("type"),
        "eventTime": ev.get("eventTime"), "series": ({"count": series["count"],
                                                       "lastObservedTime": series["lastObservedTime"]}
                                                      if series else None),
        "action": ev.get("action"), "reportingComponent": ev.get("reportingController"),
        "reportingInstance": ev.get("reportingInstance"),
    }


def event_field(ev):
    reg = ev.get("regarding", {})

    def get(field):
        table = {"involvedObject.kind": reg.get("kind", ""), "involvedObject.name": reg.get("name", ""),
                 "involvedObject.namespace": reg.get("namespace", ""), "involvedObject.uid": reg.get("uid", ""),
                 "regarding.kind": reg.get("kind", ""), "regarding.name": reg.get("name", ""),
                 "regarding.namespace": reg.get("namespace", ""), "regarding.uid": reg.get("uid", ""),
                 "metadata.name": ev["metadata"]["name"], "metadata.namespace": ev["metadata"]["namespace"],
                 "reason": ev.get("reason", ""), "type": ev.get("type", ""),
                 "reportingController": ev.get("reportingController", ""),
                 "involvedObject.apiVersion": reg.get("apiVersion", ""),
                 "involvedObject.resourceVersion": reg.get("resourceVersion", ""),
                 "involvedObject.fieldPath": reg.get("fieldPath", ""),
                 "source": ev.get("reportingController", "")}
        return table.get(field)
    return get


def resource(name, kind, verbs, namespaced, short=None, singular=""):
    r = {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs}
    if short:
        r["shortNames"] = short
    return r


# Resources kept as plain objects, with the generic semantics of the real registry: create
# resets status (set it through /status, as controllers do), main-resource writes ignore status,
# list pages with limit/continue at the first page's resourceVersion, a continue token from before
# a compaction gets 410. No controller runs: tests bind PVs and PVCs by patching their status.
# (group/version, plural) -> (kind, namespaced)
STORED_KINDS = {
    ("v1", "persistentvolumes"): ("PersistentVolume", False),
    ("v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("cdi.kubevirt.io/v1beta1", "datavolumes"): ("DataVolume", True),
    ("v1", "configmaps"): ("ConfigMap", True),
    ("v1", "services"): ("Service", True),
    ("discovery.k8s.io/v1", "endpointslices"): ("EndpointSlice", True),
    ("v1", "pods"): ("Pod", True),
    # node-readiness-controller's CRD (kubernetes-sigs/node-readiness-controller api/v1alpha1)
    ("readiness.node.x-k8s.io/v1alpha1", "nodereadinessrules"): ("NodeReadinessRule", False),
}
STATUSLESS_KINDS = {"configmaps", "endpointslices"}  # these have no status at all
STORED_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STORED_PATH_RE = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<gv>[^/]+/[^/]+))(?:/namespaces/(?P<ns>[^/]+))?"
                            r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$")
STORED_COLUMNS = [
    column("Name", "Name", fmt="name"),
    column("Status", "status.phase"),
    column("Age", "CreationTimestamp"),
]


def stored_table(items, rv):
    rows = [{"cells": [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""),
                       age(o["metadata"].get("creationTimestamp"))],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": copy.deepcopy(o["metadata"])}} for o in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": STORED_COLUMNS, "rows": rows}


# The field selectors the real registry accepts per kind (pkg/registry/core/pod/strategy.go
# ToSelectableFields for pods); every kind has metadata.name and metadata.namespace.
def stored_field(plural, obj):
    md, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    table = {"metadata.name": md.get("name", ""), "metadata.namespace": md.get("namespace", "")}
    if plural == "pods":
        table.update({
            "spec.nodeName": spec.get("nodeName", ""), "spec.restartPolicy": spec.get("restartPolicy", ""),
            "spec.schedulerName": spec.get("schedulerName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
            "status.phase": status.get("phase", ""), "status.podIP": status.get("podIP", ""),
            "status.nominatedNodeName": status.get("nominatedNodeName", "")})
    return table.get


POD_COLUMNS = [
    column("Name", "Name", fmt="name"),
    column("Ready", "The aggregate readiness state"),
    column("Status", "The aggregate status"),
    column("Restarts", "The number of restarts"),
    column("Age", "CreationTimestamp"),
    column("IP", "status.podIP", 1),
    column("Node", "spec.nodeName", 1),
]


def pod_row(pod):
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    cs = status.get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in cs)
    return [pod["metadata"]["name"], "%d/%d" % (ready, len(spec.get("containers") or [])),
            status.get("phase", ""), str(restarts), age(pod["metadata"].get("creationTimestamp")),
            status.get("podIP", "<none>"), spec.get("nodeName", "<none>")]


def kind_table(plural, items, rv, with_columns=True):
    """Server-side printing (as=Table) for kubectl get: pods in the real columns, others short."""
    if plural != "pods":
        t = stored_table(items, rv)
        if not with_columns:
            del t["columnDefinitions"]
        return t
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
         "rows": [{"cells": pod_row(o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                  "metadata": copy.deepcopy(o["metadata"])}} for o in items]}
    if with_columns:
        t["columnDefinitions"] = POD_COLUMNS
    return t


def openapi_v3(path):
    """Just enough OpenAPI v3 for kubectl's validation: it asks whether a kind's PATCH takes
    fieldValidation and, when it does, leaves validation to the server instead of downloading
    schemas. Only the stored kinds are described; the fake itself validates little."""
    gvs = sorted({gv for gv, _ in STORED_KINDS})

    def rel(gv):
        return "api/v1" if gv == "v1" else "apis/" + gv
    if path == "/openapi/v3":
        return {"paths": {rel(gv): {"serverRelativeURL": "/openapi/v3/%s?hash=fake" % rel(gv)} for gv in gvs}}
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": {},
           "components": {"schemas": {}}}
    for (gv, plural), (kind, namespaced) in STORED_KINDS.items():
        if "/openapi/v3/" + rel(gv) != path:
            continue
        group, _, version = gv.rpartition("/")
        base = "/" + rel(gv) + ("/namespaces/{namespace}" if namespaced else "") + "/" + plural
        param = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
        ext = {"group": group, "version": version, "kind": kind}
        doc["paths"][base] = {"post": {"x-kubernetes-group-version-kind": ext, "parameters": param}}
        doc["paths"][base + "/{name}"] = {"patch": {"x-kubernetes-group-version-kind": ext, "parameters": param},
                                          "put": {"x-kubernetes-group-version-kind": ext, "parameters": param}}
    if not doc["paths"]:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return doc


DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "cdi.kubevirt.io", "versions": [{"groupVersion": "cdi.kubevirt.io/v1beta1", "version": "v1beta1"}],
         "preferredVersion": {"groupVersion": "cdi.kubevirt.io/v1beta1", "version": "v1beta1"}},
        {"name": "events.k8s.io", "versions": [{"groupVersion": "events.k8s.io/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "events.k8s.io/v1", "version": "v1"}},
        {"name": "discovery.k8s.io", "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}},
        {"name": "readiness.node.x-k8s.io",
         "versions": [{"groupVersion": "readiness.node.x-k8s.io/v1alpha1", "version": "v1alpha1"}],
         "preferredVersion": {"groupVersion": "readiness.node.x-k8s.io/v1alpha1", "version": "v1alpha1"}}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        resource("nodes", "Node", ["create", "delete", "get", "list", "patch", "update", "watch"], False, ["no"], "node"),
        resource("nodes/status", "Node", ["get", "patch", "update"], False),
        resource("events", "Event", ["create", "get", "list", "patch", "watch"], True, ["ev"], "event"),
        resource("pods", "Pod", STORED_VERBS, True, ["po"], "pod"),
        resource("pods/status", "Pod", ["get", "patch", "update"], True),
        resource("persistentvolumes", "PersistentVolume", STORED_VERBS, False, ["pv"], "persistentvolume"),
        resource("persistentvolumes/status", "PersistentVolume", ["get", "patch", "update"], False),
        resource("persistentvolumeclaims", "PersistentVolumeClaim", STORED_VERBS, True, ["pvc"],
                 "persistentvolumeclaim"),
        resource("persistentvolumeclaims/status", "PersistentVolumeClaim", ["get", "patch", "update"], True),
        resource("configmaps", "ConfigMap", STORED_VERBS, True, ["cm"], "configmap"),
        resource("services", "Service", STORED_VERBS, True, ["svc"], "service"),
        resource("services/status", "Service", ["get", "patch", "update"], True),
    ]},
    "/apis/events.k8s.io": {"kind": "APIGroup", "apiVersion": "v1", "name": "events.k8s.io",
                            "versions": [{"groupVersion": "events.k8s.io/v1", "version": "v1"}],
                            "preferredVersion": {"groupVersion": "events.k8s.io/v1", "version": "v1"}},
    "/apis/events.k8s.io/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "events.k8s.io/v1",
                               "resources": [resource("events", "Event", ["create", "get", "list", "patch", "watch"],
                                                      True, ["ev"], "event")]},
    "/apis/cdi.kubevirt.io": {"kind": "APIGroup", "apiVersion": "v1", "name": "cdi.kubevirt.io",
                              "versions": [{"groupVersion": "cdi.kubevirt.io/v1beta1", "version": "v1beta1"}],
                              "preferredVersion": {"groupVersion": "cdi.kubevirt.io/v1beta1", "version": "v1beta1"}},
    "/apis/cdi.kubevirt.io/v1beta1": {"kind": "APIResourceList", "apiVersion": "v1",
                                      "groupVersion": "cdi.kubevirt.io/v1beta1", "resources": [
                                          resource("datavolumes", "DataVolume", STORED_VERBS, True, ["dv"],
                                                   "datavolume"),
                                          resource("datavolumes/status", "DataVolume", ["get", "patch", "update"],
                                                   True)]},
    "/apis/discovery.k8s.io": {"kind": "APIGroup", "apiVersion": "v1", "name": "discovery.k8s.io",
                               "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
                               "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}},
    "/apis/discovery.k8s.io/v1": {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "discovery.k8s.io/v1",
                                  "resources": [resource("endpointslices", "EndpointSlice", STORED_VERBS, True,
                                                         None, "endpointslice")]},
    "/apis/readiness.node.x-k8s.io": {"kind": "APIGroup", "apiVersion": "v1", "name": "readiness.node.x-k8s.io",
                                      "versions": [{"groupVersion": "readiness.node.x-k8s.io/v1alpha1",
                                                    "version": "v1alpha1"}],
                                      "preferredVersion": {"groupVersion": "readiness.node.x-k8s.io/v1alpha1",
                                                           "version": "v1alpha1"}},
    "/apis/readiness.node.x-k8s.io/v1alpha1": {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "readiness.node.x-k8s.io/v1alpha1",
        "resources": [resource("nodereadinessrules", "NodeReadinessRule", STORED_VERBS, False, ["nrr"],
                               "nodereadinessrule"),
                      resource("nodereadinessrules/status", "NodeReadinessRule", ["get", "patch", "update"], False)]},
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0-nodegate-fake", "gitCommit": "fake",
                 "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
                 "compiler": "gc", "platform": "linux/amd64"},
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nodegate-fake-apiserver"

    def log_message(self, fmt, *args):  # the request log replaces stderr noise
        pass

    # ----- plumbing -----
    def _send_json(self, code, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._status = code

    def _record(self, status, user, body):
        st = self.server.state
        with st.lock:
            st.seq += 1
            parsed = None
            if body:
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = body.decode(errors="replace")
            u = urllib.parse.urlsplit(self.path)
            st.log.append({"seq": st.seq, "time": time.time(), "started": getattr(self, "_started", None),
                           "method": self.command, "path": u.path,
                           "query": u.query, "status": status, "user": user,
                           "content_type": self.headers.get("Content-Type", ""), "body": parsed,
                           "user_agent": self.headers.get("User-Agent", "")})

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 3 * 1024 * 1024:
            raise ApiError(413, "RequestEntityTooLarge", "request body too large")
        return self.rfile.read(n) if n else b""

    def _authenticate(self):
        st = self.server.state
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            tok = auth[len("Bearer "):].strip()
            with st.lock:
                if tok in st.tokens:
                    exp = st.tokens[tok]
                    if exp is None or exp > time.time():
                        return "token:" + tok[:12]
            return None
        cert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        if cert:
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return "cert:" + v
            return "cert:unknown"
        return None

    def _fault(self, path):
        st = self.server.state
        with st.lock:
            for f in st.faults:
                if f.get("method") and f["method"] != self.command:
                    continue
                if f.get("path_re") and not re.search(f["path_re"], path):
                    continue
                if f.get("count", 1) == 0:
                    continue
                if f.get("count", 1) > 0:
                    f["count"] = f.get("count", 1) - 1
                f["hits"] = f.get("hits", 0) + 1
                return dict(f)
        return None

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (ConnectionError, ssl.SSLError, socket.timeout, OSError):
            self.close_connection = True

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def _dispatch(self):
        self._started = time.time()  # arrival: what a client-side rate limit spaces out
        u = urllib.parse.urlsplit(self.path)
        path, query = u.path.rstrip("/") or "/", dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        body = b""
        user = None
        self._status = 0
        try:
            body = self._body()
            if path.startswith("/fake/"):
                return self._control(path, query, body)
            fault = self._fault(path)
            if fault and fault.get("delay"):
                time.sleep(float(fault["delay"]))
            if fault and fault.get("drop"):
                self._record("dropped", None, body)
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            user = self._authenticate()
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if fault and fault.get("status"):
                hdrs = {}
                if fault.get("retry_after") is not None:
                    hdrs["Retry-After"] = fault["retry_after"]
                reasons = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
                           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
                code = int(fault["status"])
                raise ApiError(code, reasons.get(code, "Unknown"), fault.get("message", "injected fault"),
                               headers=hdrs)
            self._route(path, query, body)
            self._record(self._status, user, body)
        except ApiError as e:
            self._send_json(e.code, e.status(), e.headers)
            self._record(e.code, user, body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake must show up as a 500, not a hang
            import traceback
            traceback.print_exc()
            try:
                self._send_json(500, ApiError(500, "InternalError", "fake apiserver bug: %s" % e).status())
            except OSError:
                pass
            self._record(500, user, body)

    # ----- routes -----
    def _route(self, path, query, body):
        st = self.server.state
        m = self.command
        if m == "GET" and path in DISCOVERY:
            return self._send_json(200, DISCOVERY[path])
        if path == "/api/v1/nodes":
            if m == "GET":
                if query.get("watch") in ("true", "1"):
                    return self._watch_nodes(query)
                return self._list_nodes(query)
            if m == "POST":
                try:
                    obj = json.loads(body)
                except ValueError as e:
                    raise ApiError(400, "BadRequest", "error decoding body: %s" % e)
                return self._send_json(201, st.create_node(obj))
        mm = re.match(r"^/api/v1/nodes/([^/]+)(/status)?$", path)
        if mm:
            name, sub = mm.group(1), "status" if mm.group(2) else ""
            if m == "GET":
                with st.lock:
                    node = copy.deepcopy(st.nodes.get(name))
                if node is None:
                    raise not_found("nodes", name)
                if self._wants_table():
                    return self._send_json(200, node_table([node], node["metadata"]["resourceVersion"]))
                return self._send_json(200, node)
            if m == "PATCH":
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                return self._send_json(200, st.patch_node(name, ctype, body, sub))
            if m == "PUT":
                return self._send_json(200, st.put_node(name, body, sub))
            if m == "DELETE" and not sub:
                st.delete_node(name)
                return self._send_json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                                             "details": {"name": name, "kind": "nodes"}})
        mm = re.match(r"^/api/v1(?:/namespaces/([^/]+))?/events$", path)
        if mm and m == "GET":
            return self._list_events(mm.group(1), query, core=True)
        mm = re.match(r"^/apis/events\.k8s\.io/v1(?:/namespaces/([^/]+))?/events(?:/([^/]+))?$", path)
        if mm:
            ns, name = mm.group(1), mm.group(2)
            if m == "GET" and not name:
                return self._list_events(ns, query, core=False)
            if m == "GET":
                with st.lock:
                    ev = st.events.get((ns, name))
                if not ev:
                    raise not_found("events.events.k8s.io", name)
                return self._send_json(200, ev)
            if m == "POST" and ns and not name:
                return self._create_event(ns, body)
            if m == "PATCH" and ns and name:
                return self._patch_event(ns, name, body)
        mm = re.match(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+)$", path)
        if mm and m == "GET":
            raise not_found("leases.coordination.k8s.io", mm.group(2))
        mm = STORED_PATH_RE.match(path)
        if mm and (mm.group("core") or mm.group("gv"), mm.group("plural")) in STORED_KINDS:
            return self._stored(mm, query, body)
        if m == "GET" and path.startswith("/openapi/v3"):
            return self._send_json(200, openapi_v3(path))
        if path.startswith("/openapi") or path.startswith("/apis/"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _wants_table(self):
        return "as=Table" in (self.headers.get("Accept") or "")

    def _list_nodes(self, query):
        st = self.server.state
        with st.lock:
            items = [copy.deepcopy(n) for n in st.nodes.values()
                     if field_selector_match(query.get("fieldSelector"), node_field(n))
                     and label_selector_match(query.get("labelSelector"), n["metadata"].get("labels", {}))]
            rv = st.rv
        if self._wants_table():
            return self._send_json(200, node_table(items, rv))
        return self._send_json(200, {"kind": "NodeList", "apiVersion": "v1",
                                     "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _watch_nodes(self, query):
        st = self.server.state
        sel, lsel = query.get("fieldSelector"), query.get("labelSelector")
        field_selector_match(sel, lambda f: "" if f in ("metadata.name", "spec.unschedulable") else None)

        def match(n):
            return (field_selector_match(sel, node_field(n))
                    and label_selector_match(lsel, n["metadata"].get("labels", {})))

        m = re.match(r"^metadata\.name=([^,=!]+)$", sel or "")
        watched = m.group(1) if m else None
        self._stream_watch(query, "Node", match, lambda: st.nodes.values(),
                           lambda last: [(rv, k, n) for (rv, k, n) in st.since(last)],
                           lambda objs, first: node_table(objs, objs[0]["metadata"]["resourceVersion"], first),
                           cond=st.cond_for(watched) if watched else st.lock, injected_for=watched)

    def _watch_stored(self, gv, plural, kind, ns, query):
        st = self.server.state
        sel, lsel = query.get("fieldSelector"), query.get("labelSelector")
        probe = {"metadata": {}, "spec": {}, "status": {}}
        field_selector_match(sel, lambda f: "" if stored_field(plural, probe)(f) is not None else None)

        def match(o):
            return ((not ns or o["metadata"].get("namespace") == ns)
                    and field_selector_match(sel, stored_field(plural, o))
                    and label_selector_match(lsel, o["metadata"].get("labels") or {}))

        self._stream_watch(query, kind, match,
                           lambda: [o for (p, _, _), o in st.objects.items() if p == plural],
                           lambda last: [(rv, k, o) for (rv, k, p, o) in st.obj_since(last) if p == plural],
                           lambda objs, first: kind_table(plural, objs, objs[0]["metadata"]["resourceVersion"],
                                                          first),
                           cond=st.lock, api_version=gv)

    def _refuse_future_rv(self, rv_param, cond):
        """The watch cache waits up to 3 s for a resourceVersion it has not reached, then answers
        504 Timeout with cause ResourceVersionTooLarge (apiserver storage/cacher; client-go's
        reflector relists on it). After an etcd restore every client's version is ahead."""
        st = self.server.state
        try:
            want = int(rv_param or 0)
        except ValueError:
            return
        end = time.time() + 3.0
        with st.lock:
            while want > st.rv and time.time() < end:
                cond.wait(max(0.0, min(0.2, end - time.time())))
            if want > st.rv:
                raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (want, st.rv),
                               {"causes": [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}],
                                "retryAfterSeconds": 1})

    def _stream_watch(self, query, kind, match, current, since, table_of, cond, injected_for=None,
                      api_version="v1"):
        """A watch as the API server streams it: the current objects as ADDED when no
        resourceVersion is given, else every change after it (410 when compacted away), then
        changes as they happen, BOOKMARKs when asked for, until timeoutSeconds. Events injected
        by the test for `injected_for` are sent as given."""
        st = self.server.state
        table = self._wants_table()
        bookmarks = query.get("allowWatchBookmarks") == "true"
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.time() + timeout
        rv_param = query.get("resourceVersion", "")
        self._refuse_future_rv(rv_param, cond)

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._status = 200
        first_table = [True]

        def send(ev, obj):
            if table and ev != "ERROR" and ev != "BOOKMARK":
                obj = table_of([obj], first_table[0])
                first_table[0] = False
            line = (json.dumps({"type": ev, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        with st.lock:
            gen = st.watch_generation
            if rv_param in ("", "0"):
                pending = [("ADDED", copy.deepcopy(o)) for o in current() if match(o)]
                last = st.rv
            else:
                try:
                    since_rv = int(rv_param)
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % rv_param)
                if since_rv < st.oldest_rv:
                    pending = [("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                          "status": "Failure", "message": "too old resource version: %d (%d)"
                                          % (since_rv, st.oldest_rv), "reason": "Expired", "code": 410})]
                    last = None
                else:
                    pending = [(k, o) for (rv, k, o) in since(since_rv) if match(o)]
                    last = max(since_rv, st.rv)
        try:
            for k, o in pending:
                send(k, o)
            if last is None:
                self.wfile.write(b"0\r\n\r\n")
                return
            next_bookmark = time.time() + st.bookmark_interval
            while True:
                with st.lock:
                    new = since(last)
                    if not new and not st.injected.get(injected_for) and st.watch_generation == gen:
                        wait = min(deadline, next_bookmark) - time.time()
                        if wait > 0:
                            cond.wait(min(wait, 5.0))
                        new = since(last)
                    if st.watch_generation != gen:
                        raise ConnectionResetError("watch dropped by control")
                    current_rv = st.rv
                    injected = st.injected.pop(injected_for, []) if injected_for else []
                for k, o in injected:
                    send(k, o)  # as the test gave it: the resourceVersion may go backwards
                for rv, k, o in new:
                    last = rv
                    if match(o):
                        send(k, o)
                if time.time() >= deadline:
                    break
                if bookmarks and time.time() >= next_bookmark:
                    send("BOOKMARK", {"kind": kind, "apiVersion": api_version,
                                      "metadata": {"resourceVersion": str(current_rv)}})
                    last = max(last, current_rv)
                    next_bookmark = time.time() + st.bookmark_interval
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            # A dropped watch: the client sees the stream end without the terminating chunk.
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _list_events(self, ns, query, core):
        st = self.server.state
        with st.lock:
            items = [copy.deepcopy(e) for (n, _), e in st.events.items()
                     if (ns is None or n == ns) and field_selector_match(query.get("fieldSelector"), event_field(e))]
            rv = st.rv
        if core:
            return self._send_json(200, {"kind": "EventList", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": str(rv)},
                                         "items": [core_event(e) for e in items]})
        return self._send_json(200, {"kind": "EventList", "apiVersion": "events.k8s.io/v1",
                                     "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _create_event(self, ns, body):
        st = self.server.state
        try:
            ev = json.loads(body)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding body: %s" % e)
        validate_event(ev, ns)
        with st.lock:
            name = ev["metadata"]["name"]
            if (ns, name) in st.events:
                raise ApiError(409, "AlreadyExists", 'events.events.k8s.io "%s" already exists' % name)
            ev["metadata"].update({"namespace": ns, "uid": str(uuid.uuid4()),
                                   "creationTimestamp": now_rfc3339(), "resourceVersion": str(st.next_rv())})
            ev.setdefault("apiVersion", "events.k8s.io/v1")
            ev.setdefault("kind", "Event")
            st.events[(ns, name)] = ev
            return self._send_json(201, ev)

    def _patch_event(self, ns, name, body):
        st = self.server.state
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        with st.lock:
            cur = st.events.get((ns, name))
            if not cur:
                raise not_found("events.events.k8s.io", name)
            patch = json.loads(body or b"null")
            if ctype == "application/json-patch+json":
                new = json_patch(cur, patch)
            elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                new = merge_patch(cur, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", "unsupported patch type %r" % ctype)
            validate_event(new, ns)
            new["metadata"]["resourceVersion"] = str(st.next_rv())
            st.events[(ns, name)] = new
            return self._send_json(200, new)

    # ----- stored objects (STORED_KINDS) -----
    def _stored(self, mm, query, body):
        st = self.server.state
        gv, plural, ns, name, sub = (mm.group("core") or mm.group("gv"), mm.group("plural"), mm.group("ns"),
                                     mm.group("name"), mm.group("sub") or "")
        kind, namespaced = STORED_KINDS[(gv, plural)]
        if ns and not namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if namespaced and name and not ns:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        key = (plural, ns or "", name)
        m = self.command
        if not name:
            if m == "GET" and query.get("watch") in ("true", "1"):
                return self._watch_stored(gv, plural, kind, ns, query)
            if m == "GET":
                return self._list_stored(gv, plural, kind, ns, query)
            if m == "POST" and (ns or not namespaced):
                return self._send_json(201, self._create_stored(gv, plural, kind, ns, body))
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        with st.lock:
            cur = st.objects.get(key)
            if cur is None:
                raise not_found(plural, name)
            if m == "GET":
                if self._wants_table():
                    return self._send_json(200, kind_table(plural, [cur], cur["metadata"]["resourceVersion"]))
                return self._send_json(200, copy.deepcopy(cur))
            if m == "DELETE" and not sub:
                # No kubelet here to finish a graceful deletion: every delete is immediate, as
                # with --grace-period=0 --force.
                del st.objects[key]
                gone = copy.deepcopy(cur)
                gone["metadata"]["resourceVersion"] = str(st.next_rv())
                st.record_obj("DELETED", plural, gone)
                return self._send_json(200, gone)
            if m in ("PATCH", "PUT"):
                try:
                    doc = json.loads(body or b"null")
                except ValueError as e:
                    raise ApiError(400, "BadRequest", "error decoding body: %s" % e)
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if m == "PUT":
                    new = doc
                elif ctype == "application/merge-patch+json":
                    new = merge_patch(cur, doc)
                elif ctype == "application/strategic-merge-patch+json":
                    new = strategic_merge(cur, doc)
                elif ctype == "application/json-patch+json":
                    new = json_patch(cur, doc)
                else:
                    raise ApiError(415, "UnsupportedMediaType", "unsupported patch type %r" % ctype)
                if not isinstance(new, dict) or (new.get("metadata") or {}).get("name") != name:
                    raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
                want_rv = new["metadata"].get("resourceVersion")
                if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has '
                                   "been modified; please apply your changes to the latest version and try again"
                                   % (plural, name), {"name": name, "kind": plural})
                merged = copy.deepcopy(cur)
                if sub == "status":
                    merged["status"] = new.get("status", {})
                else:
                    merged = {k: copy.deepcopy(v) for k, v in new.items() if k != "status"}
                    if plural not in STATUSLESS_KINDS:
                        merged["status"] = copy.deepcopy(cur.get("status", {}))
                    for k in ("uid", "creationTimestamp", "namespace"):
                        if k in cur["metadata"]:
                            merged["metadata"][k] = cur["metadata"][k]
                merged["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                if merged != cur:
                    merged["metadata"]["resourceVersion"] = str(st.next_rv())
                    st.objects[key] = merged
                    st.record_obj("MODIFIED", plural, merged)
                return self._send_json(200, copy.deepcopy(merged))
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _create_stored(self, gv, plural, kind, ns, body):
        st = self.server.state
        try:
            obj = json.loads(body)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding body: %s" % e)
        md = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(md, dict) or not md.get("name"):
            raise ApiError(422, "Invalid", "%s is invalid: metadata.name: Required value" % kind)
        if not DNS_SUBDOMAIN_RE.match(md["name"]):
            raise ApiError(422, "Invalid", '%s "%s" is invalid: metadata.name: Invalid value' % (kind, md["name"]))
        if ns and md.get("namespace", ns) != ns:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                           "sent on the request")
        with st.lock:
            key = (plural, ns or "", md["name"])
            if key in st.objects:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (plural, md["name"]),
                               {"name": md["name"], "kind": plural})
            obj = copy.deepcopy(obj)
            obj.update({"apiVersion": gv, "kind": kind})
            obj["metadata"].update({"uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(),
                                    "resourceVersion": str(st.next_rv())})
            if ns:
                obj["metadata"]["namespace"] = ns
            # Status is the controllers' to write, through the status subresource.
            if plural not in STATUSLESS_KINDS:
                obj["status"] = {"phase": "Pending"} if plural != "datavolumes" else {}
            st.objects[key] = obj
            st.record_obj("ADDED", plural, obj)
            return copy.deepcopy(obj)

    def _list_stored(self, gv, plural, kind, ns, query):
        st = self.server.state
        rv_q, match = query.get("resourceVersion", ""), query.get("resourceVersionMatch", "")
        with st.lock:
            if rv_q not in ("", "0"):
                try:
                    want = int(rv_q)
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % rv_q)
                if want > st.rv:
                    raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (want, st.rv))
                if match == "Exact" and want < st.oldest_rv:
                    raise ApiError(410, "Expired", "too old resource version: %d (%d)" % (want, st.oldest_rv))
            start, list_rv = ("", ""), st.rv
            if query.get("continue"):
                try:
                    tok = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
                    start, list_rv = tuple(tok["start"]), int(tok["rv"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid")
                if list_rv < st.oldest_rv:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                   "consistent list result. You can start a new list without the continue parameter.")
            items = sorted(((k[1], k[2]), o) for k, o in st.objects.items()
                           if k[0] == plural and (not ns or k[1] == ns))
            items = [o for (pos, o) in items if pos > start
                     and label_selector_match(query.get("labelSelector"), o["metadata"].get("labels") or {})
                     and field_selector_match(query.get("fieldSelector"), stored_field(plural, o))]
            limit = int(query.get("limit") or 0)
            md = {"resourceVersion": str(list_rv)}
            if limit > 0 and len(items) > limit:
                items = items[:limit]
                last = items[-1]["metadata"]
                md["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"rv": list_rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
            items = copy.deepcopy(items)
        if self._wants_table():
            return self._send_json(200, kind_table(plural, items, list_rv))
        return self._send_json(200, {"kind": kind + "List", "apiVersion": gv, "metadata": md, "items": items})

    # ----- test control -----
    def _control(self, path, query, body):
        st = self.server.state
        m = self.command
        data = json.loads(body) if body else {}
        with st.lock:
            if path == "/fake/healthz":
                return self._send_json(200, {"ok": True, "rv": st.rv})
            if path == "/fake/requests" and m == "GET":
                since = int(query.get("since", 0))
                return self._send_json(200, [e for e in st.log if e["seq"] > since])
            if path == "/fake/faults" and m == "POST":
                f = dict(data)
                f.setdefault("count", 1)
                st.faults.append(f)
                return self._send_json(200, {"faults": st.faults})
            if path == "/fake/faults" and m == "GET":
                return self._send_json(200, {"faults": st.faults})
            if path == "/fake/faults" and m == "DELETE":
                st.faults = []
                return self._send_json(200, {"faults": []})
            if path == "/fake/tokens" and m == "POST":
                exp = data.get("expires_in")
                st.tokens[data["token"]] = None if exp is None else time.time() + float(exp)
                return self._send_json(200, {"ok": True})
            if path == "/fake/tokens" and m == "DELETE":
                st.tokens.pop(data["token"], None)
                return self._send_json(200, {"ok": True})
            if path == "/fake/compact" and m == "POST":
                st.forget_history()
                return self._send_json(200, {"oldest_rv": st.oldest_rv})
            if path == "/fake/backup" and m == "POST":
                # An etcd snapshot: the objects and the revision as they are now.
                st.backup = (copy.deepcopy(st.nodes), copy.deepcopy(st.objects), st.rv)
                return self._send_json(200, {"rv": st.rv})
            if path == "/fake/restore" and m == "POST":
                # etcd restored from the backup and the API server restarted on it: objects and
                # revision go back (written since is lost), the watch history starts over and
                # every open watch is dropped.
                nodes, objects, rv = st.backup
                st.nodes, st.objects = copy.deepcopy(nodes), copy.deepcopy(objects)
                st.rv = rv
                st.oldest_rv = rv
                st.history, st.history_rvs, st.obj_history, st.obj_history_rvs = [], [], [], []
                st.watch_generation += 1
                st.wake_all()
                return self._send_json(200, {"rv": st.rv})
            if path == "/fake/drop-watches" and m == "POST":
                st.watch_generation += 1
                st.wake_all()
                return self._send_json(200, {"ok": True})
            if path == "/fake/nodes" and m == "GET":
                return self._send_json(200, st.nodes)
            if path == "/fake/events" and m == "GET":
                return self._send_json(200, list(st.events.values()))
            if path == "/fake/watch-events" and m == "POST":
                # Delivered to the open watches of that node as given, e.g. an old copy of it.
                st.injected.setdefault(data["node"], []).append((data.get("type", "MODIFIED"), data["object"]))
                st.cond_for(data["node"]).notify_all()
                return self._send_json(200, {"ok": True})
            if path == "/fake/watch-events" and m == "GET":
                return self._send_json(200, {"pending": sum(len(v) for v in st.injected.values())})
            if path == "/fake/reset" and m == "POST":
                # Between test cases sharing one server: no objects, faults, extra tokens or
                # history (so old watches get 410), every watch dropped. The request log starts
                # over; its sequence numbers keep counting.
                st.nodes, st.events, st.objects, st.faults, st.injected, st.log = {}, {}, {}, [], {}, []
                st.tokens = dict(st.initial_tokens)
                st.forget_history()
                st.watch_generation += 1
                st.wake_all()
                for n in st.initial_nodes:
                    st.create_node(st.new_node(n))
                self.server.set_tls(None, keep=self.connection)
                return self._send_json(200, {"ok": True, "rv": st.rv})
        if path == "/fake/tls" and m == "POST":
            # Serve a certificate from another CA (made in tls_dir when missing) from now on and
            # close every open connection, as an API server restarted with rotated certificates.
            ensure_certs(data["tls_dir"])
            self.server.set_tls(data["tls_dir"], keep=self.connection)
            return self._send_json(200, {"ok": True})
        if path == "/fake/nodes" and m == "POST":
            node = st.new_node(data["name"], data.get("labels"))
            return self._send_json(201, st.create_node(node))
        raise ApiError(404, "NotFound", "unknown control path %s" % path)


def ensure_certs(tls_dir):
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate.
    P-256 keys: an RSA-2048 key takes seconds on a loaded CI machine and every test server makes
    three; API servers serve ECDSA certificates just as well."""
    os.makedirs(tls_dir, exist_ok=True)
    if os.path.exists(os.path.join(tls_dir, "client.crt")):
        return

    def run(*args):
        subprocess.run(list(args), check=True, cwd=tls_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=nodegate-fake-ca")
    with open(os.path.join(tls_dir, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
    with open(os.path.join(tls_dir, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "client.key", "-out", "client.csr",
        "-subj", "/CN=system:node:test/O=system:nodes")
    run("openssl", "x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "client.crt", "-days", "2", "-extfile", "client.ext")


def make_ssl_context(tls_dir):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(tls_dir, "server.crt"), os.path.join(tls_dir, "server.key"))
    ctx.load_verify_locations(os.path.join(tls_dir, "ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, addr, state, ssl_ctx, tls_dir=None):
        self.state = state
        self.ssl_ctx = ssl_ctx
        self.tls_dir = self.first_tls_dir = tls_dir
        self.conns = set()  # open client sockets, closed on a certificate change
        self.conns_lock = threading.Lock()
        super().__init__(addr, Handler)

    def set_tls(self, tls_dir, keep=None):
        """Serves the certificates in tls_dir (None: the ones from the start) to new connections
        and closes the open ones (but `keep`, the caller's) when that changes anything."""
        tls_dir = tls_dir or self.first_tls_dir
        if not self.ssl_ctx or tls_dir == self.tls_dir:
            return
        self.ssl_ctx = make_ssl_context(tls_dir)
        self.tls_dir = tls_dir
        with self.conns_lock:
            conns = list(self.conns)
        for c in conns:
            if c is keep:
                continue
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def get_request(self):
        sock, addr = super().get_request()
        if self.ssl_ctx:
            # The handshake happens in the handler thread so one slow client cannot stall accept().
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self.conns_lock:
            self.conns.add(sock)
        return sock, addr

    def shutdown_request(self, request):
        with self.conns_lock:
            self.conns.discard(request)
        super().shutdown_request(request)

    def finish_request(self, request, client_address):
        if isinstance(request, ssl.SSLSocket):
            try:
                request.settimeout(30)
                request.do_handshake()
                request.settimeout(None)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-range", default="19300-19399", help="first free port in this range")
    ap.add_argument("--port-file", help="write the chosen port here once listening")
    ap.add_argument("--tls-dir", help="CA and certificates (generated with openssl when missing)")
    ap.add_argument("--plain", action="store_true", help="serve plain HTTP (benchmarks only)")
    ap.add_argument("--token", action="append", default=[], help="accepted bearer token (repeatable)")
    ap.add_argument("--node", action="append", default=[], help="node to create at start (repeatable)")
    ap.add_argument("--bookmark-interval", type=float, default=60.0)
    args = ap.parse_args()

    state = State(args.bookmark_interval)
    for t in args.token:
        state.tokens[t] = None
    state.initial_tokens = dict(state.tokens)
    state.initial_nodes = list(args.node)
    for n in args.node:
        state.create_node(state.new_node(n))

    ctx = None
    if not args.plain:
        if not args.tls_dir:
            ap.error("--tls-dir is required unless --plain")
        ensure_certs(args.tls_dir)
        ctx = make_ssl_context(args.tls_dir)

    ports = [args.port] if args.port else range(*(lambda a, b: (int(a), int(b) + 1))(*args.port_range.split("-")))
    server = None
    for p in ports:
        try:
            server = Server(("127.0.0.1", p), state, ctx, None if args.plain else args.tls_dir)
            break
        except OSError:
            continue
    if server is None:
        print("fake-apiserver: failed to bind a port in %s" % args.port_range, file=sys.stderr)
        return 1
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print("fake-apiserver: listening on %s://127.0.0.1:%d" % ("http" if args.plain else "https", port), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
