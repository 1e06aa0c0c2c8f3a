#include "processes.h"

#include <dirent.h>

#include <algorithm>
#include <limits>

#include "text.h"

namespace nodegate {

std::string launcherVmiFromCmdline(std::string_view cmdline) {
  std::vector<std::string_view> args;
  while (!cmdline.empty()) {
    auto nul = cmdline.find('\0');
    args.push_back(cmdline.substr(0, nul));
    if (nul == std::string_view::npos) break;
    cmdline.remove_prefix(nul + 1);
  }
  std::string_view name, ns;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto take = [&](std::string_view flag, std::string_view* out) {
      if (args[i] == flag && i + 1 < args.size())
        *out = args[i + 1];
      else if (args[i].size() > flag.size() + 1 && args[i].substr(0, flag.size()) == flag &&
               args[i][flag.size()] == '=')
        *out = args[i].substr(flag.size() + 1);
    };
    take("--name", &name);
    take("--namespace", &ns);
  }
  if (name.empty()) return {};
  return std::string(ns.empty() ? "default" : ns) + "/" + std::string(name);
}

std::optional<LauncherProcess> readProcess(const HostRoot& host, int pid,
                                           const std::set<std::string, std::less<>>& comms) {
  std::string base = std::to_string(pid) + "/";
  // Processes come and go: a vanished one is simply not there.
  auto comm = readValue(host.proc(base + "comm"));
  if (!comm || !comms.count(*comm)) return std::nullopt;
  LauncherProcess p;
  p.pid = pid;
  p.comm = *comm;
  if (p.comm == "virt-launcher")
    if (auto cmd = readFile(host.proc(base + "cmdline"), 1u << 16))
      p.vmi = launcherVmiFromCmdline(*cmd);
  p.netns_path = host.proc(base + "ns/net");
  return p;
}

std::vector<LauncherProcess> findProcesses(const HostRoot& host,
                                           const std::set<std::string, std::less<>>& comms) {
  std::vector<LauncherProcess> out;
  DIR* d = ::opendir(host.proc().c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    auto pid = parseU64(e->d_name);
    if (!pid || *pid > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) continue;
    if (auto p = readProcess(host, static_cast<int>(*pid), comms)) out.push_back(std::move(*p));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const LauncherProcess& a, const LauncherProcess& b) { return a.pid < b.pid; });
  return out;
}

std::vector<LauncherProcess> findVirtLaunchers(const HostRoot& host) {
  return findProcesses(host, {"virt-launcher"});
}

}  // namespace nodegate
