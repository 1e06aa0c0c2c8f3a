// Golden test: every host-virtualization probe, run through the real registry on each captured
// host tree under test/fixtures/hosts/<scenario>/ with the fake DeviceIo configured from the
// scenario's devices.json (and its config.json policy, when present), must produce exactly
// expected.json. The scenario's absolute path is replaced by "$ROOT" so goldens are portable.
//
// Regenerating after an intended change:
//   NODEGATE_UPDATE_GOLDEN=1 ctest --test-dir build -R HostScenarios
// rewrites every expected.json; review the diff with `git diff test/fixtures/hosts` before
// committing it. Without the variable the test only compares.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "fake_device_io.h"
#include "nodegate/config.h"
#include "nodegate/json.h"
#include "nodegate/registry.h"
#include "nodegate/runner.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;

// The probes this golden set covers (issue 2, and cpu-level of issue 17). Other probes in the
// registry (lvm, dns-path...) have their own fixtures and are filtered out so their changes never
// touch these goldens.
const std::set<std::string> kHostProbes = {"cpu-virt", "cpu-level",      "kvm-device",  "vhost-net",
                                           "tun",      "kernel-modules", "nested-virt", "iommu",
                                           "cgroups",  "hugepages"};

std::vector<std::string> scenarios() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(std::string(NODEGATE_FIXTURES) + "/hosts"))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

class HostScenarios : public ::testing::TestWithParam<std::string> {};

TEST_P(HostScenarios, MatchesGolden) {
  const std::string dir = std::string(NODEGATE_FIXTURES) + "/hosts/" + GetParam();
  HostRoot host(dir);
  Config cfg = defaultConfig();
  if (fs::exists(dir + "/config.json")) {
    auto c = loadConfig(dir + "/config.json", configSchema());
    ASSERT_TRUE(c.ok()) << c.error().message;
    cfg = *c;
  }
  auto fake = testing::loadFakeDevices(dir + "/devices.json", host);
  ASSERT_TRUE(fake.ok()) << fake.error().message;
  Seams seams = productionSeams();
  seams.device = *fake;

  nlohmann::json got = nlohmann::json::array();
  std::set<std::string> seen;
  for (auto& probe : makeProbes(seams)) {
    if (!kHostProbes.count(std::string(probe->name()))) continue;
    auto r = runProbe(*probe, ProbeContext{host, cfg});
    seen.insert(r.check);
    EXPECT_EQ(r.check, probe->name());
    if (r.status != Status::Pass) {
      EXPECT_FALSE(r.hint.empty()) << r.check << " has no hint";
    }
    EXPECT_NE(r.reason, "ProbeError") << r.check << ": " << r.message;
    got.push_back(toJson(r, false));
  }
  EXPECT_EQ(seen, kHostProbes) << "a probe is missing from probes/registry.cpp";
  EXPECT_EQ((*fake)->openCount(), 0u) << "a probe leaked a device fd";
  EXPECT_EQ((*fake)->badCloses(), 0) << "a probe closed an fd it did not own";

  const std::string text = replaceAll(got.dump(2), dir, "$ROOT") + "\n";
  const std::string golden = dir + "/expected.json";
  if (std::getenv("NODEGATE_UPDATE_GOLDEN")) {
    std::ofstream(golden) << text;
    std::cout << "updated " << golden << "\n";
    return;
  }
  auto want = readFile(golden);
  ASSERT_TRUE(want.ok()) << want.error().message << " (generate it with NODEGATE_UPDATE_GOLDEN=1)";
  // Compare parsed documents first for a readable diff, then bytes for formatting drift.
  auto diff = nlohmann::json::diff(nlohmann::json::parse(*want), nlohmann::json::parse(text));
  EXPECT_TRUE(diff.empty()) << GetParam() << " differs from its golden:\n" << diff.dump(2);
  EXPECT_EQ(*want, text);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HostScenarios, ::testing::ValuesIn(scenarios()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The scenarios the issues name must all exist: a deleted fixture is a failure, not a
// silently smaller suite.
TEST(HostScenarios, AllNamedScenariosPresent) {
  auto have = scenarios();
  for (const char* s : {"intel-baremetal-vmx", "amd-baremetal-svm", "cloud-guest-no-vmx",
                        "vm-guest-nested", "arm64-thunderx", "intel-kvm-no-vhost-net",
                        "intel-kvm-not-openable", "cgroup-v1-host", "kvm-pvm-no-hwvirt"})
    EXPECT_NE(std::find(have.begin(), have.end(), s), have.end()) << s;
}

}  // namespace
}  // namespace nodegate
