// A probe: collector + evaluator behind one interface. Probes never throw on purpose; the runner
// still turns any escape into UNKNOWN so one broken probe cannot stop the others.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/check.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/spec.h"

namespace nodegate {

struct ProbeContext {
  const HostRoot& host;
  const Config& config;
  // The results of the checks the probe's spec reads (ProbeSpec::reads): this cycle's, or the
  // latest run's when the check did not run in this cycle. A dependency that missed its deadline
  // is its UNKNOWN/ProbeTimeout result; one that never ran is absent. Null: none given.
  const std::map<std::string, CheckResult>* reads = nullptr;

  // The result of `check`, or nullptr when it has none (never ran, or not in the spec's reads).
  const CheckResult* read(const std::string& check) const {
    if (!reads) return nullptr;
    auto it = reads->find(check);
    return it == reads->end() ? nullptr : &it->second;
  }
};

// A probe's identity, triggers and settings are its ProbeSpec (nodegate/spec.h), declared once
// beside the class; name() and triggers() read it.
class Probe {
 public:
  virtual ~Probe() = default;
  virtual const ProbeSpec& spec() const = 0;
  virtual CheckResult run(const ProbeContext& ctx) = 0;
  std::string_view name() const { return spec().name; }
  std::uint32_t triggers() const { return spec().triggers; }
};

using ProbeList = std::vector<std::unique_ptr<Probe>>;

}  // namespace nodegate
