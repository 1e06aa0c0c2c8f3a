// cpu-level on real /proc/cpuinfo captures (test/fixtures/real, SOURCES.md says where each is
// from): the level each real CPU reaches, why it stops there, and the verdict against minimums.
#include <gtest/gtest.h>

#include "cpu_level.h"
#include "nodegate/host_root.h"
#include "nodegate/registry.h"

namespace nodegate {
namespace {

CpuInfo capture(const std::string& name) {
  auto text = readFile(std::string(NODEGATE_FIXTURES) + "/real/" + name);
  EXPECT_TRUE(text.ok()) << name;
  return parseCpuInfo(text.ok() ? *text : std::string());
}

std::string evidenceOf(const CheckResult& r, const std::string& source) {
  for (const auto& e : r.evidence)
    if (e.source == source) return e.observed;
  return {};
}

TEST(X86Level, RealCaptures) {
  struct Case {
    const char* file;
    int level;
    const char* missing_next;  // the next level's flags this CPU lacks
  };
  const Case cases[] = {
      // Sandy Bridge: AVX but no AVX2, BMI, FMA, F16C, LZCNT, MOVBE.
      {"cpuinfo-intel-xeon-e5-2670-baremetal-vmx.txt", 2, "avx2 bmi1 bmi2 f16c fma abm movbe"},
      {"cpuinfo-amd-epyc-9754-baremetal-svm.txt", 4, ""},
      {"cpuinfo-amd-epyc-9754-vm-guest-svm-hypervisor.txt", 4, ""},
      {"cpuinfo-intel-xeon-w2155-hyperv-guest-no-vmx.txt", 4, ""},
      {"cpuinfo-intel-xeon-8259cl-aws-ec2-guest-no-vmx.txt", 4, ""},
      {"cpuinfo-intel-xeon-gold-6326-vmware-guest-no-vmx.txt", 4, ""},
      {"cpuinfo-amd-epyc-firecracker-kvm-pvm-buildhost.txt", 4, ""},
      // QEMU's default CPU model: the x86-64 baseline only, what kubevirt/kubevirt#10713 hit.
      {"cpuinfo-qemu64-tcg-guest-x86-64-v1.txt", 1, "popcnt sse4_1 sse4_2 ssse3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    auto cpu = capture(c.file);
    ASSERT_EQ(cpu.arch, "x86");
    auto l = x86Level(cpu.flags);
    EXPECT_EQ(l.level, c.level);
    std::string missing;
    for (const auto& f : l.missing_next) missing += (missing.empty() ? "" : " ") + f;
    EXPECT_EQ(missing, c.missing_next);
  }
}

TEST(X86Level, EveryLevelNeedsTheOnesBelow) {
  std::set<std::string> flags;
  EXPECT_EQ(x86Level(flags).level, 0);
  for (int l = 0; l < kMaxX86Level; ++l) {
    for (auto f : x86LevelFlags()[l]) flags.emplace(f);
    EXPECT_EQ(x86Level(flags).level, l + 1);
  }
  // AVX-512 without SSE4.2 is still v1: levels are cumulative.
  flags.erase("sse4_2");
  auto l = x86Level(flags);
  EXPECT_EQ(l.level, 1);
  EXPECT_EQ(l.missing_next, std::vector<std::string>{"sse4_2"});
}

TEST(X86LevelName, RoundTrip) {
  for (int l = 1; l <= kMaxX86Level; ++l) EXPECT_EQ(parseX86LevelName(x86LevelName(l)), l);
  EXPECT_EQ(parseX86LevelName("x86-64"), 1);
  EXPECT_EQ(parseX86LevelName("x86-64-v5"), std::nullopt);
  EXPECT_EQ(parseX86LevelName("v2"), std::nullopt);
  EXPECT_EQ(parseX86LevelName(""), std::nullopt);
  EXPECT_EQ(x86LevelName(0), "below x86-64-v1");
}

TEST(EvaluateCpuLevel, AgainstTheMinimum) {
  auto sandy = capture("cpuinfo-intel-xeon-e5-2670-baremetal-vmx.txt");
  auto r = evaluateCpuLevel(sandy, "x86-64-v2");
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_EQ(r.message, "x86-64-v2 (minimum x86-64-v2)");
  EXPECT_EQ(r.labels.at("cpu-level"), "x86-64-v2");
  r = evaluateCpuLevel(sandy, "x86-64-v3");
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "BelowMinimum");
  EXPECT_NE(r.message.find("lacks avx2 bmi1 bmi2 f16c fma abm movbe"), std::string::npos)
      << r.message;
  EXPECT_NE(r.hint.find("newer hardware"), std::string::npos) << r.hint;
  EXPECT_EQ(r.labels.at("cpu-level"), "x86-64-v2") << "the level is a fact whatever the policy";

  auto qemu64 = capture("cpuinfo-qemu64-tcg-guest-x86-64-v1.txt");
  r = evaluateCpuLevel(qemu64, "x86-64-v2");
  EXPECT_EQ(r.status, Status::Fail) << r.message;
  EXPECT_NE(r.hint.find("host-passthrough"), std::string::npos) << "a VM: name the CPU model";
  EXPECT_EQ(evidenceOf(r, "x86-64 level (psABI Table 3.1)"), "x86-64-v1");
  EXPECT_EQ(evaluateCpuLevel(qemu64, "x86-64").status, Status::Pass);

  auto epyc = capture("cpuinfo-amd-epyc-9754-baremetal-svm.txt");
  r = evaluateCpuLevel(epyc, "x86-64-v4");
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(evidenceOf(r, "cpuinfo flags missing for x86-64-v5"), "") << "no level above v4";
}

TEST(EvaluateCpuLevel, NonX86AndBadInput) {
  auto arm = capture("cpuinfo-arm64-cavium-thunderx-scaleway.txt");
  auto r = evaluateCpuLevel(arm, "x86-64-v2");
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.reason, "NotX86");
  EXPECT_NE(r.message.find("arm64"), std::string::npos);
  EXPECT_TRUE(r.labels.empty());

