// A probe: collector + evaluator behind one interface. Probes never throw on purpose; the runner
// still turns any escape into UNKNOWN so one broken probe cannot stop the others.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "nodegate/check.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"

namespace nodegate {

// What may cause a probe to re-run. The periodic resync runs everything; the others run only the
// probes that list them.
enum Trigger : std::uint32_t {
  kTriggerTimer = 1u << 0,
  kTriggerUdevMisc = 1u << 1,   // misc devices: kvm, vhost-net, tun
  kTriggerUdevBlock = 1u << 2,  // block devices: storage probes
  kTriggerNetLink = 1u << 3,    // netlink link add/remove
  kTriggerDBusTime = 1u << 4,   // timedate1 PropertiesChanged
  kTriggerDns = 1u << 5,        // DNS tracer verdict changed
  kTriggerMounts = 1u << 6,     // mount table changed
};

struct ProbeContext {
  const HostRoot& host;
  const Config& config;
};

class Probe {
 public:
  virtual ~Probe() = default;
  virtual std::string_view name() const = 0;
  virtual std::uint32_t triggers() const { return kTriggerTimer; }
  virtual CheckResult run(const ProbeContext& ctx) = 0;
};

using ProbeList = std::vector<std::unique_ptr<Probe>>;

}  // namespace nodegate
