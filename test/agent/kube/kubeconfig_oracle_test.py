#!/usr/bin/env python3
"""Kubeconfigs as users write them, with the real kubectl as the oracle (issue #21, "Parsing what
users write"): block style as kubectl writes it, flow style, JSON, anchors with aliases and merge
keys, YAML 1.1 booleans and block scalars, multi-document files, and $KUBECONFIG path lists
(a missing file skipped, the first file to set a value wins, current-context from the first
file that has one, relative paths relative to the file that names them).

For each case, what nodegate resolves (kubeconfig_cli: the agent's own loader) must equal what
`kubectl config view --minify --raw -o json` resolves on the same files: server, CA, token or
token file, client certificate and key, namespace, insecure-skip-tls-verify. Where the case
points at the fake API server, kubectl and nodegate must both get the Node with it (kubectl
proves where it found the relative files; nodegate proves it did the same).

Needs $KUBECONFIG_CLI and kubectl. TCP ports 19450-19459 (the fake API server)."""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import FakeApi, to_yaml  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NODE = "oracle-node"
PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def b64(text):
    return base64.b64encode(text.encode()).decode()


class KubeconfigOracle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cli = os.environ.get("KUBECONFIG_CLI")
        if not cls.cli or not os.access(cls.cli, os.X_OK):
            raise unittest.SkipTest("$KUBECONFIG_CLI is not set (run through ctest)")
        cls.api = FakeApi("oracle", nodes=[NODE], port_range="19450-19459")
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kubeconfig-oracle-")
        with open(cls.api.ca) as f:
            cls.ca_pem = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.api.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def write(self, rel, text):
        path = os.path.join(self.tmp, self._testMethodName, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def env(self, kubeconfig_list=None):
        env = dict(os.environ, HOME=self.tmp)
        env.pop("KUBECONFIG", None)
        if kubeconfig_list:
            env["KUBECONFIG"] = kubeconfig_list
        return env

    def kubectl(self, args, path=None, kubeconfig_list=None):
        cmd = [KUBECTL] + (["--kubeconfig", path] if path else []) + args
        return subprocess.run(cmd, env=self.env(kubeconfig_list), capture_output=True, text=True, timeout=60)

    def nodegate(self, path=None, kubeconfig_list=None, get=None):
        cmd = [self.cli] + (["--kubeconfig", path] if path else []) + (["--get", get] if get else [])
        r = subprocess.run(cmd, env=self.env(kubeconfig_list), capture_output=True, text=True, timeout=60)
        return json.loads(r.stdout)

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    def from_kubectl(self, path=None, kubeconfig_list=None, dirs=None):
        """kubectl's view of the current context, normalised to what nodegate reports. `dirs` maps
        an entry ("cluster" or "user") to the directory of the file that defined it: kubectl's
        view shows paths as written, and resolves them against that file when it uses them."""
        r = self.kubectl(["config", "view", "--minify", "--raw", "-o", "json"], path, kubeconfig_list)
        self.assertEqual(r.returncode, 0, r.stderr)
        view = json.loads(r.stdout)
        cluster = view["clusters"][0]["cluster"]
        user = view["users"][0]["user"] if view.get("users") else {}
        ctx = view["contexts"][0]["context"]
        dirs = dirs or {}

        def resolved(entry, key):
            p = (cluster if entry == "cluster" else user).get(key, "")
            return os.path.join(dirs.get(entry, ""), p) if p and not os.path.isabs(p) else p

        out = {"server": cluster["server"].rstrip("/"),
               "insecure": cluster.get("insecure-skip-tls-verify", False),
               "ca": (base64.b64decode(cluster["certificate-authority-data"]).decode()
                      if "certificate-authority-data" in cluster else ""),
               "ca_file": resolved("cluster", "certificate-authority"),
               "token": user.get("token", ""), "token_file": resolved("user", "tokenFile"),
               "cert": (base64.b64decode(user["client-certificate-data"]).decode()
                        if "client-certificate-data" in user else ""),
               "key": (base64.b64decode(user["client-key-data"]).decode() if "client-key-data" in user else ""),
               "namespace": ctx.get("namespace", "")}
        for k in ("cert", "key"):
            f = resolved("user", "client-certificate" if k == "cert" else "client-key")
            if f:
                out[k] = self.read(f)
        return out

    def from_nodegate(self, path=None, kubeconfig_list=None):
        n = self.nodegate(path, kubeconfig_list)
        self.assertNotIn("error", n)
        return {"server": n["server"], "insecure": n["insecure"], "ca": n["ca_pem"], "ca_file": n["ca_file"],
                "token": n["token"], "token_file": n["token_file"], "cert": n["cert_pem"], "key": n["key_pem"],
                "namespace": n["namespace"]}

    def assert_same(self, path=None, kubeconfig_list=None, dirs=None, against_server=False):
        want = self.from_kubectl(path, kubeconfig_list, dirs)
        got = self.from_nodegate(path, kubeconfig_list)
        self.assertEqual(got, want)
        if against_server:
            r = self.kubectl(["get", "node", NODE, "-o", "name"], path, kubeconfig_list)
            self.assertEqual(r.returncode, 0, r.stderr)
            n = self.nodegate(path, kubeconfig_list, get="/api/v1/nodes/" + NODE)
            self.assertEqual(n.get("get_status"), 200, n)
        return got

    def doc(self, **over):
        d = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
             "clusters": [{"name": "fake", "cluster": {"server": self.api.server, "certificate-authority": self.api.ca}}],
             "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent", "namespace": "vms"}}],
             "users": [{"name": "agent", "user": {"token": "token-a"}}]}
        d.update(over)
        return d

    def test_block_style_as_kubectl_writes_it(self):
        got = self.assert_same(self.write("config", to_yaml(self.doc())), against_server=True)
        self.assertEqual((got["token"], got["namespace"]), ("token-a", "vms"))

    def test_flow_style(self):
        text = ("{apiVersion: v1, kind: Config, current-context: fake,\n"
                " clusters: [{name: fake, cluster: {server: '%s', certificate-authority: %s}}],\n"
                " contexts: [{name: fake, context: {cluster: fake, user: agent, namespace: vms}}],\n"
                " users: [{name: agent, user: {token: token-a}}]}\n" % (self.api.server, self.api.ca))
        self.assert_same(self.write("config", text), against_server=True)

    def test_json(self):
        self.assert_same(self.write("config.json", json.dumps(self.doc(), indent=2)), against_server=True)
        d = self.doc()
        d["clusters"][0]["cluster"] = {"server": self.api.server, "certificate-authority-data": b64(self.ca_pem)}
        self.assert_same(self.write("inline.json", json.dumps(d)), against_server=True)

    def test_anchors_merge_keys_booleans_and_block_scalars(self):
        text = """apiVersion: v1
kind: Config
current-context: fake
clusters:
- name: base
  cluster: &base
    server: https://unused.example:6443
    certificate-authority: %s
- name: fake
  cluster:
    <<: *base
    server: %s
    insecure-skip-tls-verify: no
contexts:
- name: fake
  context: &ctx {cluster: fake, user: agent}
- name: other
  context: *ctx
users:
- name: agent
  user:
    token: >-
      token-a
    client-certificate-data: |
      %s
""" % (self.api.ca, self.api.server, b64(PEM))
        got = self.assert_same(self.write("config", text))
        self.assertEqual((got["server"], got["token"], got["cert"]), (self.api.server, "token-a", PEM))
        self.assertTrue(self.assert_same(self.write("yes", text.replace("verify: no", "verify: yes")))["insecure"])

    def test_multi_document_file_uses_the_first_document(self):
        other = self.doc(**{"current-context": "other"})
        text = "---\n" + to_yaml(self.doc()) + "---\n" + to_yaml(other)
        self.assertEqual(self.assert_same(self.write("config", text), against_server=True)["token"], "token-a")

    def test_kubeconfig_path_list_merges_as_kubectl(self):
        # First: only the current context and its user. Second (in another directory): the
        # cluster with a relative CA path, a same-named context and user that must lose, another
        # current-context that must lose, and a relative tokenFile on a user only it defines.
        first = {"current-context": "fake",
                 "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "by-file"}}],
                 "users": [{"name": "agent", "user": {"token": "first-wins"}}]}
        sub = os.path.join(self.tmp, self._testMethodName, "second")
        os.makedirs(sub, exist_ok=True)
        shutil.copy(self.api.ca, os.path.join(sub, "ca.crt"))
        self.write("second/token", "token-a\n")
        second = {"current-context": "ignored",
                  "clusters": [{"name": "fake", "cluster": {"server": self.api.server, "certificate-authority": "ca.crt"}}],
                  "contexts": [{"name": "fake", "context": {"cluster": "nope", "user": "agent"}}],
                  "users": [{"name": "agent", "user": {"token": "second-loses"}},
                            {"name": "by-file", "user": {"tokenFile": "token"}}]}
        a = self.write("first.yaml", to_yaml(first))
        b = self.write("second/config", json.dumps(second))
        missing = os.path.join(self.tmp, "does-not-exist")
        got = self.assert_same(kubeconfig_list=":".join([missing, a, b]),
                               dirs={"cluster": sub, "user": sub}, against_server=True)
        self.assertEqual(got["ca_file"], os.path.join(sub, "ca.crt"))
        self.assertEqual(got["token_file"], os.path.join(sub, "token"))

    def test_errors_where_kubectl_fails_too(self):
        for name, text in [("tab-indent", "clusters:\n\t- name: x\n"),
                           ("unclosed-flow", "{clusters: [\n"),
                           ("no-context", to_yaml(self.doc(**{"current-context": "missing"})))]:
            path = self.write(name, text)
            r = self.kubectl(["config", "view", "--minify", "--raw", "-o", "json"], path)
            self.assertNotEqual(r.returncode, 0, name)
            n = self.nodegate(path)
            self.assertIn("error", n, name)
            self.assertIn("failed to load kubeconfig", n["error"])

    def test_alias_bomb_is_an_error_not_a_hang(self):
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        for i in range(1, 9):
            lines.append("a%d: &a%d [%s]" % (i, i, ", ".join(["*a%d" % (i - 1)] * 10)))
        path = self.write("bomb", "\n".join(lines) + "\ncurrent-context: x\n")
        n = self.nodegate(path)
        self.assertIn("aliases", n.get("error", ""), n)


if __name__ == "__main__":
    unittest.main(verbosity=2)
