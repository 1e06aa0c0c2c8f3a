#include "cpu_level.h"

#include "nodegate/host_root.h"

namespace nodegate {
namespace {

// "checks.cpu-level.minimum", as the messages name it.
std::string minimumName() {
  return "checks." + kCpuLevelMinimumSetting.section + "." + kCpuLevelMinimumSetting.key;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

// The flags of levels from+1 .. to that the CPU lacks.
std::vector<std::string> missingUpTo(const std::set<std::string>& flags, int from, int to) {
  std::vector<std::string> out;
  const auto& levels = x86LevelFlags();
  for (int l = from; l < to && l < static_cast<int>(levels.size()); ++l)
    for (auto f : levels[l])
      if (!flags.count(std::string(f))) out.emplace_back(f);
  return out;
}

}  // namespace

const std::vector<std::vector<std::string_view>>& x86LevelFlags() {
  // Table 3.1 of the psABI, in the kernel's cpuinfo names. Where the two differ:
  //   SCE is "syscall", SSE3 is "pni", CMPXCHG16B "cx16", LAHF-SAHF "lahf_lm", LZCNT "abm"
  //   (arch/x86/include/asm/cpufeatures.h);
  //   OSFXSR and OSXSAVE are the OS's switches, not CPU flags: Linux sets CR4.OSFXSR whenever the
  //   CPU has FXSR, and clears the "xsave" flag (and AVX with it) when it does not enable XSAVE,
  //   so "fxsr" and "xsave" stand for them;
  //   "lm" (64-bit mode) is not in the table because every level presumes it.
  static const std::vector<std::vector<std::string_view>> kLevels = {
      {"lm", "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2"},
      {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"},
      {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
      {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
  };
  return kLevels;
}

X86Level x86Level(const std::set<std::string>& flags) {
  X86Level out;
  for (int l = 0; l < kMaxX86Level; ++l) {
    auto missing = missingUpTo(flags, l, l + 1);
    if (!missing.empty()) {
      out.missing_next = std::move(missing);
      return out;
    }
    out.level = l + 1;
  }
  return out;
}

std::string x86LevelName(int level) {
  if (level <= 0) return "below x86-64-v1";
  return "x86-64-v" + std::to_string(level);
}

std::vector<std::string> x86LevelNames() {
  std::vector<std::string> out{"x86-64"};  // the baseline, as GCC's -march names it
  for (int l = 1; l <= kMaxX86Level; ++l) out.push_back(x86LevelName(l));
  return out;
}

std::optional<int> parseX86LevelName(std::string_view name) {
  if (name == "x86-64") return 1;
  for (int l = 1; l <= kMaxX86Level; ++l)
    if (name == x86LevelName(l)) return l;
  return std::nullopt;
}

CheckResult evaluateCpuLevel(const CpuInfo& cpu, std::string_view minimum) {
  if (cpu.processors == 0 || cpu.arch.empty())
    return makeResult(kCpuLevelCheck, Status::Unknown, "CpuInfoUnreadable",
                      "cpuinfo has no processor flags to decide from",
                      "check that the host's /proc is mounted (--host-root / --path.procfs)");
  const auto min = parseX86LevelName(minimum);
  if (!min)
    return makeResult(kCpuLevelCheck, Status::Unknown, "InvalidMinimum",
                      minimumName() + " is \"" + std::string(minimum) +
                          "\", which is not an x86-64 micro-architecture level",
                      "set it to x86-64-v1, x86-64-v2, x86-64-v3 or x86-64-v4");
  CheckResult r;
  if (cpu.arch != "x86") {
    // Levels are an x86-64 notion: an arm64 node is neither above nor below them, and its
    // guest images are built for arm64. No label: there is no level to publish.
    r = makeResult(kCpuLevelCheck, Status::Pass, "NotX86",
                   cpu.arch + " CPU: x86-64 micro-architecture levels do not apply");
    r.evidence.push_back({"cpuinfo arch", cpu.arch});
    return r;
  }
  const auto level = x86Level(cpu.flags);
  const std::string have = x86LevelName(level.level), want = x86LevelName(*min);
  if (level.level >= *min) {
    r = makeResult(kCpuLevelCheck, Status::Pass, "LevelMet", have + " (minimum " + want + ")");
  } else {
    const bool guest = cpu.flags.count("hypervisor") > 0;
    r = makeResult(
        kCpuLevelCheck, Status::Fail, "BelowMinimum",
        have + ", below the minimum " + want + ": the CPU lacks " +
            joined(missingUpTo(cpu.flags, level.level, *min)) + ", so programs built for " + want +
            " die at the first of these instructions they use",
        guest ? "this node is a VM whose CPU model hides these flags: give it one that passes "
                "them through (host-passthrough or host-model, not qemu64/kvm64), or lower " +
                    minimumName() + " if every guest image needs less"
              : "this CPU predates " + want + ": run VMs on newer hardware, or lower " +
                    minimumName() + " if every guest image needs less");
  }
  r.labels[kCpuLevelCheck] = level.level > 0 ? have : "none";
  r.evidence.push_back({"cpuinfo arch", cpu.arch});
  if (!cpu.model.empty()) r.evidence.push_back({"cpuinfo model name", cpu.model});
  r.evidence.push_back({"x86-64 level (psABI Table 3.1)", have});
  if (level.level < kMaxX86Level)
    r.evidence.push_back(
        {"cpuinfo flags missing for " + x86LevelName(level.level + 1), joined(level.missing_next)});
  r.evidence.push_back({"policy " + minimumName(), std::string(minimum)});
  return r;
}

CheckResult CpuLevelProbe::run(const ProbeContext& ctx) {
  const std::string minimum = ctx.config.text(kCpuLevelMinimumSetting);
  auto text = readFile(ctx.host.proc("cpuinfo"));
  if (!text)
    return makeResult(kCpuLevelCheck, Status::Unknown, "CpuInfoUnreadable", text.error().message,
                      "check that the host's /proc is mounted (--host-root / --path.procfs)");
  auto r = evaluateCpuLevel(parseCpuInfo(*text), minimum);
  r.evidence.insert(r.evidence.begin(), {"source", ctx.host.proc("cpuinfo")});
  return r;
}

}  // namespace nodegate
