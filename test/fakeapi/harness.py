"""Starts fake_apiserver.py for Python tests and benchmarks and talks to its /fake control API."""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


class FakeApi:
    def __init__(self, tag, nodes=(), tokens=("token-a",), plain=False, bookmark_interval=2.0,
                 port_range="19300-19399"):
        self.dir = tempfile.mkdtemp(prefix="nodegate-fakeapi-%s-" % tag)
        self.plain = plain
        port_file = os.path.join(self.dir, "port")
        args = [sys.executable, os.path.join(HERE, "fake_apiserver.py"), "--port-file", port_file,
                "--port-range", port_range, "--bookmark-interval", str(bookmark_interval)]
        args += ["--plain"] if plain else ["--tls-dir", os.path.join(self.dir, "tls")]
        for t in tokens:
            args += ["--token", t]
        for n in nodes:
            args += ["--node", n]
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(400):
            if os.path.exists(port_file):
                break
            if self.proc.poll() is not None:
                raise RuntimeError("fake apiserver exited: see %s/server.log" % self.dir)
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())
        self.server = "%s://127.0.0.1:%d" % ("http" if plain else "https", self.port)
        self.ca = os.path.join(self.dir, "tls", "ca.crt")
        self._ctx = None if plain else ssl.create_default_context(cafile=self.ca)
        self.kubeconfig = self.write_kubeconfig("kubeconfig", {"token": tokens[0]} if tokens else {})

    def write_kubeconfig(self, name, user):
        cluster = {"server": self.server}
        if not self.plain:
            cluster["certificate-authority"] = self.ca
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": cluster}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
               "users": [{"name": "agent", "user": user}]}
        path = os.path.join(self.dir, name)
        # Written as YAML the way kubectl writes it (the agent reads YAML; JSON would be too easy).
        with open(path, "w") as f:
            f.write(to_yaml(doc))
        return path

    def call(self, method, path, body=None, content_type="application/json", token="token-a"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def requests(self, since=0):
        return self.call("GET", "/fake/requests?since=%d" % since)[1]

    def last_seq(self):
        r = self.requests()
        return r[-1]["seq"] if r else 0

    def node(self, name):
        return self.call("GET", "/api/v1/nodes/" + name)[1]

    def events(self):
        return self.call("GET", "/fake/events")[1]

    def fault(self, **f):
        return self.call("POST", "/fake/faults", f)

    def clear_faults(self):
        return self.call("DELETE", "/fake/faults")

    def close(self):
        stop(self.proc, 5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def fixture_host(tag, host="vmx-host-e5"):
    """A scratch directory with a copy of test/fixtures/agent/<host> as host/ in it, for an agent
    the test may break and heal (the copy's files are the test's to rewrite): (tmp, root)."""
    tmp = tempfile.mkdtemp(prefix="nodegate-%s-" % tag)
    root = os.path.join(tmp, "host")
    shutil.copytree(os.path.join(HERE, "..", "fixtures", "agent", host), root)
    return tmp, root


def nodegate_binary():
    """$NODEGATE (CTest sets it to the built binary), or the test is skipped with the reason."""
    import unittest
    binary = os.environ.get("NODEGATE")
    if not binary or not os.access(binary, os.X_OK):
        raise unittest.SkipTest("$NODEGATE is not set to the nodegate binary (run through ctest)")
    return binary


def stop(proc, grace):
    """SIGTERM, then SIGKILL after `grace` seconds; a process that already ended is left as is."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def to_yaml(v, indent=0):
    pad = " " * indent
    if isinstance(v, dict):
        out = ""
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out += "%s%s:\n%s" % (pad, k, to_yaml(x, indent + 2 if isinstance(x, dict) else indent))
            else:
                out += "%s%s: %s\n" % (pad, k, scalar(x))
        return out
    if isinstance(v, list):
        out = ""
        for x in v:
            body = to_yaml(x, indent + 2) if isinstance(x, (dict, list)) else pad + "  " + scalar(x) + "\n"
            out += pad + "- " + body[indent + 2:]
        return out
    return pad + scalar(v) + "\n"


def scalar(x):
    if x is True:
        return "true"
    if x is False:
        return "false"
    if x is None:
        return "null"
    if isinstance(x, (dict, list)):
        return "{}" if isinstance(x, dict) else "[]"
    return json.dumps(str(x))


def free_port(lo, hi, reuse=False):
    """A free 127.0.0.1 port of a test's range, searched from the top: FakeApi takes ports from
    the bottom of the same range. reuse: a port whose old connections linger in TIME_WAIT counts
    as free (the agent's listeners reuse addresses; a test that polls one often leaves many)."""
    for p in range(hi, lo - 1, -1):
        s = socket.socket()
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def agent_get(port, path, timeout=5):
    """GET of one of the agent's own listeners on 127.0.0.1: (status, body), (0, "") when it does
    not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except OSError as e:
        return getattr(e, "code", 0), ""


def eventually(pred, timeout=10.0, interval=0.05):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return True
        except (KeyError, TypeError, IndexError):
            pass
        time.sleep(interval)
    return bool(pred())
