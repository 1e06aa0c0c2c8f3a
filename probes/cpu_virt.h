// cpu-virt: does the CPU offer hardware virtualization to this kernel?
// x86 needs vmx (Intel VT-x) or svm (AMD-V); arm64 has no such flag, so it is decided from the
// kernel's own KVM support instead and never failed for lacking x86 flags.
#pragma once

#include <set>
#include <string>
#include <string_view>

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

// Pure evaluation. kvm_misc_present: <sys>/class/misc/kvm exists (the arm64 signal).
CheckResult evaluateCpuVirt(const CpuInfo& info, bool kvm_misc_present);

class CpuVirtProbe final : public Probe {
 public:
  std::string_view name() const override { return "cpu-virt"; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
