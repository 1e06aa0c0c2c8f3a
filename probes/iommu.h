// iommu: is an IOMMU active with device groups (needed only for PCI/GPU passthrough)?
// Published as the iommu label; FAIL only when the policy marks the node for passthrough
// (config: checks.iommu.required = true).
#pragma once

#include <string>
#include <string_view>

#include "nodegate/probe.h"

namespace nodegate {

// Kernel command line -> the IOMMU switches on it ("intel_iommu=on iommu=pt"), "" if none.
std::string iommuCmdlineArgs(std::string_view cmdline);

struct IommuObservation {
  int iommu_units = -1;  // entries in <sys>/class/iommu; -1: directory unreadable
  int groups = -1;       // entries in <sys>/kernel/iommu_groups; -1: unreadable
  std::string error;     // why a directory could not be read
  std::string cmdline_args;
  std::string arch;
  bool required = false;
};

CheckResult evaluateIommu(const IommuObservation& obs);

inline constexpr char kIommuCheck[] = "iommu";
inline const SettingSpec kIommuRequiredSetting =
    flagSetting(kIommuCheck, "required", false, "FAIL when no IOMMU is active (passthrough nodes)");
inline const ProbeSpec kIommuSpec{
    .name = kIommuCheck,
    .summary =
        "IOMMU groups present (<sys>/kernel/iommu_groups) as a label; FAIL only when required",
    .triggers = kTriggerTimer,
    .condition = "",
    .default_required = false,
    .settings = {&kIommuRequiredSetting},
};

class IommuProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kIommuSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
