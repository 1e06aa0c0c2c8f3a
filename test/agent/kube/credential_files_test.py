#!/usr/bin/env python3
"""Every file the kube side reads is bounded (issue #22 item 7): the kubeconfig, its token file,
CA file, client certificate and key, each replaced by /dev/zero, a FIFO with no writer and a file
over the 4 MiB bound, with the real `nodegate agent` under a 2 GiB address-space limit.

Files read at start (kubeconfig, client certificate and key) stop the agent at once with an
error naming the file; the token and CA files, re-read while running (they rotate), give a clear
error in the log while the agent keeps running and stops promptly on SIGTERM. Never a hang, never
std::bad_alloc. Needs $NODEGATE (CTest sets it). TCP ports 19460-19469 (metrics listener)."""

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fakeapi"))
from harness import eventually, free_port, nodegate_binary  # noqa: E402

MEMORY_LIMIT = 2 << 30
OVERSIZED = (4 << 20) + 1


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class CredentialFiles(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = nodegate_binary()
        cls.tmp = tempfile.mkdtemp(prefix="nodegate-kube-files-")
        cls.root = os.path.join(cls.tmp, "host")
        shutil.copytree(os.path.join(HERE, "..", "..", "fixtures", "agent", "vmx-host-e5"), cls.root)
        cls.fifo = os.path.join(cls.tmp, "fifo")
        os.mkfifo(cls.fifo)
        cls.big = os.path.join(cls.tmp, "big")
        with open(cls.big, "w") as f:  # text, so that only the bound can refuse it
            f.write(("# padding line of a kubeconfig that is far too large\n" * (OVERSIZED // 50 + 1)))
        cls.bad = {"/dev/zero": "/dev/zero", "fifo": cls.fifo, "oversized": cls.big}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def kubeconfig(self, user=None, cluster=None):
        cluster = dict({"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}, **(cluster or {}))
        user = user or {"token": "t"}

        def block(d, indent):
            return "".join("%s%s: %s\n" % (" " * indent, k, str(v).lower() if isinstance(v, bool) else v)
                           for k, v in d.items())
        text = ("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
                + block(cluster, 4) + "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
                "users:\n- name: u\n  user:\n" + block(user, 4))
        path = os.path.join(self.tmp, "kubeconfig-%d" % time.monotonic_ns())
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_agent(self, kubeconfig, log):
        port = free_port(19460, 19469)
        args = [self.binary, "agent", "--host-root", self.root, "--kube", "kubeconfig", "--kubeconfig",
                kubeconfig, "--node-name", "files-node", "--resync", "60", "--listen", "127.0.0.1:%d" % port,
                "--debug-listen", "", "--dns-trace", "off", "--lvm-command", "false"]
        return subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, preexec_fn=limit_memory)

    def assert_clean_error(self, text, what, path):
        self.assertNotIn("bad_alloc", text)
        self.assertNotIn("terminate called", text)
        self.assertIn("failed to read %s %s" % (what, path), text)

    def test_files_read_at_start_stop_the_agent_with_an_error(self):
        cases = [("kubeconfig", lambda p: p),
                 ("client certificate", lambda p: self.kubeconfig(
                     {"client-certificate": p, "client-key": self.big})),
                 ("client key", lambda p: self.kubeconfig(
                     {"client-certificate": os.path.join(HERE, "client_test.cpp"), "client-key": p}))]
        for what, make in cases:
            for kind, path in self.bad.items():
                with self.subTest(what=what, kind=kind):
                    log = os.path.join(self.tmp, "start.log")
                    p = self.run_agent(make(path), log)
                    try:
                        rc = p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                        self.fail("agent hung reading %s from %s" % (what, kind))
                    text = open(log).read()
                    self.assertEqual(rc, 1, text)
                    self.assert_clean_error(text, what, path)
                    why = "larger than" if kind == "oversized" else "not a regular file"
                    self.assertIn(why, text)

    def test_rotating_files_are_an_error_while_the_agent_runs(self):
        for what, make in [("token", lambda p: self.kubeconfig({"tokenFile": p})),
                           ("kubernetes ca", lambda p: self.kubeconfig(
                               cluster={"certificate-authority": p, "insecure-skip-tls-verify": False}))]:
            for kind, path in self.bad.items():
                with self.subTest(what=what, kind=kind):
                    log = os.path.join(self.tmp, "run.log")
                    p = self.run_agent(make(path), log)
                    try:
                        self.assertTrue(eventually(lambda: ("failed to read %s %s" % (what, path)) in open(log).read()
                                                   or p.poll() is not None, 20), open(log).read())
                        self.assertIsNone(p.poll(), open(log).read())
                        p.send_signal(signal.SIGTERM)
                        t0 = time.time()
                        rc = p.wait(15)
                        self.assertLess(time.time() - t0, 15)
                        self.assertEqual(rc, 0, open(log).read())
                    finally:
                        if p.poll() is None:
                            p.kill()
                            p.wait()
                    self.assert_clean_error(open(log).read(), what, path)


if __name__ == "__main__":
    unittest.main(verbosity=2)
