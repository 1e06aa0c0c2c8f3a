#!/usr/bin/env python3
"""A small fake of the Kubernetes node API for the cleanup hook's script (a fake, not the real API
server: none can run here). It serves what nodegate-cleanup uses, with the API server's semantics
for them: GET of nodes and pods, PATCH with application/json-patch+json (RFC 6902 add, remove,
replace, test; a failed test is 422 like the API server's), the status subresource applying only
status and the main resource ignoring status, a resourceVersion bumped on every write, bearer-token
checks. Fault: a concurrent writer changes node "racy" just before the first patch to it, so the
script's resourceVersion test fails once and it has to read again.

usage: fake_nodes_api.py PORT STATE.json TOKEN   (writes the final state back to STATE.json on exit
and logs every request to STATE.json.log)
"""
import copy
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

PORT, STATE, TOKEN = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(STATE) as f:
    state = json.load(f)
nodes = {n["metadata"]["name"]: n for n in state["nodes"]}
pods_left = state.get("pods_for_polls", 0)
rv = 100
raced = False
log = open(STATE + ".log", "w")


def bump(node):
    global rv
    rv += 1
    node["metadata"]["resourceVersion"] = str(rv)


def unescape(tok):
    return tok.replace("~1", "/").replace("~0", "~")


def locate(doc, path):
    toks = [unescape(t) for t in path.split("/")[1:]]
    parent = doc
    for t in toks[:-1]:
        parent = parent[int(t)] if isinstance(parent, list) else parent[t]
    return parent, toks[-1]


def apply_patch(doc, ops):
    for op in ops:
        parent, key = locate(doc, op["path"])
        if isinstance(parent, list):
            key = int(key)
        if op["op"] == "test":
            if parent[key] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "remove":
            del parent[key]
        elif op["op"] in ("replace", "add"):
            if op["op"] == "replace" and (key not in parent if isinstance(parent, dict) else key >= len(parent)):
                raise ValueError(f"replace of missing {op['path']}")
            parent[key] = op["value"]
        else:
            raise ValueError(f"unsupported op {op['op']}")


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                          "reason": reason, "message": message})

    def authorized(self):
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.status(401, "Unauthorized", "Unauthorized")
            return False
        return True

    def log_message(self, *args):
        pass

    def do_GET(self):
        global pods_left
        log.write(f"GET {self.path}\n")
        log.flush()
        if not self.authorized():
            return
        parts = urlparse(self.path).path.strip("/").split("/")
        if parts == ["api", "v1", "nodes"]:
            self.reply(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                             "items": list(nodes.values())})
        elif parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            if parts[3] not in nodes:
                return self.status(404, "NotFound", f'nodes "{parts[3]}" not found')
            self.reply(200, nodes[parts[3]])
        elif parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["pods"]:
            items = []
            if pods_left > 0:
                pods_left -= 1
                items = [{"metadata": {"name": "nodegate-abcde", "namespace": parts[3]}}]
            self.reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        else:
            self.status(404, "NotFound", "not found")

    def do_PATCH(self):
        global raced
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        log.write(f"PATCH {self.path} {body.decode()}\n")
        log.flush()
        if not self.authorized():
            return
        if self.headers.get("Content-Type") != "application/json-patch+json":
            return self.status(415, "UnsupportedMediaType", "want application/json-patch+json")
        parts = urlparse(self.path).path.strip("/").split("/")
        if parts[:3] != ["api", "v1", "nodes"] or len(parts) not in (4, 5) or parts[3] not in nodes:
            return self.status(404, "NotFound", "not found")
        node = nodes[parts[3]]
        sub = parts[4] if len(parts) == 5 else ""
        if parts[3] == "racy" and not raced:
            raced = True  # another writer gets in first
            node["metadata"]["labels"]["other.example.com/raced"] = "yes"
            bump(node)
        work = copy.deepcopy(node)
        try:
            apply_patch(work, json.loads(body))
        except (ValueError, KeyError, IndexError) as e:
            return self.status(422, "Invalid", str(e))
        # A subresource write keeps only its part; the main resource ignores status.
        if sub == "status":
            node["status"] = work["status"]
        else:
            work["status"] = node["status"]
            nodes[parts[3]] = node = work
        bump(node)
        self.reply(200, node)


def finish(*_):
    state["nodes"] = list(nodes.values())
    with open(STATE, "w") as f:
        json.dump(state, f, indent=1)
    sys.exit(0)


signal.signal(signal.SIGTERM, finish)
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("ready", flush=True)
try:
    server.serve_forever()
finally:
    finish()
