// Shared steps of the device probes (kvm-device, vhost-net, tun): stat the node through the
// DeviceIo seam, check it is the character device the kernel driver registers, open it, and
// judge every outcome short of an open node the same way. Each probe then issues its own ioctls
// and judges those in its own evaluator.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "nodegate/check.h"
#include "nodegate/host_root.h"
#include "nodegate/seams.h"

namespace nodegate {

struct DeviceNode {
  enum class State {
    Missing,           // stat: ENOENT, in a device directory that is there to look in
    DevfsUnreadable,   // stat: ENOENT, but <dev> is no device directory (devfsProblem)
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

// Opens <dev>/rel (host.dev(rel)). An absent node is Missing only when <dev> itself is a device
// directory to look in; else DevfsUnreadable with devfsProblem's reason. Never throws; the
// returned fd (state Open) must be closed through the same DeviceIo.
DeviceNode openDeviceNode(DeviceIo& io, const HostRoot& host, std::string_view rel,
                          unsigned want_major, unsigned want_minor, int flags);

// Why `devfs` is not a device directory whose lack of a node means anything, or nullopt when it
// is one: it must be a directory (stat through the seam) that holds the null device, char 1:3,
// which every devtmpfs and every container's /dev has. An absent path, a wrong --path.devfs or
// an empty mount point (a hostPath of / without its submounts) has none.
std::optional<std::string> devfsProblem(DeviceIo& io, const std::string& devfs);

// Whether the driver registered its misc device (<sys>/class/misc/<name> exists); nullopt when
// sysfs itself cannot be read (sysfsReadable), so that registration is unknown, not "no".
std::optional<bool> miscRegistered(const HostRoot& host, std::string_view name);
// The evidence for it: "present", "absent" or why sysfs could not be read.
std::string registeredEvidence(const std::optional<bool>& registered);

// The cause alone ("Permission denied"), for messages that already name the path.
std::string causeOf(const Error& e);

// One evidence line for the node: "char 10:232, opened read-write", "missing", "EACCES ...".
Evidence nodeEvidence(const DeviceNode& node);

// How one device probe words what all device nodes share.
struct DeviceNodeTexts {
  std::string check;          // "tun"
  std::string driver;         // "tun", as in "the tun driver is registered"
  Status bad = Status::Fail;  // what an unusable node is: FAIL, or WARN for an optional device
  std::optional<bool>
      registered;               // miscRegistered(): the driver is in the kernel (nullopt: unknown)
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
