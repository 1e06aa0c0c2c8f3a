#include "device_node.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

namespace nodegate {

std::optional<std::string> devfsProblem(DeviceIo& io, const std::string& devfs) {
  auto dir = io.statPath(devfs);
  if (!dir) return "cannot read the device directory " + devfs + ": " + causeOf(dir.error());
  if (!S_ISDIR(dir->st_mode)) return devfs + " is not a directory";
  const std::string null = devfs + "/null";
  auto st = io.statPath(null);
  if (!st || !S_ISCHR(st->st_mode) || major(st->st_rdev) != 1 || minor(st->st_rdev) != 3)
    return devfs + " has no null device (char 1:3 at " + null +
           "), so it is not a device filesystem: absent nodes there prove nothing";
  return std::nullopt;
}

std::optional<bool> miscRegistered(const HostRoot& host, std::string_view name) {
  if (!sysfsReadable(host)) return std::nullopt;
  struct stat st {};
  return ::stat(host.sys("class/misc/" + std::string(name)).c_str(), &st) == 0;
}

std::string registeredEvidence(const std::optional<bool>& registered) {
  if (!registered) return "unknown: sysfs cannot be read";
  return *registered ? "present" : "absent";
}

DeviceNode openDeviceNode(DeviceIo& io, const HostRoot& host, std::string_view rel,
                          unsigned want_major, unsigned want_minor, int flags) {
  DeviceNode n;
  n.path = host.dev(rel);
  n.want_major = want_major;
  n.want_minor = want_minor;
  const std::string& path = n.path;
  auto st = io.statPath(path);
  if (!st) {
    n.error = st.error();
    n.state =
        st.error().code == ENOENT ? DeviceNode::State::Missing : DeviceNode::State::StatFailed;
    if (n.state == DeviceNode::State::Missing) {
      if (auto why = devfsProblem(io, host.dev())) {
        n.state = DeviceNode::State::DevfsUnreadable;
        n.error = Error{ENOENT, *why};
      }
    }
    return n;
  }
  if (!S_ISCHR(st->st_mode)) {
    n.state = DeviceNode::State::NotCharDevice;
    return n;
  }
  n.major = major(st->st_rdev);
  n.minor = minor(st->st_rdev);
  if (n.major != want_major || n.minor != want_minor) {
    n.state = DeviceNode::State::WrongNumber;
    return n;
  }
  auto fd = io.open(path, flags);
  if (!fd) {
    n.error = fd.error();
    switch (fd.error().code) {
      case EACCES:
      case EPERM:
        n.state = DeviceNode::State::PermissionDenied;
        break;
      case ENXIO:
      case ENODEV:
        n.state = DeviceNode::State::NoDriver;
        break;
      default:
        n.state = DeviceNode::State::OpenFailed;
        break;
    }
    return n;
  }
  n.fd = *fd;
  n.state = DeviceNode::State::Open;
  return n;
}

std::string causeOf(const Error& e) {
  return e.code != 0 ? std::string(std::strerror(e.code)) : e.message;
}

std::string deviceCgroupHint(const std::string& what) {
  return "the device cgroup of an unprivileged container refuses " + what +
         ": run the device-probe helper beside the agent (chart: deviceProbe.enabled=true, the "
         "default; by hand: nodegate device-probe --socket PATH, then check or agent with "
         "--device-probe PATH), or run the check privileged";
}

std::optional<CheckResult> evaluateDeviceNode(const DeviceNode& n, const DeviceNodeTexts& t) {
  using S = DeviceNode::State;
  const std::string& dev = n.path;
  const std::string number = std::to_string(n.want_major) + ":" + std::to_string(n.want_minor);
  const std::string mknod =
      "mknod " + dev + " c " + std::to_string(n.want_major) + " " + std::to_string(n.want_minor);
  switch (n.state) {
    case S::Missing:
      if (!t.registered)
        return makeResult(t.check, Status::Unknown, "SysfsUnreadable",
                          dev + " does not exist, and sysfs cannot be read to tell whether the " +
                              t.driver + " driver is in the kernel",
                          "give the agent the host's /sys (--path.sysfs)");
      if (*t.registered)
        return makeResult(
            t.check, t.bad, "DeviceNodeMissing",
            "the " + t.driver + " driver is registered but " + dev + " does not exist",
            "create the node (" + mknod +
                ") or check that devtmpfs/udev is mounted and that --path.devfs "
                "points at the host's /dev");
      return makeResult(
          t.check, t.bad, "DeviceMissing",
          dev + " does not exist and the kernel registered no " + t.driver + " device",
          t.driver_hint);
    case S::DevfsUnreadable:
      return makeResult(t.check, Status::Unknown, "DevfsUnreadable", n.error.message,
                        "give the agent the host's /dev, a devtmpfs (mount it at --path.devfs "
                        "or under --host-root)");
    case S::StatFailed:
      return makeResult(t.check, Status::Unknown, "DeviceUnreadable", n.error.message,
                        "give the agent access to the host's /dev (mount it at --path.devfs)");
    case S::NotCharDevice:
    case S::WrongNumber:
      return makeResult(t.check, t.bad, "WrongDeviceNode",
                        dev + " is not the character device " + number,
                        "remove the stray file and let the " + t.driver + " driver create " + dev +
                            " (" + mknod + ")");
    case S::PermissionDenied:
      // EPERM, not EACCES: no file permission refused the open but the device cgroup (or its
      // BPF program), which no uid gets past (kernel security/device_cgroup.c, devcgroup_check_
      // permission). That is an unprivileged container, root or not.
      if (n.error.code == EPERM)
        return makeResult(t.check, Status::Unknown, "PermissionDenied",
                          "cannot open " + dev + " read-write: " + causeOf(n.error) +
                              " (the device cgroup refuses it)",
                          deviceCgroupHint(dev));
      return makeResult(t.check, Status::Unknown, "PermissionDenied",
                        "cannot open " + dev + " read-write: " + causeOf(n.error),
                        t.permission_hint);
    case S::NoDriver:
      return makeResult(t.check, t.bad, "NoDriver",
                        dev + " exists but no driver answers: " + causeOf(n.error), t.driver_hint);
    case S::OpenFailed:
      return makeResult(t.check, t.bad, "OpenFailed",
                        "cannot open " + dev + ": " + causeOf(n.error), t.driver_hint);
    case S::Open:
      return std::nullopt;
  }
  return std::nullopt;
}

void setDeviceLabel(CheckResult& r, const std::string& label, bool usable) {
  if (r.status == Status::Unknown) return;
  r.labels[label] = usable ? "true" : "false";
}

Evidence nodeEvidence(const DeviceNode& n) {
  auto number = "char " + std::to_string(n.major) + ":" + std::to_string(n.minor);
  switch (n.state) {
    case DeviceNode::State::Missing:
      return {n.path, "missing"};
    case DeviceNode::State::StatFailed:
    case DeviceNode::State::DevfsUnreadable:
      return {n.path, n.error.message};
    case DeviceNode::State::NotCharDevice:
      return {n.path, "not a character device"};
    case DeviceNode::State::WrongNumber:
      return {n.path, number + " (unexpected device number)"};
    case DeviceNode::State::PermissionDenied:
    case DeviceNode::State::NoDriver:
    case DeviceNode::State::OpenFailed:
      return {n.path, number + ", open: " + causeOf(n.error)};
    case DeviceNode::State::Open:
      return {n.path, number + ", opened read-write"};
  }
  return {n.path, "unknown"};
}

}  // namespace nodegate
