#include "cpu_virt.h"

#include <gtest/gtest.h>

namespace nodegate {
namespace {

TEST(ParseCpuInfo, IntelVmx) {
  auto info = parseCpuInfo(
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fpu vmx sse\n\n"
      "processor\t: 1\nflags\t\t: fpu sse\n");
  EXPECT_EQ(info.arch, "x86");
  EXPECT_EQ(info.processors, 2);
  EXPECT_TRUE(info.flags.count("vmx"));  // taken from the first block only
  auto r = evaluateCpuVirt(info, false);
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.labels.at("cpu-virt"), "vmx");
}

TEST(ParseCpuInfo, EmptyAndGarbageAreUnknown) {
  for (std::string_view text : {"", "\n\n", "garbage without colon\n", "processor : 0\n"}) {
    auto r = evaluateCpuVirt(parseCpuInfo(text), false);
    EXPECT_EQ(r.status, Status::Unknown) << text;
    EXPECT_FALSE(r.hint.empty());
  }
}

TEST(ParseCpuInfo, GuestWithoutVmxFailsWithHypervisorHint) {
  auto r = evaluateCpuVirt(parseCpuInfo("processor : 0\nflags : fpu hypervisor sse\n"), false);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.labels.at("hypervisor"), "true");
  EXPECT_NE(r.hint.find("nested"), std::string::npos);
}

TEST(ParseCpuInfo, Arm64NeverFailsForMissingX86Flags) {
  auto info = parseCpuInfo("processor : 0\nFeatures : fp asimd evtstrm\nCPU implementer : 0x43\n");
  EXPECT_EQ(info.arch, "arm64");
  EXPECT_NE(evaluateCpuVirt(info, false).status, Status::Fail);
  EXPECT_EQ(evaluateCpuVirt(info, true).status, Status::Pass);
}

}  // namespace
}  // namespace nodegate
