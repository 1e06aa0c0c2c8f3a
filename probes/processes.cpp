#include "processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
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

namespace {

// The comm of process `pid`, read relative to procfs' directory fd into `buf` (the kernel's name
// is at most 15 bytes and a newline): one openat, one read, one close, no allocation. Empty when
// the process is gone or the read failed.
std::string_view commAt(int proc_fd, const char* pid, char (&buf)[64]) {
  char path[32];
  int n = std::snprintf(path, sizeof path, "%s/comm", pid);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof path) return {};
  int fd = ::openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  ssize_t got;
  do got = ::read(fd, buf, sizeof buf);
  while (got < 0 && errno == EINTR);
  ::close(fd);
  if (got <= 0) return {};
  std::string_view comm(buf, static_cast<std::size_t>(got));
  while (!comm.empty() && (comm.back() == '\n' || comm.back() == ' ')) comm.remove_suffix(1);
  return comm;
}

}  // namespace

std::vector<LauncherProcess> findProcesses(const HostRoot& host,
                                           const std::set<std::string, std::less<>>& comms) {
  // The one-shot check (`nodegate check`) and the tracer's full passes scan every process, so the
  // cost per unrelated process is what a node with thousands of them pays: the comm alone, read
  // with 3 syscalls into a stack buffer (readProcess's path builds and fstat made it 5 syscalls
  // and 3 allocations each, docs/benchmarks/density.md); only a match is read further.
  std::vector<LauncherProcess> out;
  int proc_fd = ::open(host.proc().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd < 0) return out;
  DIR* d = ::fdopendir(proc_fd);
  if (!d) {
    ::close(proc_fd);
    return out;
  }
  char buf[64];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;  // pids only: no ".", "self", ...
    auto pid = parseU64(e->d_name);
    if (!pid || *pid > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) continue;
    const std::string_view comm = commAt(proc_fd, e->d_name, buf);
    if (comm.empty() || comms.find(comm) == comms.end()) continue;
    if (auto p = readProcess(host, static_cast<int>(*pid), comms)) out.push_back(std::move(*p));
  }
  ::closedir(d);  // closes proc_fd too
  std::sort(out.begin(), out.end(),
            [](const LauncherProcess& a, const LauncherProcess& b) { return a.pid < b.pid; });
  return out;
}

std::vector<LauncherProcess> findVirtLaunchers(const HostRoot& host) {
  return findProcesses(host, {"virt-launcher"});
}

}  // namespace nodegate
