#include "vhost_net.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstdio>

#include "kernel_modules.h"

namespace nodegate {
namespace {

constexpr unsigned kMiscMajor = 10;
constexpr unsigned kVhostNetMinor = 238;  // VHOST_NET_MINOR in include/linux/miscdevice.h

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
  const std::string& dev = o.node.path;
  const DeviceNodeTexts texts{kVhostNetCheck,
                              "vhost_net",
                              Status::Warn,
                              o.registered,
                              "run the check as root (virt-handler opens " + dev + " as root)",
                              moduleHint({"vhost_net"}, o.module_support) +
                                  "; without it QEMU uses slow userspace virtio-net"};
  CheckResult r;
  if (auto unusable = evaluateDeviceNode(o.node, texts)) {
    r = std::move(*unusable);
  } else {
    if (!o.features) {
      r = makeResult(kVhostNetCheck, Status::Warn, "FeaturesUnavailable",
                     "VHOST_GET_FEATURES failed on " + dev + ": " + causeOf(o.features_error),
                     "check that " + dev + " is the vhost-net device (char 10:238)");
    } else {
      r = makeResult(kVhostNetCheck, Status::Pass, "VhostNetUsable",
                     "vhost-net answers VHOST_GET_FEATURES");
    }
  }
  setDeviceLabel(r, "vhost-net", r.status == Status::Pass);
  r.evidence.push_back({"sysfs class/misc/vhost-net", registeredEvidence(o.registered)});
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
  o.registered = miscRegistered(ctx.host, "vhost-net");
  o.module_support = kernelModuleSupport(ctx.host);
  o.node = openDeviceNode(*io_, ctx.host, "vhost-net", kMiscMajor, kVhostNetMinor, O_RDWR);
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
