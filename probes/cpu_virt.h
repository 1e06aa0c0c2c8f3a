// cpu-virt: does the CPU offer hardware virtualization to this kernel?
// x86 needs vmx (Intel VT-x) or svm (AMD-V); arm64 has no such flag, so it is decided from the
// kernel's own KVM support instead and never failed for lacking x86 flags. Without vmx/svm a
// host may still have a KVM (kvm_pvm, paravirtual): the verdict names it, kvm-device tests it.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "kvm_backend.h"
#include "nodegate/probe.h"

namespace nodegate {

struct CpuInfo {
  std::string arch;  // "x86", "arm64" or "" when cpuinfo says neither
  std::string vendor;
  std::string model;
  std::set<std::string> flags;  // x86 "flags" or arm64 "Features" of the first processor
  int processors = 0;
};

// Parses /proc/cpuinfo text. Malformed lines are skipped; an input with no processor block
// yields processors == 0, which the evaluator treats as UNKNOWN.
CpuInfo parseCpuInfo(std::string_view text);

// Pure evaluation. kvm_registered: <sys>/class/misc/kvm exists (the arm64 signal; nullopt when
// sysfs cannot be read); backend: the KVM backend really present, named so that a reader of a
// FAIL learns what KVM there is.
CheckResult evaluateCpuVirt(const CpuInfo& info, std::optional<bool> kvm_registered,
                            const KvmBackend& backend = {});

inline constexpr char kCpuVirtCheck[] = "cpu-virt";
inline const ProbeSpec kCpuVirtSpec{
    .name = kCpuVirtCheck,
    .summary = "vmx or svm in <proc>/cpuinfo (or arm64 KVM support); label cpu-virt",
    .triggers = kTriggerTimer,
    .condition = "VirtualizationReady",
    .default_required = true,
    .settings = {},
};

class CpuVirtProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kCpuVirtSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
