// Processes found by name in the host's procfs (hostPID): the DNS service's discovery looks for
// virt-launchers and DNS servers together, and the dns-path probe counts virt-launchers when no
// tracer runs in the process (`nodegate check`).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/host_root.h"

namespace nodegate {

struct LauncherProcess {
  int pid = 0;
  std::string comm;        // the process name the scan matched
  std::string vmi;         // virt-launcher: "namespace/name" from its --namespace/--name
                           // arguments; "" if absent or another process
  std::string netns_path;  // <proc>/PID/ns/net
};

// The VMI a virt-launcher serves, from its NUL-separated command line; "" when it names none.
std::string launcherVmiFromCmdline(std::string_view cmdline);
// Every process whose comm is exactly one of `comms`, by pid, in one pass over procfs. comm is
// the kernel's 15-byte name: the launcher's monitor, "virt-launcher-monitor", shows as
// "virt-launcher-m" and is not one.
std::vector<LauncherProcess> findProcesses(const HostRoot& host,
                                           const std::set<std::string, std::less<>>& comms);
// The one process pid, when its comm is one of `comms` (a process event names one: reading it
// alone keeps the cost of a VM start independent of how many processes the host runs).
std::optional<LauncherProcess> readProcess(const HostRoot& host, int pid,
                                           const std::set<std::string, std::less<>>& comms);
std::vector<LauncherProcess> findVirtLaunchers(const HostRoot& host);

}  // namespace nodegate
