"""Real scrapes of the real agent on fixture hosts, for the tests of what reads /metrics: the
alert rules (alerts_test.py), the metrics reference and the golden scrape (metrics_docs_test.py).

Each scenario runs `$NODEGATE agent --kube none` on a copy of a tree under test/fixtures/hosts
with a policy and a fake lvm (test/probes/storage/fake-lvm.sh printing a recorded report), waits
for /readyz and scrapes /metrics and /api/v1/checks. `Agent.change()` edits the host tree and waits
for the agent to publish what it then sees, so one node can be scraped before and after a fault.
Ports 19880-19889 (test/chart/CMakeLists.txt).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

SRC = os.environ["NODEGATE_SRC"]
BINARY = os.environ["NODEGATE"]
HOSTS = os.path.join(SRC, "test", "fixtures", "hosts")
LVM = os.path.join(SRC, "test", "fixtures", "lvm")
FAKE_LVM = os.path.join(SRC, "test", "probes", "storage", "fake-lvm.sh")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """Exposition text -> {family: {"type", "help", "samples": [(name, {labels}, value)]}}."""
    fams, current = {}, None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            fams.setdefault(name, {"type": None, "help": None, "samples": []})["help"] = help_
        elif line.startswith("# TYPE "):
            name, _, type_ = line[7:].partition(" ")
            fams.setdefault(name, {"type": None, "help": None, "samples": []})["type"] = type_
            current = name
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            if not m:
                raise ValueError(f"unparsable sample line: {line!r}")
            labels = dict(LABEL.findall(m.group(3) or ""))
            fam = current if current and m.group(1).startswith(current) else m.group(1)
            fams.setdefault(fam, {"type": None, "help": None, "samples": []})["samples"].append(
                (m.group(1), labels, float(m.group(4))))
    return fams


class Agent:
    """One real agent on a copy of a fixture host."""

    def __init__(self, scenario, port, required, lvm_fixture="healthy.json", extra_config=None,
                 dns_trace="off", dns_netns=()):
        self.port = port
        self.work = tempfile.mkdtemp(prefix=f"nodegate-scrape-{scenario}.")
        self.root = os.path.join(self.work, "root")
        shutil.copytree(os.path.join(HOSTS, scenario), self.root, symlinks=False)
        config = {"gate": {"required": required}}
        config.update(extra_config or {})
        with open(os.path.join(self.work, "config.json"), "w") as f:
            json.dump(config, f)
        self.log = open(os.path.join(self.work, "agent.log"), "w")
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEGATE_")}
        self.proc = subprocess.Popen(
            [BINARY, "agent", "--kube", "none", "--host-root", self.root,
             "--config", os.path.join(self.work, "config.json"),
             "--lvm-command", f"{FAKE_LVM} {os.path.join(LVM, lvm_fixture)}",
             "--listen", f"127.0.0.1:{port}", "--debug-listen", f"127.0.0.1:{port + 1}",
             "--node-name", scenario, "--resync", "0.5", "--dns-trace", dns_trace,
             *[f"--dns-netns={n}" for n in dns_netns]],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait(lambda: self.get("/readyz")[0] == 200, "become ready")
        if dns_trace == "on":  # the tracer loads on the extension thread, after /readyz
            self._wait(lambda: "nodegate_dns_hops_attached" in self.scrape(), "load the DNS tracer")

    def get(self, path, port=None):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port or self.port}{path}", timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    def _wait(self, cond, what, seconds=30):
        deadline = time.time() + seconds
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the agent exited with {self.proc.returncode} (log {self.log.name})")
            try:
                if cond():
                    return
            except OSError:
                pass
            if time.time() > deadline:
                raise AssertionError(f"the agent did not {what} in {seconds} s (log {self.log.name})")
            time.sleep(0.1)

    def scrape(self):
        return self.get("/metrics")[1]

    def checks(self):
        return json.loads(self.get("/api/v1/checks", self.port + 1)[1])

    def change(self, edit, until):
        """Edits the host tree (edit(root)), then waits until until(checks_json) holds."""
        edit(self.root)
        self._wait(lambda: until(self.checks()), "publish the changed host")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)
