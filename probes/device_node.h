// Shared collector step of the device probes (kvm-device, vhost-net, tun): stat the node through
// the DeviceIo seam, check it is the character device the kernel driver registers, open it.
// Each probe then issues its own ioctls and judges the outcome in its own evaluator.
#pragma once

#include <string>

#include "nodegate/check.h"
#include "nodegate/seams.h"

namespace nodegate {

struct DeviceNode {
  enum class State {
    Missing,           // stat: ENOENT
    StatFailed,        // stat: any other errno (EACCES on a parent directory, ...)
    NotCharDevice,     // exists but is a file, directory or block device
    WrongNumber,       // a char device, but not the major:minor the driver registers
    PermissionDenied,  // open: EACCES/EPERM (not root, not in the kvm group)
    NoDriver,          // open: ENXIO/ENODEV, a node without a driver behind it
    OpenFailed,        // open: any other errno
    Open,
  };
  std::string path;
  State state = State::Missing;
  unsigned major = 0, minor = 0;  // as found, when it is a char device
  int fd = -1;                    // valid only in state Open; the caller closes it
  Error error;                    // the stat/open error, when there was one
};

// Never throws; the returned fd (state Open) must be closed through the same DeviceIo.
DeviceNode openDeviceNode(DeviceIo& io, const std::string& path, unsigned want_major,
                          unsigned want_minor, int flags);

// The cause alone ("Permission denied"), for messages that already name the path.
std::string causeOf(const Error& e);

// One evidence line for the node: "char 10:232, opened read-write", "missing", "EACCES ...".
Evidence nodeEvidence(const DeviceNode& node);

// Closes an fd through the seam when it goes out of scope, so every early return is covered.
class SeamFd {
 public:
  SeamFd(DeviceIo& io, int fd) : io_(io), fd_(fd) {}
  ~SeamFd() {
    if (fd_ >= 0) io_.close(fd_);
  }
  SeamFd(const SeamFd&) = delete;
  SeamFd& operator=(const SeamFd&) = delete;
  int get() const { return fd_; }

 private:
  DeviceIo& io_;
  int fd_;
};

}  // namespace nodegate
