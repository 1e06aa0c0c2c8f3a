// HostRoot: the only way a probe names a host path. `--host-root DIR` moves every read into a
// captured tree (tests, or the chart's /host mount); `--path.procfs` etc. move single parts, as
// node_exporter does. Passed by value; never a global, never read from the environment.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "nodegate/result.h"

namespace nodegate {

class HostRoot {
 public:
  explicit HostRoot(std::string root = "/");

  // Overrides of single parts; an empty string keeps the root-derived default.
  void setProcfs(std::string path) { procfs_ = std::move(path); }
  void setSysfs(std::string path) { sysfs_ = std::move(path); }
  void setDevfs(std::string path) { devfs_ = std::move(path); }
  void setRootfs(std::string path) { rootfs_ = std::move(path); }

  // Join a path relative to the part ("cpuinfo", "class/misc/kvm"); a leading '/' is ignored so
  // callers cannot escape the part by accident.
  std::string proc(std::string_view rel = {}) const { return join(procfs_, rel); }
  std::string sys(std::string_view rel = {}) const { return join(sysfs_, rel); }
  std::string dev(std::string_view rel = {}) const { return join(devfs_, rel); }
  // Files of the host's root filesystem: /lib/modules, /etc, /var/lib/kubelet, /run.
  std::string root(std::string_view rel = {}) const { return join(rootfs_, rel); }

  const std::string& rootDir() const { return root_; }

 private:
  static std::string join(const std::string& base, std::string_view rel);
  std::string root_;
  std::string procfs_, sysfs_, devfs_, rootfs_;
};

// Reads a whole (small) file. Files larger than max_bytes are an error, not a silent truncation:
// a /proc or /sys file that big means the path is not what the parser expects. Only regular
// files are read: a FIFO, socket or device is an error at once (never a blocking open).
Result<std::string> readFile(const std::string& path, std::size_t max_bytes = 4u << 20);

// Reads a one-value sysfs/procfs file and strips the trailing newline and spaces.
Result<std::string> readValue(const std::string& path);

// Whether the host's sysfs is there to be read: <sys>/kernel is a directory with entries (it is
// on every sysfs). Probes use it to tell "this kernel has no such directory", a value, from
// "there is no sysfs to look in" (--host-root /nonexistent, an unmounted /sys), which is UNKNOWN.
Result<void> sysfsReadable(const HostRoot& host);

}  // namespace nodegate
