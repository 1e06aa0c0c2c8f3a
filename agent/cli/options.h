// Command-line options of every nodegate command. The flag names are a contract (DESIGN.md):
// the chart, scripts and users rely on them.
#pragma once

#include <string>
#include <vector>

#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/result.h"

namespace nodegate {

struct Options {
  std::string command;            // check | agent | device-probe | dns | version | help
  std::vector<std::string> args;  // positional words after the command ("trace" for dns)

  // Host paths.
  std::string host_root = "/";
  std::string procfs, sysfs, devfs, rootfs;  // empty: derived from host_root

  // check
  std::string output = "table";  // table | json
  std::string color = "auto";    // auto | always | never

  // Policy.
  std::string config_path;

  // agent
  std::string listen = "0.0.0.0:9810";
  std::string debug_listen = "127.0.0.1:9811";
  // /healthz and /readyz on a listener of their own, for the kubelet's probes (the chart sets
  // 127.0.0.1:9812); off by default: outside Kubernetes nothing restarts the agent on a probe.
  std::string health_listen;
  std::string kube = "auto";  // auto | incluster | kubeconfig | none
  std::string kubeconfig;
  std::string node_name;  // default: $NODE_NAME, then the host name
  std::string prefix = "nodegate.io";
  std::string gate_label = "nodegate.io/vm-ready=true";
  bool gate_label_set = false;  // --gate-label given (else it follows --prefix)
  bool taint = false;
  std::string lvm_command = "lvm";
  // agent and check: the device-probe helper's socket (empty: none, do the device work here)
  std::string device_probe;

  // device-probe: the socket to serve
  std::string socket_path;
  double resync_seconds = 60;
  std::string dns_trace = "auto";  // auto | on | off
  std::vector<std::string> dns_netns;
  // The tracer's ring buffer (--dns-ring-kib): a power of two, 16 KiB to 64 MiB; the default is
  // TracerOptions::ring_bytes's (bpf/dns_tracer.h says why 2 MiB).
  std::size_t dns_ring_kib = 2048;
  std::string log_level = "info";
  // Where each check's runbook lives: <base><check>.md (page, API and the check table link it).
  std::string runbook_base_url =
      "https://github.com/nodegate/nodegate/blob/main/docs/runbooks/checks/";

  // dns trace
  std::string vmi;  // NS/NAME filter
  bool follow = false;
  std::string api;  // agent debug endpoint to ask (dns trace); default from debug_listen

  HostRoot hostRoot() const;
  // The gate label split into key and value.
  std::pair<std::string, std::string> gateLabel() const;
};

// Parses argv. Errors are usage errors (exit 2) with a one-line message. Before the flags, a few
// settings come from the environment so that a check run by hand in the agent's container
// (`kubectl exec … nodegate check`) uses exactly what the agent uses; the chart sets them:
//   NODEGATE_HOST_ROOT (--host-root), NODEGATE_CONFIG (--config),
//   NODEGATE_LVM_COMMAND (--lvm-command), NODEGATE_RUNBOOK_BASE_URL (--runbook-base-url),
//   NODEGATE_DEVICE_PROBE (--device-probe).
// A flag beats its variable.
Result<Options> parseOptions(int argc, char** argv);

// Loads --config (or the defaults) and folds flags that configure probes into it.
Result<Config> buildConfig(const Options& opts);

std::string usage();

}  // namespace nodegate
