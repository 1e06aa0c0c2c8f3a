// nested-virt: may guests on this node run their own hypervisor (kvm_intel/kvm_amd "nested")?
// Published as the nested-virt label; a WARN only when the policy requires it
// (config: checks.nested-virt.required = true), since most workstation VMs do not need it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "nodegate/probe.h"

namespace nodegate {

// A sysfs boolean module parameter: "Y"/"N" (bool params) or "1"/"0" (int params such as
// kvm_amd's). Anything else is nullopt.
std::optional<bool> parseSysfsBool(std::string_view text);

struct NestedObservation {
  std::string arch;
  std::string module;           // kvm_intel / kvm_amd whose parameter was read, or ""
  std::string backend;          // the KVM backend present (kvm_backend.h), "" when none
  std::optional<bool> nested;   // nullopt: the parameter file is absent or unparsable
  std::string raw;              // the parameter file content, for evidence
  bool cpu_hypervisor = false;  // this node is itself a guest
  bool required = false;        // policy
  bool loads_modules = true;    // false: a kernel without module support (all built in)
  // Why the inputs could not be read (cpuinfo, sysfs, the parameter file): UNKNOWN, no label.
  std::string unreadable;
};

CheckResult evaluateNestedVirt(const NestedObservation& obs);

inline constexpr char kNestedVirtCheck[] = "nested-virt";
inline const SettingSpec kNestedVirtRequiredSetting =
    flagSetting(kNestedVirtCheck, "required", false, "WARN when nested virtualization is off");
inline const ProbeSpec kNestedVirtSpec{
    .name = kNestedVirtCheck,
    .summary =
        "nested virtualization as a label (<sys>/module/kvm_*/parameters/nested); WARN only when "
        "required",
    .triggers = kTriggerTimer,
    .condition = "",
    .default_required = false,
    .settings = {&kNestedVirtRequiredSetting},
};

class NestedVirtProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kNestedVirtSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
