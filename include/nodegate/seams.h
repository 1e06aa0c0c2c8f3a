// Seams: the small interfaces in front of everything that talks to the kernel or other programs
// beyond reading files. Production implementations live in probes/sys/, fakes in test/.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

// Opening device nodes and issuing ioctls on them (kvm, vhost-net, tun, block devices).
class DeviceIo {
 public:
  virtual ~DeviceIo() = default;
  virtual Result<struct stat> statPath(const std::string& path) = 0;
  // Returns an fd; errors keep errno (EACCES, ENOENT, ENXIO...) so callers can tell them apart.
  virtual Result<int> open(const std::string& path, int flags) = 0;
  // Returns the ioctl's non-negative return value.
  virtual Result<int> ioctl(int fd, unsigned long request, void* arg) = 0;
  virtual void close(int fd) = 0;
};

struct ExecResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
  bool timed_out = false;
  bool truncated = false;  // output exceeded the limit and was cut
};

// Running a host command (lvm) with a timeout and bounded output; never through a shell.
class Exec {
 public:
  virtual ~Exec() = default;
  virtual Result<ExecResult> run(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout,
                                 std::size_t max_output = 16u << 20) = 0;
};

// The production seams, plus room for the D-Bus, netlink and udev ones the agent adds.
struct Seams {
  std::shared_ptr<DeviceIo> device;
  std::shared_ptr<Exec> exec;
};

// Real implementations (probes/sys/).
Seams productionSeams();

}  // namespace nodegate
