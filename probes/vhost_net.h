// vhost-net: in-kernel virtio-net backend. Absent is WARN, not FAIL: QEMU falls back to the
// much slower userspace virtio-net, VMs still run.
#pragma once

#include <sys/ioctl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "device_node.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

// VHOST_GET_FEATURES from <linux/vhost.h>, spelled out because that header pulls in
// <linux/virtio_ring.h>, which is C and does not compile as C++.
inline constexpr unsigned long kVhostGetFeatures = _IOR(0xAF, 0x00, std::uint64_t);

struct VhostNetObservation {
  std::optional<bool> registered;  // miscRegistered(<sys>/class/misc/vhost-net), nullopt: unknown
  std::optional<bool> module_support;  // kernelModuleSupport(): for the hint
  DeviceNode node;
  std::optional<std::uint64_t> features;  // VHOST_GET_FEATURES
  Error features_error;
};

// Names of the feature bits that matter for guest network performance, present in `features`.
std::string vhostFeatureNames(std::uint64_t features);

CheckResult evaluateVhostNet(const VhostNetObservation& obs);

inline constexpr char kVhostNetCheck[] = "vhost-net";
inline const ProbeSpec kVhostNetSpec{
    .name = kVhostNetCheck,
    .summary =
        "/dev/vhost-net exists, opens and answers VHOST_GET_FEATURES (WARN if not); label "
        "vhost-net",
    .triggers = kTriggerTimer | kTriggerUdevMisc,
    .condition = "VirtualizationReady",
    .default_required = false,
    .settings = {},
};

class VhostNetProbe final : public Probe {
 public:
  explicit VhostNetProbe(std::shared_ptr<DeviceIo> io) : io_(std::move(io)) {}
  const ProbeSpec& spec() const override { return kVhostNetSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<DeviceIo> io_;
};

}  // namespace nodegate
