// tun: /dev/net/tun, through which virt-launcher creates the guest's tap device. It must offer
// TAP mode, no packet info and the virtio-net header; multi-queue is only needed by VMIs that
// ask for networkInterfaceMultiqueue, so its absence is a warning.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "device_node.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

struct TunObservation {
  std::optional<bool> registered;      // miscRegistered(<sys>/class/misc/tun), nullopt: unknown
  std::optional<bool> module_support;  // kernelModuleSupport(): for the hint
  DeviceNode node;
  std::optional<unsigned> features;  // TUNGETFEATURES: IFF_* flags
  Error features_error;
};

// "IFF_TAP IFF_NO_PI ..." for the flags virt-launcher uses.
std::string tunFeatureNames(unsigned features);

CheckResult evaluateTun(const TunObservation& obs);

inline constexpr char kTunCheck[] = "tun";
inline const ProbeSpec kTunSpec{
    .name = kTunCheck,
    .summary = "/dev/net/tun exists, opens and answers TUNGETFEATURES; label tun",
    .triggers = kTriggerTimer | kTriggerUdevMisc,
    .condition = "VirtualizationReady",
    .default_required = true,
    .settings = {},
};

class TunProbe final : public Probe {
 public:
  explicit TunProbe(std::shared_ptr<DeviceIo> io) : io_(std::move(io)) {}
  const ProbeSpec& spec() const override { return kTunSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<DeviceIo> io_;
};

}  // namespace nodegate
