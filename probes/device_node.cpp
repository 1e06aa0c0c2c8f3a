#include "device_node.h"

#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

namespace nodegate {

DeviceNode openDeviceNode(DeviceIo& io, const std::string& path, unsigned want_major,
                          unsigned want_minor, int flags) {
  DeviceNode n;
  n.path = path;
  auto st = io.statPath(path);
  if (!st) {
    n.error = st.error();
    n.state =
        st.error().code == ENOENT ? DeviceNode::State::Missing : DeviceNode::State::StatFailed;
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

Evidence nodeEvidence(const DeviceNode& n) {
  auto number = "char " + std::to_string(n.major) + ":" + std::to_string(n.minor);
  switch (n.state) {
    case DeviceNode::State::Missing:
      return {n.path, "missing"};
    case DeviceNode::State::StatFailed:
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
