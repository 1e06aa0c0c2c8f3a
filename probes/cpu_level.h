// cpu-level: the x86-64 micro-architecture level of the CPU (x86-64-v1 .. v4), from its cpuinfo
// flags, against a configurable minimum (checks.cpu-level.minimum, default x86-64-v2).
//
// Guest images are built for a level: KubeVirt's own (CentOS Stream 9 based) images need
// x86-64-v2 and die with "CPU does not support x86-64-v2" on an older CPU, or on a VM CPU model
// that masks the flags (qemu64) — kubevirt/kubevirt#10713, #9458 — while virt-host-validate sees
// nothing wrong. The levels are the psABI's: "System V Application Binary Interface, AMD64
// Architecture Processor Supplement", section 3.1.1, Table 3.1 "Micro-Architecture Levels"
// (also glibc's sysdeps/x86/get-isa-level.h and GCC's -march=x86-64-v2..v4).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_virt.h"
#include "nodegate/probe.h"

namespace nodegate {

inline constexpr int kMaxX86Level = 4;

// Each level's features as /proc/cpuinfo spells them (the kernel's names, not the psABI's).
// Index 0 is the baseline x86-64 (v1), 3 is v4.
const std::vector<std::vector<std::string_view>>& x86LevelFlags();

struct X86Level {
  int level = 0;  // 0: not even the x86-64 baseline; else 1..4
  // The flags of the next level this CPU lacks (empty at v4): why it is not higher.
  std::vector<std::string> missing_next;
};

// Pure: the highest level whose features, and those of every level below, are all present.
X86Level x86Level(const std::set<std::string>& flags);

// "x86-64-v3"; level 0 is "below x86-64-v1".
std::string x86LevelName(int level);
// "x86-64-v1".."x86-64-v4", and "x86-64" (the baseline, as GCC's -march names it); nullopt
// for anything else.
std::optional<int> parseX86LevelName(std::string_view name);

// Every name parseX86LevelName accepts: the choices of checks.cpu-level.minimum.
std::vector<std::string> x86LevelNames();

// Pure evaluation. minimum is the setting's text; config validation admits only
// x86LevelNames(), anything else is UNKNOWN InvalidMinimum here all the same.
CheckResult evaluateCpuLevel(const CpuInfo& cpu, std::string_view minimum);

inline constexpr char kCpuLevelCheck[] = "cpu-level";
inline const SettingSpec kCpuLevelMinimumSetting =
    textSetting(kCpuLevelCheck, "minimum", "x86-64-v2",
                "the lowest x86-64 micro-architecture level that passes (x86-64 is x86-64-v1)",
                x86LevelNames(), 16);
inline const ProbeSpec kCpuLevelSpec{
    .name = kCpuLevelCheck,
    .summary =
        "the x86-64 micro-architecture level (psABI v1-v4) from the <proc>/cpuinfo flags "
        "against a minimum; label cpu-level",
    .triggers = kTriggerTimer,
    .condition = "VirtualizationReady",
    .default_required = false,
    .settings = {&kCpuLevelMinimumSetting},
};

class CpuLevelProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kCpuLevelSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
