#!/usr/bin/env python3
"""Render-and-assert tests of charts/nodegate.

Reads what test/chart/render.sh rendered with the real helm (ctest fixture chart_render) and checks
the promises of the chart: least privilege, mounts, probes, RBAC, the admission policy, the
monitoring objects, and that every flag the chart passes is one the agent parses.
"""
import functools
import json
import os
import re
import unittest

import yaml

SRC = os.environ.get("NODEGATE_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
RENDER = os.path.join(os.environ.get("NODEGATE_BUILD", os.path.join(SRC, "build")), "test-chart", "render")
CHART = os.path.join(SRC, "charts", "nodegate")

# The capabilities the agent needs, and nothing else (see the comments in templates/daemonset.yaml).
CAPS = ["BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]


def spec_conditions():
    """The Node conditions the checks feed, in registry order, from docs/config.md, which the
    Specs test keeps equal to the probes' specs: the chart's list (nodegate.conditionTypes: the
    admission policy's own conditions, the cleanup hook's) must be the same, or the policy would
    refuse the agent's status patch for a new condition."""
    with open(os.path.join(SRC, "docs", "config.md")) as f:
        found = re.findall(r"Condition: `([A-Za-z]+)`", f.read())
    return list(dict.fromkeys(found))


CONDITIONS = spec_conditions()


@functools.lru_cache(maxsize=None)
def load(case):
    path = os.path.join(RENDER, case + ".yaml")
    if not os.path.exists(path):
        raise AssertionError(f"{path} is missing: run test/chart/render.sh (ctest fixture chart_render)")
    with open(path) as f:
        # Cached and shared between tests: treat as read-only.
        return [d for d in yaml.load_all(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name=None):
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def agent_container(docs):
    ds = one(docs, "DaemonSet")
    (c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "nodegate"]
    return ds, c


def env_of(container):
    """The container's literal environment variables."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def device_probe_container(docs):
    ds = one(docs, "DaemonSet")
    found = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "device-probe"]
    return ds, (found[0] if found else None)


def rules_of(role):
    """RBAC rules as a set of (group, resource, verb, resourceName) tuples."""
    out = set()
    for r in role["rules"]:
        for g in r.get("apiGroups", []):
            for res in r["resources"]:
                for v in r["verbs"]:
                    for n in r.get("resourceNames", [None]):
                        out.add((g, res, v, n))
    return out


def agent_flags():
    """Flags agent/cli/options.cpp parses: the valued map and the boolean map."""
    with open(os.path.join(SRC, "agent", "cli", "options.cpp")) as f:
        text = f.read()
    return set(re.findall(r'\{"(--[a-z.-]+)"', text))


ALL_CASES = ["defaults-1.31", "defaults-1.29", "privileged-1.31", "monitoring-1.31", "monitoring-1.29",
             "custom-1.31", "no-device-probe-1.31"]
UNPRIVILEGED = [c for c in ALL_CASES if not c.startswith("privileged")]


class LeastPrivilege(unittest.TestCase):
    def test_default_is_not_privileged(self):
        # The device-probe container is the one privileged thing (class DeviceProbe below).
        for case in ["defaults-1.31", "defaults-1.29"]:
            ds, c = agent_container(load(case))
            self.assertIs(c["securityContext"]["privileged"], False, case)
            privileged = [x["name"] for x in ds["spec"]["template"]["spec"]["containers"]
                          if x.get("securityContext", {}).get("privileged")]
            self.assertEqual(privileged, ["device-probe"], case)
        with open(os.path.join(RENDER, "no-device-probe-1.31.yaml")) as f:
            self.assertNotRegex(f.read(), r"privileged:\s*true")

    def test_capabilities_dropped_and_readded_one_by_one(self):
        for case in UNPRIVILEGED:
            _, c = agent_container(load(case))
            caps = c["securityContext"]["capabilities"]
            self.assertEqual(caps["drop"], ["ALL"], case)
            want = CAPS + (["SYS_RESOURCE"] if case.startswith("custom") else [])
            self.assertEqual(caps["add"], want, case)

    def test_privileged_fallback(self):
        _, c = agent_container(load("privileged-1.31"))
        sc = c["securityContext"]
        self.assertIs(sc["privileged"], True)
        self.assertNotIn("capabilities", sc)
        self.assertIs(sc["readOnlyRootFilesystem"], True)

    def test_every_capability_commented_with_its_syscall(self):
        with open(os.path.join(CHART, "templates", "daemonset.yaml")) as f:
            lines = f.read().splitlines()
        start = next(i for i, l in enumerate(lines) if l.strip() == "add:")
        seen = []
        for i in range(start + 1, len(lines)):
            s = lines[i].strip()
            if s.startswith("{{") or s.startswith("#"):
                continue
            m = re.fullmatch(r"- ([A-Z_]+)", s)
            if not m:
                break
            prev = i - 1
            while lines[prev].strip().startswith("{{"):
                prev -= 1
            comment = lines[prev].strip()
            self.assertTrue(comment.startswith("#"), f"{m.group(1)} has no comment above it")
            self.assertRegex(comment, r"[a-z_]+\(", f"the comment of {m.group(1)} names no syscall")
            seen.append(m.group(1))
        self.assertEqual(seen, CAPS + ["SYS_RESOURCE"])

    def test_read_only_root_and_escalation(self):
        for case in ALL_CASES:
            _, c = agent_container(load(case))
            sc = c["securityContext"]
            self.assertIs(sc["readOnlyRootFilesystem"], True, case)
            # The API server rejects allowPrivilegeEscalation=false with SYS_ADMIN added.
            if "SYS_ADMIN" in sc.get("capabilities", {}).get("add", []):
                self.assertIsNot(sc.get("allowPrivilegeEscalation"), False, case)

    def test_seccomp_and_apparmor(self):
        _, c = agent_container(load("defaults-1.31"))
        self.assertEqual(c["securityContext"]["seccompProfile"], {"type": "RuntimeDefault"})
        self.assertEqual(c["securityContext"]["appArmorProfile"], {"type": "Unconfined"})
        ds, c = agent_container(load("defaults-1.29"))
        self.assertNotIn("appArmorProfile", c["securityContext"])
        ann = ds["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(ann["container.apparmor.security.beta.kubernetes.io/nodegate"], "unconfined")

    def test_host_namespaces(self):
        ds, _ = agent_container(load("defaults-1.31"))
        spec = ds["spec"]["template"]["spec"]
        self.assertIs(spec["hostPID"], True)
        self.assertIs(spec["hostNetwork"], True)
        self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")


class DeviceProbe(unittest.TestCase):
    """Privilege separation: the helper container and how the agent reaches it."""
    SOCKET = "/run/nodegate/device-probe.sock"

    def test_helper_container(self):
        for case in ["defaults-1.31", "defaults-1.29", "monitoring-1.31", "custom-1.31"]:
            ds, h = device_probe_container(load(case))
            self.assertIsNotNone(h, case)
            sc = h["securityContext"]
            self.assertIs(sc["privileged"], True, case)
            self.assertIs(sc["readOnlyRootFilesystem"], True, case)
            self.assertNotIn("ports", h, f"{case}: the helper has no listener")
            self.assertEqual(h["args"][:4], ["device-probe", "--socket=" + self.SOCKET, "--host-root=/host",
                                             "--lvm-command=nsenter -t 1 -m -- lvm"], case)
            self.assertEqual(h["image"], agent_container(load(case))[1]["image"], case)
            # The helper runs the lvm the agent would.
            self.assertEqual(h["args"][3], "--lvm-command=" + env_of(agent_container(load(case))[1])["NODEGATE_LVM_COMMAND"], case)
            flags = agent_flags()
            for a in h["args"][1:]:
                self.assertIn(a.split("=", 1)[0], flags, f"{case}: {a} is not a flag of nodegate")
            vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
            mounts = {m["mountPath"]: m for m in h["volumeMounts"]}
            for host in ["/proc", "/sys", "/dev"]:
                self.assertIs(mounts["/host" + host].get("readOnly"), True, f"{case} {host}")
            self.assertIn("emptyDir", vols[mounts["/run/nodegate"]["name"]], case)
            self.assertNotIn("/var/run/secrets/kubernetes.io/serviceaccount", mounts, case)
            self.assertNotIn("env", h, f"{case}: the helper needs no environment")

    def test_no_token_for_the_helper_and_the_agents_token(self):
        ds, c = agent_container(load("defaults-1.31"))
        spec = ds["spec"]["template"]["spec"]
        self.assertIs(spec["automountServiceAccountToken"], False)
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        tok = mounts["/var/run/secrets/kubernetes.io/serviceaccount"]
        self.assertIs(tok.get("readOnly"), True)
        sources = vols[tok["name"]]["projected"]["sources"]
        # Exactly what the kubelet's own kube-api-access volume holds.
        self.assertEqual(sources[0]["serviceAccountToken"]["path"], "token")
        self.assertEqual(sources[1]["configMap"], {"name": "kube-root-ca.crt",
                                                   "items": [{"key": "ca.crt", "path": "ca.crt"}]})
        self.assertEqual(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], "metadata.namespace")

    def test_agent_uses_the_socket_read_only(self):
        # Through the environment, so that `kubectl exec ... nodegate check` in the agent's
        # container asks the helper too.
        ds, c = agent_container(load("defaults-1.31"))
        self.assertEqual(env_of(c).get("NODEGATE_DEVICE_PROBE"), self.SOCKET)
        self.assertFalse([a for a in c["args"] if a.startswith("--device-probe")])
        m = {m["mountPath"]: m for m in c["volumeMounts"]}["/run/nodegate"]
        self.assertIs(m.get("readOnly"), True)

    def test_off_and_with_a_privileged_agent(self):
        for case in ["no-device-probe-1.31", "privileged-1.31"]:
            ds, h = device_probe_container(load(case))
            self.assertIsNone(h, case)
            _, c = agent_container(load(case))
            self.assertFalse([a for a in c["args"] if a.startswith("--device-probe")], case)
            self.assertNotIn("NODEGATE_DEVICE_PROBE", env_of(c), case)
            spec = ds["spec"]["template"]["spec"]
            self.assertNotIn("automountServiceAccountToken", spec, case)
            self.assertNotIn("/var/run/secrets/kubernetes.io/serviceaccount",
                             {m["mountPath"] for m in c["volumeMounts"]}, case)


class DaemonSet(unittest.TestCase):
    def test_host_paths_read_only_under_host(self):
        for case in ALL_CASES:
            ds, c = agent_container(load(case))
            vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            for m in c["volumeMounts"]:
                self.assertIn(m["name"], vols, f"{case}: mount of an undefined volume")
            for host in ["/proc", "/sys", "/dev"]:
                m = mounts["/host" + host]
                self.assertIs(m.get("readOnly"), True, f"{case} {host}")
                self.assertEqual(vols[m["name"]]["hostPath"]["path"], host)
            self.assertEqual(env_of(c)["NODEGATE_HOST_ROOT"], "/host")
            for m in c["volumeMounts"]:
                # Everything under /host is read-only (connect() to the D-Bus socket needs no write).
                if "hostPath" in vols[m["name"]] and m["mountPath"].startswith("/host"):
                    self.assertIs(m.get("readOnly"), True, f"{case}: {m['mountPath']} is writable")
                # No hostPath the pod would wait for (type Socket, File...): a node without D-Bus
                # must still run the agent. The kubelet directory must exist (a wrong value is loud).
                if "hostPath" in vols[m["name"]]:
                    t = vols[m["name"]]["hostPath"].get("type")
                    want = {"Directory"} if m["name"] == "host-kubelet" else {"Directory", "DirectoryOrCreate"}
                    self.assertIn(t, want, f"{case}: {m['name']} hostPath type {t}")

    def test_dbus_socket_and_lvm(self):
        ds, c = agent_container(load("defaults-1.31"))
        vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        # The socket's directory, so the pod starts without D-Bus and sees a restarted bus.
        bus = vols[mounts["/host/run/dbus"]]["hostPath"]
        self.assertEqual(bus, {"path": "/run/dbus", "type": "DirectoryOrCreate"})
        self.assertEqual(vols[mounts["/host/var/lib/kubelet"]]["hostPath"],
                         {"path": "/var/lib/kubelet", "type": "Directory"})
        self.assertEqual(vols[mounts["/run/lvm"]]["hostPath"]["path"], "/run/lvm")
        self.assertEqual(vols[mounts["/etc/lvm"]]["hostPath"]["path"], "/etc/lvm")
        self.assertEqual(env_of(c)["NODEGATE_LVM_COMMAND"], "nsenter -t 1 -m -- lvm")
        _, c = agent_container(load("custom-1.31"))
        self.assertFalse({"/host/run/dbus", "/run/lvm", "/etc/lvm"} & {m["mountPath"] for m in c["volumeMounts"]})

    def test_every_flag_is_one_the_agent_parses(self):
        flags = agent_flags()
        self.assertIn("--host-root", flags, "could not parse agent/cli/options.cpp")
        for case in ALL_CASES:
            _, c = agent_container(load(case))
            self.assertEqual(c["args"][0], "agent")
            for a in c["args"][1:]:
                self.assertIn(a.split("=", 1)[0], flags, f"{case}: {a} is not a flag of nodegate agent")

    def test_custom_values_reach_the_args(self):
        _, c = agent_container(load("custom-1.31"))
        a = c["args"]
        for want in ["--prefix=gate.example.com", "--gate-label=example.com/vms=yes", "--taint",
                     "--listen=0.0.0.0:19810", "--debug-listen=127.0.0.1:19811",
                     "--health-listen=127.0.0.1:19812", "--dns-trace=off",
                     "--dns-netns=/host/run/netns/extra", "--log-level=debug"]:
            self.assertIn(want, a)
        _, c = agent_container(load("defaults-1.31"))
        self.assertIn("--gate-label=nodegate.io/vm-ready=true", c["args"])
        self.assertNotIn("--taint", c["args"])

    def test_probes(self):
        for case in ALL_CASES:
            _, c = agent_container(load(case))
            (port,) = c["ports"]
            self.assertEqual(port["name"], "metrics")
            want_port = 19810 if case.startswith("custom") else 9810
            self.assertEqual(port["containerPort"], want_port)
            self.assertIn(f"--listen=0.0.0.0:{want_port}", c["args"])
            # The kubelet's probes go to the health listener on loopback (hostNetwork), where
            # clients on the network cannot hold its workers.
            want_health = 19812 if case.startswith("custom") else 9812
            self.assertIn(f"--health-listen=127.0.0.1:{want_health}", c["args"])
            for probe, path in [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                                ("readinessProbe", "/readyz")]:
                self.assertEqual(c[probe]["httpGet"], {"host": "127.0.0.1", "path": path, "port": want_health},
                                 f"{case} {probe}")

    def test_health_probes_without_host_network(self):
        # The kubelet's 127.0.0.1 is the node's, not the pod's: the probes go to the pod's
        # address, where the health listener then has to listen.
        _, c = agent_container(load("podnet-1.31"))
        self.assertIn("--health-listen=0.0.0.0:9812", c["args"])
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"]:
            self.assertNotIn("host", c[probe]["httpGet"], probe)
            self.assertEqual(c[probe]["httpGet"]["port"], 9812, probe)

    def test_check_by_hand_uses_the_agents_settings(self):
        # `kubectl exec ... nodegate check` inherits the container's environment: the settings a
        # check depends on are there, not in the agent's args, and the agent reads the same names.
        with open(os.path.join(SRC, "agent", "cli", "options.cpp")) as f:
            options = f.read()
        for case in ALL_CASES:
            _, c = agent_container(load(case))
            env = env_of(c)
            for var in ["NODEGATE_HOST_ROOT", "NODEGATE_CONFIG", "NODEGATE_LVM_COMMAND", "NODEGATE_RUNBOOK_BASE_URL"]:
                self.assertIn(var, env, case)
                self.assertIn(f'"{var}"', options, f"the CLI does not read {var}")
            for flag in ["--host-root", "--config", "--lvm-command"]:
                self.assertFalse([a for a in c["args"] if a.startswith(flag)], f"{case}: {flag} in args and env")
            self.assertTrue(env["NODEGATE_RUNBOOK_BASE_URL"].endswith("/docs/runbooks/checks/"), case)

    def test_node_name_from_downward_api(self):
        _, c = agent_container(load("defaults-1.31"))
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"], {"fieldRef": {"fieldPath": "spec.nodeName"}})

    def test_scheduling(self):
        ds, c = agent_container(load("defaults-1.31"))
        spec = ds["spec"]["template"]["spec"]
        tol = spec["tolerations"]
        # Tolerates everything, nodegate's own taint included (Kubernetes toleration semantics).
        def tolerates(key, effect):
            return any(t.get("operator") == "Exists" and t.get("key") in (None, "", key)
                       and t.get("effect") in (None, "", effect) for t in tol)
        self.assertTrue(tolerates("nodegate.io/not-ready", "NoSchedule"))
        self.assertTrue(tolerates("node.kubernetes.io/unreachable", "NoExecute"))
        self.assertEqual(ds["spec"]["updateStrategy"]["type"], "RollingUpdate")
        self.assertIn("maxUnavailable", ds["spec"]["updateStrategy"]["rollingUpdate"])
        self.assertNotIn("priorityClassName", spec)
        self.assertIn("cpu", c["resources"]["requests"])
        self.assertIn("memory", c["resources"]["requests"])
        self.assertIn("memory", c["resources"]["limits"])
        ds, _ = agent_container(load("custom-1.31"))
        self.assertEqual(ds["spec"]["template"]["spec"]["priorityClassName"], "system-node-critical")

    def test_config_map(self):
        lvm = {"data_warn_percent": 80, "data_fail_percent": 90, "metadata_warn_percent": 70, "metadata_fail_percent": 85}
        for case, want in [("defaults-1.31", {"gate": {"required": ["cpu-virt", "kvm-device", "tun", "kernel-modules"]},
                                              "checks": {"lvm": lvm, "local-pv": {"kubelet_dir": "/var/lib/kubelet"},
                                                         "dns-path": {"coredns_configmap": "coredns",
                                                                      "nodelocal_configmap": "node-local-dns",
                                                                      # the Service the RBAC names
                                                                      "dns_service": "kube-dns",
                                                                      "dns_service_namespace": "kube-system"}},
                                              "damping": {}}),
                           ("custom-1.31", {"gate": {"required": ["cpu-virt", "kvm-device", "tun", "kernel-modules",
                                                                  "lvm", "time-sync"]},
                                            "checks": {"lvm": dict(lvm, data_warn_percent=70, data_fail_percent=85),
                                                       "local-pv": {"kubelet_dir": "/var/lib/kubelet"},
                                                       # rbac.readPods: false turns the pod watch off
                                                       "kube": {"pod_watch": False},
                                                       # rbac.readCoreDNSConfig false: not read
                                                       "dns-path": {"coredns_configmap": "",
                                                                    "nodelocal_configmap": "",
                                                                    "dns_service": "kube-dns",
                                                                    "dns_service_namespace": "kube-system"}},
                                            "damping": {"lvm": 3}})]:
            docs = load(case)
            ds, c = agent_container(docs)
            cm_name = next(v["configMap"]["name"] for v in ds["spec"]["template"]["spec"]["volumes"]
                           if "configMap" in v)
            cm = one(docs, "ConfigMap", cm_name)
            self.assertEqual(json.loads(cm["data"]["config.json"]), want, case)
            self.assertEqual(env_of(c)["NODEGATE_CONFIG"], "/etc/nodegate/config.json")
            self.assertIn("checksum/config", ds["spec"]["template"]["metadata"]["annotations"])


class Conventions(unittest.TestCase):
    """What users of prometheus-node-exporter, node-feature-discovery and cilium expect."""

    def render(self, *sets):
        import subprocess
        helm = subprocess.run(["bash", os.path.join(SRC, "tools", "helm.sh")], capture_output=True, text=True).stdout.strip()
        args = [helm, "template", "nodegate", CHART, "--namespace", "nodegate", "--set", "image.repository=org/nodegate"]
        for s_ in sets:
            args += ["--set", s_]
        out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode:
            raise AssertionError(out.stderr)
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    def test_image_registry_and_required_image(self):
        _, c = agent_container(self.render("global.imageRegistry=mirror.example:5000/", "image.tag=1.2"))
        self.assertEqual(c["image"], "mirror.example:5000/org/nodegate:1.2")
        _, c = agent_container(self.render("image.digest=sha256:" + "a" * 64))
        self.assertEqual(c["image"], "org/nodegate@sha256:" + "a" * 64)

    def test_namespace_override(self):
        docs = self.render("namespaceOverride=virt-health")
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                             "ValidatingAdmissionPolicyBinding"):
                continue
            ns = d["metadata"].get("namespace")
            if d["kind"] == "Role" and d["metadata"]["name"] != "nodegate-cleanup":
                continue  # events and cilium-config roles live where those objects are
            if d["kind"] == "RoleBinding" and d["metadata"]["name"] != "nodegate-cleanup":
                continue
            self.assertEqual(ns, "virt-health", f"{d['kind']} {d['metadata']['name']}")
        binding = one(docs, "ClusterRoleBinding", "nodegate")
        self.assertEqual(binding["subjects"][0]["namespace"], "virt-health")

    def test_extra_volumes_and_revision_history(self):
        ds, c = agent_container(self.render("extraVolumes[0].name=ca", "extraVolumes[0].configMap.name=ca",
                                            "extraVolumeMounts[0].name=ca", "extraVolumeMounts[0].mountPath=/etc/ca",
                                            "revisionHistoryLimit=3"))
        self.assertIn({"name": "ca", "configMap": {"name": "ca"}}, ds["spec"]["template"]["spec"]["volumes"])
        self.assertIn({"name": "ca", "mountPath": "/etc/ca"}, c["volumeMounts"])
        self.assertEqual(ds["spec"]["revisionHistoryLimit"], 3)
        ds, _ = agent_container(load("defaults-1.31"))
        self.assertEqual(ds["spec"]["revisionHistoryLimit"], 5)


class Rbac(unittest.TestCase):
    def test_cluster_role_exact(self):
        docs = load("defaults-1.31")
        role = one(docs, "ClusterRole", "nodegate")
        # Exactly what the agent does (test/chart/uninstall_test.py records it against the fake API).
        self.assertEqual(rules_of(role), {
            ("", "nodes", "get", None), ("", "nodes", "watch", None),
            ("", "nodes", "patch", None), ("", "nodes/status", "patch", None),
            # local-pv API discovery, on by default
            ("", "persistentvolumes", "list", None), ("", "persistentvolumeclaims", "get", None),
            ("cdi.kubevirt.io", "datavolumes", "get", None),
            # the gate's pod view, on by default
            ("", "pods", "list", None), ("", "pods", "watch", None)})
        binding = one(docs, "ClusterRoleBinding", "nodegate")
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "nodegate", "namespace": "nodegate"}])
        ds, _ = agent_container(docs)
        self.assertEqual(ds["spec"]["template"]["spec"]["serviceAccountName"], "nodegate")

    def test_namespaced_roles_exact(self):
        docs = load("defaults-1.31")
        events = one(docs, "Role", "nodegate-events")
        self.assertEqual(events["metadata"]["namespace"], "default")
        self.assertEqual(rules_of(events), {("events.k8s.io", "events", "create", None),
                                            ("events.k8s.io", "events", "patch", None)})
        cilium = one(docs, "Role", "nodegate-cilium-config")
        self.assertEqual(cilium["metadata"]["namespace"], "kube-system")
        self.assertEqual(rules_of(cilium), {("", "configmaps", "get", "cilium-config")})
        coredns = one(docs, "Role", "nodegate-coredns-config")
        self.assertEqual(coredns["metadata"]["namespace"], "kube-system")
        self.assertEqual(rules_of(coredns), {("", "configmaps", "get", "coredns")})
        nodelocal = one(docs, "Role", "nodegate-node-local-dns-config")
        self.assertEqual(nodelocal["metadata"]["namespace"], "kube-system")
        self.assertEqual(rules_of(nodelocal), {("", "configmaps", "get", "node-local-dns")})

    def test_no_pv_reads_turns_api_discovery_off(self):
        # Without the rules the agent's PV list could only get 403: the chart turns it off too.
        docs = load("privileged-1.31")
        rules = rules_of(one(docs, "ClusterRole", "nodegate"))
        self.assertFalse({r for r in rules if r[1] in ("persistentvolumes", "persistentvolumeclaims", "datavolumes")})
        cm = one(docs, "ConfigMap", "nodegate")
        self.assertIs(json.loads(cm["data"]["config.json"])["checks"]["local-pv"]["api_discovery"], False)
        cm_default = one(load("defaults-1.31"), "ConfigMap", "nodegate")
        self.assertNotIn("api_discovery", json.loads(cm_default["data"]["config.json"])["checks"]["local-pv"])

    def test_optional_reads(self):
        docs = load("custom-1.31")
        rules = rules_of(one(docs, "ClusterRole", "nodegate"))
        self.assertIn(("", "persistentvolumes", "list", None), rules)
        self.assertNotIn("pods", {r[1] for r in rules})
        # Without the pod rules the agent's pod watch is off too (it could only get 403).
        kube = json.loads(one(docs, "ConfigMap", "nodegate")["data"]["config.json"])["checks"]["kube"]
        self.assertIs(kube["pod_watch"], False)
        default_rules = rules_of(one(load("defaults-1.31"), "ClusterRole", "nodegate"))
        self.assertEqual({r for r in default_rules if r[1] == "pods"},
                         {("", "pods", "list", None), ("", "pods", "watch", None)})
        self.assertFalse([r for r in of_kind(docs, "Role") if "cilium" in r["metadata"]["name"]])
        self.assertFalse([r for r in of_kind(docs, "Role") if "coredns" in r["metadata"]["name"]])
        self.assertFalse([r for r in of_kind(docs, "Role") if "node-local" in r["metadata"]["name"]])

    def test_no_write_beyond_the_list(self):
        # Nothing in the agent's RBAC may delete, update, create nodes, or touch secrets.
        for case in ALL_CASES:
            for kind in ["ClusterRole", "Role"]:
                for r in of_kind(load(case), kind):
                    if r["metadata"].get("annotations", {}).get("helm.sh/hook"):
                        continue
                    for g, res, verb, _ in rules_of(r):
                        self.assertNotIn(verb, {"delete", "deletecollection", "update", "*", "escalate", "bind"})
                        self.assertNotIn(res, {"secrets", "*"})
                        if verb == "create":
                            self.assertEqual((g, res), ("events.k8s.io", "events"))


class AdmissionPolicy(unittest.TestCase):
    def test_only_on_1_30_and_later(self):
        for case in ["defaults-1.29", "monitoring-1.29"]:
            docs = load(case)
            self.assertFalse(of_kind(docs, "ValidatingAdmissionPolicy"), case)
            self.assertFalse(of_kind(docs, "ValidatingAdmissionPolicyBinding"), case)
        for case in ["defaults-1.31", "monitoring-1.31", "custom-1.31", "privileged-1.31"]:
            docs = load(case)
            pol = one(docs, "ValidatingAdmissionPolicy")
            bind = one(docs, "ValidatingAdmissionPolicyBinding")
            self.assertEqual(pol["apiVersion"], "admissionregistration.k8s.io/v1")
            self.assertEqual(bind["spec"]["policyName"], pol["metadata"]["name"])
            self.assertEqual(bind["spec"]["validationActions"], ["Deny"])

    def test_policy_contents(self):
        pol = one(load("defaults-1.31"), "ValidatingAdmissionPolicy")["spec"]
        self.assertEqual(pol["failurePolicy"], "Fail")
        (rule,) = pol["matchConstraints"]["resourceRules"]
        self.assertEqual(set(rule["resources"]), {"nodes", "nodes/status"})
        self.assertEqual(rule["operations"], ["UPDATE"])
        (cond,) = pol["matchConditions"]
        self.assertIn("system:serviceaccount:nodegate:nodegate", cond["expression"])
        var = {v["name"]: v["expression"] for v in pol["variables"]}
        self.assertEqual(var["prefix"], "'nodegate.io/'")
        self.assertEqual(var["gateKey"], "'nodegate.io/vm-ready'")
        self.assertEqual(var["taintKey"], "'nodegate.io/not-ready'")
        for c in CONDITIONS:
            self.assertIn(f"'{c}'", var["ownConditions"])
        self.assertIn("authentication.kubernetes.io/node-name", var["tokenNode"])
        exprs = " ".join(v["expression"] for v in pol["validations"])
        self.assertIn("object.metadata.name == variables.tokenNode", exprs)
        for v in ["newLabels", "oldLabels", "newAnnotations", "newTaints", "newConditions"]:
            self.assertIn("variables." + v, exprs)
        for v in pol["validations"]:
            self.assertTrue(v.get("message") or v.get("messageExpression"))
        # The CEL uses only balanced quotes and parentheses (a cheap guard against template slips).
        for e in [cond["expression"], *var.values(), *(v["expression"] for v in pol["validations"])]:
            self.assertEqual(e.count("(") - e.count(")"), 0, e)
            self.assertEqual(e.count("'") % 2, 0, e)

    def test_custom_prefix_and_gate_key(self):
        pol = one(load("custom-1.31"), "ValidatingAdmissionPolicy")["spec"]
        var = {v["name"]: v["expression"] for v in pol["variables"]}
        self.assertEqual(var["prefix"], "'gate.example.com/'")
        self.assertEqual(var["gateKey"], "'example.com/vms'")


class Monitoring(unittest.TestCase):
    def test_opt_in(self):
        for case in ["defaults-1.31", "privileged-1.31", "custom-1.31"]:
            docs = load(case)
            for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"]:
                self.assertFalse(of_kind(docs, kind), f"{case} {kind}")
            self.assertFalse([d for d in of_kind(docs, "ConfigMap")
                              if d["metadata"].get("labels", {}).get("grafana_dashboard")])
        docs = load("monitoring-1.31")
        for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"]:
            one(docs, kind)
        sm = one(docs, "ServiceMonitor")
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        svc = one(docs, "Service")
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertEqual(sm["spec"]["selector"]["matchLabels"], svc["spec"]["selector"])
        self.assertEqual(sm["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"])

    def test_kube_rbac_proxy(self):
        # Off by default: the agent serves /metrics on every address, no proxy, no reviews.
        for case in ["defaults-1.31", "monitoring-1.31", "custom-1.31"]:
            docs = load(case)
            ds, c = agent_container(docs)
            names = [x["name"] for x in ds["spec"]["template"]["spec"]["containers"]]
            self.assertNotIn("kube-rbac-proxy", names, case)
            self.assertFalse([r for r in rules_of(one(docs, "ClusterRole", "nodegate"))
                              if r[1] in ("tokenreviews", "subjectaccessreviews")], case)
        docs = load("rbac-proxy-1.31")
        ds, agent = agent_container(docs)
        spec = ds["spec"]["template"]["spec"]
        (proxy,) = [x for x in spec["containers"] if x["name"] == "kube-rbac-proxy"]
        # The agent's metrics listener is on the node's loopback only: the proxy is the way in.
        self.assertIn("--listen=127.0.0.1:9810", agent["args"])
        self.assertEqual(proxy["image"], "mirror.example/brancz/kube-rbac-proxy:v0.18.1")
        for want in ["--secure-listen-address=0.0.0.0:9813", "--upstream=http://127.0.0.1:9810/",
                     "--allow-paths=/metrics", "--tls-min-version=VersionTLS12",
                     "--tls-cert-file=/etc/kube-rbac-proxy/tls.crt",
                     "--tls-private-key-file=/etc/kube-rbac-proxy/tls.key"]:
            self.assertIn(want, proxy["args"])
        sc = proxy["securityContext"]
        self.assertEqual((sc["runAsNonRoot"], sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"]),
                         (True, True, False))
        self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
        mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
        self.assertEqual(mounts["kube-rbac-proxy-tls"], "/etc/kube-rbac-proxy")
        # The pod mounts no token by default (the helper has none): the proxy gets the agent's.
        self.assertEqual(mounts["kube-api-access"], "/var/run/secrets/kubernetes.io/serviceaccount")
        (vol,) = [v for v in spec["volumes"] if v["name"] == "kube-rbac-proxy-tls"]
        self.assertEqual(vol["secret"]["secretName"], "nodegate-metrics-tls")
        # Reviews for the proxy, and the role a scraper is bound to.
        rules = rules_of(one(docs, "ClusterRole", "nodegate"))
        self.assertIn(("authentication.k8s.io", "tokenreviews", "create", None), rules)
        self.assertIn(("authorization.k8s.io", "subjectaccessreviews", "create", None), rules)
        reader = one(docs, "ClusterRole", "nodegate-metrics-reader")
        self.assertEqual(reader["rules"], [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
        # Service and monitors point at the proxy's port, over https, with a token.
        svc = one(docs, "Service")
        self.assertEqual(svc["spec"]["ports"], [{"name": "https-metrics", "port": 9813,
                                                 "targetPort": "https-metrics", "protocol": "TCP"}])
        self.assertEqual(proxy["ports"][0]["name"], "https-metrics")
        sm = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
        self.assertEqual((sm["port"], sm["scheme"]), ("https-metrics", "https"))
        self.assertEqual(sm["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token")
        self.assertEqual(sm["tlsConfig"]["serverName"], "nodegate")
        pm = one(docs, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
        self.assertEqual((pm["port"], pm["scheme"]), ("https-metrics", "https"))
        self.assertEqual(pm["authorization"], {"credentials": {"name": "prometheus-token", "key": "token"}})
        # The kubelet's probes stay on the agent's plain loopback health listener.
        self.assertEqual(agent["readinessProbe"]["httpGet"]["host"], "127.0.0.1")

    def test_dashboard_config_map(self):
        docs = load("monitoring-1.31")
        (cm,) = [d for d in of_kind(docs, "ConfigMap") if d["metadata"].get("labels", {}).get("grafana_dashboard")]
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(cm["metadata"]["namespace"], "monitoring")
        dash = json.loads(cm["data"]["nodegate.json"])
        self.assertEqual(dash["uid"], "nodegate-overview")
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(exprs), 10)

    def test_every_alert_complete_with_runbook(self):
        rule = one(load("monitoring-1.31"), "PrometheusRule")
        alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        self.assertGreaterEqual(len(alerts), 8)
        for a in alerts:
            name = a["alert"]
            self.assertRegex(a["for"], r"^\d+[smh]$", name)
            self.assertIn(a["labels"]["severity"], {"critical", "warning", "info"}, name)
            for k in ["summary", "description", "runbook_url"]:
                self.assertTrue(a["annotations"].get(k), f"{name} has no {k}")
            self.assertTrue(a["annotations"]["runbook_url"].endswith(f"/docs/runbooks/{name}.md"), name)
            self.assertTrue(os.path.exists(os.path.join(SRC, "docs", "runbooks", name + ".md")),
                            f"docs/runbooks/{name}.md is missing")
        up = next(a for a in alerts if a["alert"] == "NodegateAgentDown")
        self.assertEqual(up["expr"], 'up{job="nodegate"} == 0')
        # Status values are the agent's, upper case (docs/metrics.md).
        for a in alerts:
            for v in re.findall(r'status[!=~]*"([^"]*)"', a["expr"]):
                self.assertIn(v, {"PASS", "WARN", "FAIL", "UNKNOWN"}, a["alert"])

    def test_thin_pool_alerts_follow_the_lvm_check(self):
        # One threshold, one source: config.checks.lvm.*_percent moves the check and the alert.
        import subprocess
        helm = subprocess.run(["bash", os.path.join(SRC, "tools", "helm.sh")], capture_output=True, text=True).stdout.strip()
        mon = []
        for api in ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor",
                    "monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1"]:
            mon += ["--api-versions", api]
        out = subprocess.run([helm, "template", "nodegate", CHART, "--set", "image.repository=org/nodegate", "-f", os.path.join(SRC, "test", "chart", "values", "monitoring.yaml"),
                              "--set", "config.checks.lvm.data_warn_percent=65", *mon], capture_output=True, text=True, check=True).stdout
        docs = [d for d in yaml.safe_load_all(out) if d]
        rule = one(docs, "PrometheusRule")
        exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "NodegateThinPoolFillingUp"]
        self.assertIn("nodegate_lvm_thin_pool_data_ratio > 0.65", exprs)
        cm = one(docs, "ConfigMap", "nodegate")
        self.assertEqual(json.loads(cm["data"]["config.json"])["checks"]["lvm"]["data_warn_percent"], 65)


class CleanupHook(unittest.TestCase):
    def test_post_delete_job(self):
        docs = load("defaults-1.31")
        hooks = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "post-delete"]
        kinds = sorted(d["kind"] for d in hooks)
        self.assertEqual(kinds, ["ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"])
        job = one(hooks, "Job")
        weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
        self.assertLess(weights["ServiceAccount"], weights["Job"])
        self.assertLess(weights["ClusterRoleBinding"], weights["Job"])
        c = job["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["command"], ["/usr/local/bin/nodegate-cleanup"])
        env = {e["name"]: e.get("value") for e in c["env"]}
        self.assertEqual(env["NODEGATE_PREFIX"], "nodegate.io")
        self.assertEqual(env["NODEGATE_GATE_LABEL"], "nodegate.io/vm-ready")
        self.assertEqual(env["NODEGATE_TAINT"], "nodegate.io/not-ready")
        self.assertEqual(sorted(env["NODEGATE_CONDITIONS"].split()), sorted(CONDITIONS))
        self.assertIs(c["securityContext"]["allowPrivilegeEscalation"], False)
        self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
        role = one(hooks, "ClusterRole")
        self.assertEqual(rules_of(role), {("", "nodes", "get", None), ("", "nodes", "list", None),
                                          ("", "nodes", "patch", None), ("", "nodes/status", "patch", None)})
        self.assertFalse([d for d in load("custom-1.31") if d["kind"] == "Job"])


class Schema(unittest.TestCase):
    def test_self_contained(self):
        with open(os.path.join(CHART, "values.schema.json")) as f:
            text = f.read()
        json.loads(text)
        self.assertNotIn('"$ref"', text)

    def test_values_file_keys_are_in_the_schema(self):
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)

        def walk(v, s, path):
            props = s.get("properties")
            if not isinstance(v, dict) or props is None:
                return
            for k, sub in v.items():
                self.assertIn(k, props, f"values.yaml key {path}{k} is not in values.schema.json")
                walk(sub, props[k], f"{path}{k}.")
        walk(values, schema, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
