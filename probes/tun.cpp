#include "tun.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <utility>

#include "kernel_modules.h"

namespace nodegate {
namespace {

constexpr unsigned kMiscMajor = 10;
constexpr unsigned kTunMinor = 200;  // TUN_MINOR in include/linux/miscdevice.h
constexpr unsigned kRequired = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;

}  // namespace

std::string tunFeatureNames(unsigned f) {
  static constexpr std::pair<unsigned, const char*> kFlags[] = {
      {IFF_TUN, "IFF_TUN"},
      {IFF_TAP, "IFF_TAP"},
      {IFF_NO_PI, "IFF_NO_PI"},
      {IFF_VNET_HDR, "IFF_VNET_HDR"},
      {IFF_MULTI_QUEUE, "IFF_MULTI_QUEUE"},
      {IFF_NAPI, "IFF_NAPI"}};
  std::string out;
  for (auto [flag, name] : kFlags)
    if (f & flag) out += (out.empty() ? "" : " ") + std::string(name);
  return out.empty() ? "none" : out;
}

CheckResult evaluateTun(const TunObservation& o) {
  const std::string& dev = o.node.path;
  const DeviceNodeTexts texts{
      kTunCheck,
      "tun",
      Status::Fail,
      o.registered,
      "run the check as root (virt-launcher opens " + dev + " with CAP_NET_ADMIN)",
      moduleHint({"tun"}, o.module_support) + "; virt-launcher creates the guest tap with it"};
  CheckResult r;
  if (auto unusable = evaluateDeviceNode(o.node, texts)) {
    r = std::move(*unusable);
  } else {
    if (!o.features) {
      r = makeResult(kTunCheck, Status::Fail, "FeaturesUnavailable",
                     "TUNGETFEATURES failed on " + dev + ": " + causeOf(o.features_error),
                     "check that " + dev + " is the tun device (char 10:200)");
    } else if ((*o.features & kRequired) != kRequired) {
      r = makeResult(kTunCheck, Status::Fail, "MissingTunFeatures",
                     "tun lacks " + tunFeatureNames(kRequired & ~*o.features),
                     "upgrade the host kernel; virt-launcher needs TAP with vnet headers");
    } else if (!(*o.features & IFF_MULTI_QUEUE)) {
      r = makeResult(kTunCheck, Status::Warn, "NoMultiQueue", "tun has no IFF_MULTI_QUEUE",
                     "VMIs with networkInterfaceMultiqueue will fail on this node");
    } else {
      r = makeResult(kTunCheck, Status::Pass, "TunUsable",
                     "tun offers TAP, vnet headers and multi-queue");
    }
  }
  setDeviceLabel(r, "tun", r.status == Status::Pass || r.status == Status::Warn);
  r.evidence.push_back(nodeEvidence(o.node));
  if (o.features) r.evidence.push_back({"ioctl TUNGETFEATURES", tunFeatureNames(*o.features)});
  return r;
}

CheckResult TunProbe::run(const ProbeContext& ctx) {
  TunObservation o;
  o.registered = miscRegistered(ctx.host, "tun");
  o.module_support = kernelModuleSupport(ctx.host);
  o.node = openDeviceNode(*io_, ctx.host, "net/tun", kMiscMajor, kTunMinor, O_RDWR);
  if (o.node.state == DeviceNode::State::Open) {
    SeamFd fd(*io_, o.node.fd);
    unsigned features = 0;
    auto rc = io_->ioctl(fd.get(), TUNGETFEATURES, &features);
    if (rc)
      o.features = features;
    else
      o.features_error = rc.error();
  }
  return evaluateTun(o);
}

}  // namespace nodegate
