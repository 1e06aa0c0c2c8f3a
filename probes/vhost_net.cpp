#include "vhost_net.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstdio>

namespace nodegate {
namespace {

constexpr unsigned kMiscMajor = 10;
constexpr unsigned kVhostNetMinor = 238;  // VHOST_NET_MINOR in include/linux/miscdevice.h

constexpr const char* kHint =
    "load the vhost_net module (modprobe vhost_net, persist it in /etc/modules-load.d/); "
    "without it QEMU uses slow userspace virtio-net";

}  // namespace

std::string vhostFeatureNames(std::uint64_t f) {
  // Bit numbers from the virtio and vhost specifications.
  static constexpr std::pair<int, const char*> kBits[] = {
      {15, "VIRTIO_NET_F_MRG_RXBUF"},     {26, "VHOST_F_LOG_ALL"},
      {27, "VHOST_NET_F_VIRTIO_NET_HDR"}, {29, "VIRTIO_RING_F_EVENT_IDX"},
      {32, "VIRTIO_F_VERSION_1"},         {33, "VIRTIO_F_ACCESS_PLATFORM"}};
  std::string out;
  for (auto [bit, name] : kBits)
    if (f & (std::uint64_t{1} << bit)) out += (out.empty() ? "" : " ") + std::string(name);
  return out.empty() ? "none of the known bits" : out;
}

CheckResult evaluateVhostNet(const VhostNetObservation& o) {
  using S = DeviceNode::State;
  const std::string& dev = o.node.path;
  CheckResult r;
  switch (o.node.state) {
    case S::Missing:
      r = makeResult(
          "vhost-net", Status::Warn, o.sys_misc_present ? "DeviceNodeMissing" : "DeviceMissing",
          o.sys_misc_present ? "vhost-net is registered but " + dev + " does not exist"
                             : dev + " does not exist",
          o.sys_misc_present ? "create the node (mknod " + dev + " c 10 238) or check devtmpfs/udev"
                             : std::string(kHint));
      break;
    case S::StatFailed:
      r = makeResult("vhost-net", Status::Unknown, "DeviceUnreadable", o.node.error.message,
                     "give the agent access to the host's /dev (mount it at --path.devfs)");
      break;
    case S::NotCharDevice:
    case S::WrongNumber:
      r = makeResult("vhost-net", Status::Warn, "WrongDeviceNode",
                     dev + " is not the character device 10:238",
                     "remove the stray file and let the vhost_net driver create " + dev);
      break;
    case S::PermissionDenied:
      r = makeResult("vhost-net", Status::Unknown, "PermissionDenied",
                     "cannot open " + dev + " read-write: " + causeOf(o.node.error),
                     "run the check as root (virt-handler opens " + dev + " as root)");
      break;
    case S::NoDriver:
    case S::OpenFailed:
      r = makeResult("vhost-net", Status::Warn,
                     o.node.state == S::NoDriver ? "NoDriver" : "OpenFailed",
                     "cannot open " + dev + ": " + causeOf(o.node.error), kHint);
      break;
    case S::Open:
      if (!o.features) {
        r = makeResult("vhost-net", Status::Warn, "FeaturesUnavailable",
                       "VHOST_GET_FEATURES failed on " + dev + ": " + causeOf(o.features_error),
                       "check that " + dev + " is the vhost-net device (char 10:238)");
      } else {
        r = makeResult("vhost-net", Status::Pass, "VhostNetUsable",
                       "vhost-net answers VHOST_GET_FEATURES");
      }
      break;
  }
  r.labels["vhost-net"] = r.status == Status::Pass ? "true" : "false";
  r.evidence.push_back({"sysfs class/misc/vhost-net", o.sys_misc_present ? "present" : "absent"});
  r.evidence.push_back(nodeEvidence(o.node));
  if (o.features) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(*o.features));
    r.evidence.push_back({"ioctl VHOST_GET_FEATURES",
                          std::string(hex) + " (" + vhostFeatureNames(*o.features) + ")"});
  }
  return r;
}

CheckResult VhostNetProbe::run(const ProbeContext& ctx) {
  VhostNetObservation o;
  struct stat st {};
  o.sys_misc_present = ::stat(ctx.host.sys("class/misc/vhost-net").c_str(), &st) == 0;
  o.node = openDeviceNode(*io_, ctx.host.dev("vhost-net"), kMiscMajor, kVhostNetMinor, O_RDWR);
  if (o.node.state == DeviceNode::State::Open) {
    SeamFd fd(*io_, o.node.fd);
    std::uint64_t features = 0;
    auto rc = io_->ioctl(fd.get(), kVhostGetFeatures, &features);
    if (rc)
      o.features = features;
    else
      o.features_error = rc.error();
  }
  return evaluateVhostNet(o);
}

}  // namespace nodegate
