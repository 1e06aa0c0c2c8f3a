#include <unistd.h>

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "lvm.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/registry.h"
#include "nodegate/runner.h"

namespace nodegate {
namespace {

TEST(HostRoot, JoinsPartsAndOverrides) {
  HostRoot h("/host");
  EXPECT_EQ(h.proc("cpuinfo"), "/host/proc/cpuinfo");
  EXPECT_EQ(h.sys("/class/misc/kvm"), "/host/sys/class/misc/kvm");
  h.setProcfs("/elsewhere/proc");
  EXPECT_EQ(h.proc("modules"), "/elsewhere/proc/modules");
  EXPECT_EQ(HostRoot("/").dev("kvm"), "/dev/kvm");
}

TEST(ReadFile, MissingFileKeepsErrno) {
  auto r = readFile("/nonexistent/nodegate/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ENOENT);
  EXPECT_EQ(r.error().message.rfind("failed to open", 0), 0u);
}

TEST(ReadFile, WholeFileAcrossReadsAndTheSizeCap) {
  char tmpl[] = "/tmp/nodegate-readfile-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  std::string want;
  for (int i = 0; want.size() < 10000; ++i) want += std::to_string(i) + (i % 7 ? ' ' : '\n');
  ASSERT_EQ(::write(fd, want.data(), want.size()), static_cast<ssize_t>(want.size()));
  ::close(fd);
  auto all = readFile(tmpl);  // three reads of 4 KiB, the last one short
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(*all, want);
  auto capped = readFile(tmpl, 5000);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.error().code, EFBIG);
  ::unlink(tmpl);
  // procfs files report size 0 and are read until EOF.
  auto self = readFile("/proc/self/status");
  ASSERT_TRUE(self.ok());
  EXPECT_NE(self->find("\nVmRSS:"), std::string::npos);
  EXPECT_EQ(self->back(), '\n');
}

TEST(Config, RejectsUnknownKeysAndBadTypes) {
  const auto& schema = configSchema();
  EXPECT_FALSE(parseConfig("{\"gaet\": {}}", schema).ok());
  EXPECT_FALSE(parseConfig("[1,2]", schema).ok());
  EXPECT_FALSE(parseConfig("{\"gate\": {\"required\": [1]}}", schema).ok());
  EXPECT_FALSE(parseConfig("{\"damping\": {\"lvm\": 0}}", schema).ok());
  EXPECT_FALSE(parseConfig("{", schema).ok());
  // Unknown keys under checks.<probe> are errors now (#21); the old test used "data_warn".
  EXPECT_FALSE(parseConfig(R"({"checks":{"lvm":{"data_warn":70}}})", schema).ok());
  auto ok = parseConfig(
      R"({"gate":{"required":["tun"]},"checks":{"lvm":{"data_warn_percent":70}}})", schema);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->required, std::set<std::string>{"tun"});
  EXPECT_EQ(ok->number(kLvmDataWarnSetting), 70);
  EXPECT_EQ(ok->number(kLvmDataFailSetting), 90);  // the spec's default
}

TEST(Gate, UnknownNeverCountsAsPass) {
  Config cfg;
  cfg.required = {"a", "b"};
  std::vector<CheckResult> rs = {makeResult("a", Status::Pass, "Ok", ""),
                                 makeResult("b", Status::Unknown, "X", "")};
  EXPECT_FALSE(gateOpen(rs, cfg));
  EXPECT_EQ(gateBlockers(rs, cfg), std::vector<std::string>{"b"});
  rs[1].status = Status::Pass;
  EXPECT_TRUE(gateOpen(rs, cfg));
  rs.pop_back();  // a required check that never ran keeps the gate closed
  EXPECT_FALSE(gateOpen(rs, cfg));
}

class ThrowingProbe : public Probe {
 public:
  ThrowingProbe() { spec_.name = "throws"; }
  const ProbeSpec& spec() const override { return spec_; }
  ProbeSpec spec_;
  CheckResult run(const ProbeContext&) override { throw std::runtime_error("boom"); }
};

TEST(Runner, EscapedExceptionBecomesUnknown) {
  ThrowingProbe p;
  HostRoot h;
  Config c;
  auto r = runProbe(p, ProbeContext{h, c});
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "ProbeError");
  EXPECT_FALSE(r.hint.empty());
}

TEST(Registry, NamesAreUniqueAndKebabCase) {
  auto probes = makeProbes(productionSeams());
  ASSERT_FALSE(probes.empty());
  std::set<std::string> seen;
  std::regex kebab("^[a-z0-9]+(-[a-z0-9]+)*$");
  for (const auto& p : probes) {
    std::string n(p->name());
    EXPECT_TRUE(std::regex_match(n, kebab)) << n;
    EXPECT_TRUE(seen.insert(n).second) << "duplicate probe " << n;
  }
}

}  // namespace
}  // namespace nodegate
