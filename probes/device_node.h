// Shared steps of the device probes (kvm-device, vhost-net, tun): stat the node through the
// DeviceIo seam, check it is the character device the kernel driver registers, open it, and
// judge every outcome short of an open node the same way. Each probe then issues its own ioctls
// and judges those in its own evaluator.
#pragma once

#include <optional>
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
  unsigned want_major = 0, want_minor = 0;  // the number the driver registers
  unsigned major = 0, minor = 0;            // as found, when it is a char device
  int fd = -1;                              // valid only in state Open; the caller closes it
  Error error;                              // the stat/open error, when there was one
};

// Never throws; the returned fd (state Open) must be closed through the same DeviceIo.
DeviceNode openDeviceNode(DeviceIo& io, const std::string& path, unsigned want_major,
                          unsigned want_minor, int flags);

// The cause alone ("Permission denied"), for messages that already name the path.
std::string causeOf(const Error& e);

// One evidence line for the node: "char 10:232, opened read-write", "missing", "EACCES ...".
Evidence nodeEvidence(const DeviceNode& node);

// How one device probe words what all device nodes share.
struct DeviceNodeTexts {
  std::string check;            // "tun"
  std::string driver;           // "tun", as in "the tun driver is registered"
  Status bad = Status::Fail;    // what an unusable node is: FAIL, or WARN for an optional device
  bool registered = false;      // <sys>/class/misc/<name> exists: the driver is in the kernel
  std::string permission_hint;  // who needs the node and how the check gets to open it
  std::string driver_hint;      // how to get the driver (see moduleHint in kernel_modules.h)
};

// How to get past a device cgroup that refuses `what` ("/dev/kvm", "block devices"): the
// device-probe helper (docs/install.md, privilege separation).
std::string deviceCgroupHint(const std::string& what);

// The result for every state but Open (stat or open failed, wrong node); nullopt when the node
// is open and the probe's own ioctls decide. Labels and evidence are the caller's.
std::optional<CheckResult> evaluateDeviceNode(const DeviceNode& node, const DeviceNodeTexts& t);

// Sets the device's node label from a decided result: "true" when usable, "false" on FAIL or
// WARN that is not usable; an UNKNOWN result publishes no label (nothing was proven).
void setDeviceLabel(CheckResult& r, const std::string& label, bool usable);

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
