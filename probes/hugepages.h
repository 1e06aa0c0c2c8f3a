// hugepages: what the kernel has reserved in each huge page size. Reported as metrics and
// evidence; a WARN only when the policy asks for N free pages of a size
// (config: checks.hugepages.min_free = N, checks.hugepages.page_size_kb = 2048 by default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/probe.h"

namespace nodegate {

// "hugepages-2048kB" -> 2048; nullopt for anything else.
std::optional<std::uint64_t> parseHugepageDirName(std::string_view name);

struct HugepagePool {
  std::uint64_t size_kb = 0;
  std::uint64_t total = 0, free = 0, reserved = 0, surplus = 0;
};

struct HugepagesObservation {
  bool readable = false;            // <sys>/kernel/mm/hugepages could be listed
  std::vector<HugepagePool> pools;  // sorted by size
  std::uint64_t min_free = 0;       // policy
  std::uint64_t want_size_kb = 2048;
};

CheckResult evaluateHugepages(const HugepagesObservation& obs);

class HugepagesProbe final : public Probe {
 public:
  std::string_view name() const override { return "hugepages"; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
