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
  bool readable = false;  // <sys>/kernel/mm/hugepages could be listed
  // Why the pools could not be read (no sysfs, an unreadable directory or file): UNKNOWN.
  // The directory absent from a readable sysfs is a value: a kernel without hugetlbfs.
  std::string error;
  std::vector<HugepagePool> pools;  // sorted by size
  std::uint64_t min_free = 0;       // policy
  std::uint64_t want_size_kb = 2048;
};

CheckResult evaluateHugepages(const HugepagesObservation& obs);

inline constexpr char kHugepagesCheck[] = "hugepages";
inline const SettingSpec kHugepagesMinFreeSetting =
    integerSetting(kHugepagesCheck, "min_free", 0, 0, 1e9,
                   "free huge pages of page_size_kb wanted (0: report only)");
inline const SettingSpec kHugepagesPageSizeSetting =
    integerSetting(kHugepagesCheck, "page_size_kb", 2048, 4, 16 * 1024 * 1024,
                   "huge page size min_free counts, KiB");
inline const ProbeSpec kHugepagesSpec{
    .name = kHugepagesCheck,
    .summary =
        "huge pages reported (<sys>/kernel/mm/hugepages); WARN when fewer than min_free are free",
    .triggers = kTriggerTimer,
    .condition = "",
    .default_required = false,
    .settings = {&kHugepagesMinFreeSetting, &kHugepagesPageSizeSetting},
};

class HugepagesProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kHugepagesSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