  auto sandy = capture("cpuinfo-intel-xeon-e5-2670-baremetal-vmx.txt");
  r = evaluateCpuLevel(sandy, "x86-64-v9");
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "InvalidMinimum");
  EXPECT_NE(r.message.find("checks.cpu-level.minimum is \"x86-64-v9\""), std::string::npos);
  EXPECT_TRUE(r.labels.empty());

  r = evaluateCpuLevel(parseCpuInfo(""), "x86-64-v2");
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_TRUE(r.labels.empty());
  // A truncated flags line is read as what it says: fewer flags, a lower level, never a crash.
  r = evaluateCpuLevel(parseCpuInfo("processor : 0\nflags : fpu cx8 cmov\n"), "x86-64-v2");
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.labels.at("cpu-level"), "none");
}

// The setting as --config gives it: only level names are accepted, and the probe reads the
// configured one (the default when unset).
TEST(CpuLevelSetting, ConfigAcceptsOnlyLevelNames) {
  for (const char* bad : {"\"x86-64-v9\"", "\"v2\"", "2", "\"\""}) {
    auto c = parseConfig(std::string(R"({"checks":{"cpu-level":{"minimum":)") + bad + "}}}",
                         configSchema());
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.error().message.find("checks.cpu-level.minimum"), std::string::npos)
        << c.error().message;
  }
  const std::string sandy_root = std::string(NODEGATE_FIXTURES) + "/hosts/intel-baremetal-vmx";
  CpuLevelProbe probe;
  auto v3 = parseConfig(R"({"checks":{"cpu-level":{"minimum":"x86-64-v3"}}})", configSchema());
  ASSERT_TRUE(v3.ok()) << v3.error().message;
  auto r = probe.run(ProbeContext{HostRoot(sandy_root), *v3});
  EXPECT_EQ(r.reason, "BelowMinimum") << r.message;
  r = probe.run(ProbeContext{HostRoot(sandy_root), defaultConfig()});
  EXPECT_EQ(r.reason, "LevelMet") << r.message;
  EXPECT_EQ(evidenceOf(r, "policy checks.cpu-level.minimum"), "x86-64-v2");
}

}  // namespace
}  // namespace nodegate
