// The production adjtimex seam against this machine's real kernel, compared field by field with
// what the adjtimex(8) tool (Debian package adjtimex) prints, and the time-sync verdict on it.
#include <gtest/gtest.h>
#include <sys/timex.h>

#include <cstdio>
#include <map>
#include <string>

#include "nodegate/seams.h"
#include "time_sync.h"

namespace nodegate {
std::shared_ptr<KernelClock> makeSysKernelClock();

namespace {

// `adjtimex --print`: "      status: 64" lines and " return value = 5".
std::map<std::string, long> runAdjtimexPrint() {
  std::map<std::string, long> out;
  FILE* p = ::popen("adjtimex --print 2>&1 || /usr/sbin/adjtimex --print 2>&1", "r");
  if (!p) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    std::string l(line);
    auto colon = l.find(':');
    auto eq = l.find("return value =");
    if (eq != std::string::npos) {
      out["return value"] = std::stol(l.substr(eq + 14));
    } else if (colon != std::string::npos) {
      std::string key = l.substr(0, colon);
      key.erase(0, key.find_first_not_of(' '));
      try {
        out[key] = std::stol(l.substr(colon + 1));
      } catch (...) {
      }
    }
  }
  ::pclose(p);
  return out;
}

TEST(KernelClock, MatchesAdjtimexTool) {
  auto clock = makeSysKernelClock();
  // The kernel may update maxerror (500 us/s while unsynchronised) or a running NTP daemon may
  // touch the state between the two reads: take a few pairs and accept the first consistent one.
  bool matched = false;
  std::string last;
  for (int attempt = 0; attempt < 5 && !matched; ++attempt) {
    auto before = clock->adjtimex();
    ASSERT_TRUE(before.ok()) << before.error().message;
    auto tool = runAdjtimexPrint();
    auto after = clock->adjtimex();
    ASSERT_TRUE(after.ok()) << after.error().message;
    ASSERT_TRUE(tool.count("status") && tool.count("maxerror") && tool.count("esterror") &&
                tool.count("offset") && tool.count("return value"))
        << "adjtimex --print output not understood (is the adjtimex package installed?)";
    auto between = [](long v, long a, long b) {
      return v >= std::min(a, b) && v <= std::max(a, b);
    };
    matched = tool["status"] == before->status && tool["status"] == after->status &&
              tool["return value"] == before->state &&
              between(tool["maxerror"], before->maxerror_us, after->maxerror_us) &&
              between(tool["esterror"], before->esterror_us, after->esterror_us) &&
              between(tool["offset"], before->offset, after->offset);
    last = "seam status=" + std::to_string(before->status) +
           " maxerror=" + std::to_string(before->maxerror_us) +
           " state=" + std::to_string(before->state) +
           "; tool status=" + std::to_string(tool["status"]) +
           " maxerror=" + std::to_string(tool["maxerror"]) +
           " return=" + std::to_string(tool["return value"]);
  }
  EXPECT_TRUE(matched) << last;
}

TEST(KernelClock, TimeSyncVerdictFollowsTheRealKernel) {
  auto clock = makeSysKernelClock();
  auto tx = clock->adjtimex();
  ASSERT_TRUE(tx.ok()) << tx.error().message;
  const bool synced = interpretTimex(*tx).synchronized;

  // No bus at all: the kernel is the only source, and the verdict must follow it.
  Config cfg;
  cfg.set("time-sync", "bus", "/nonexistent/nodegate/bus");
  cfg.set("time-sync", "grace_seconds", 0);
  HostRoot host("/");
  ProbeContext ctx{host, cfg};
  TimeSyncProbe probe(nullptr, clock);
  auto r = probe.run(ctx);
  if (synced) {
    EXPECT_EQ(r.status, Status::Warn) << r.message;
    EXPECT_TRUE(r.reason == "TimedateUnavailable" || r.reason == "MaxErrorHigh") << r.reason;
  } else {
    EXPECT_EQ(r.status, Status::Fail) << r.message;
    EXPECT_EQ(r.reason, "NotSynchronized");
  }
  bool have_metric = false;
  for (const auto& m : r.metrics) {
    if (m.name == "nodegate_time_max_error_seconds") {
      have_metric = true;
      EXPECT_NEAR(m.value, static_cast<double>(tx->maxerror_us) / 1e6, 0.01);
    }
  }
  EXPECT_TRUE(have_metric);
  std::printf("kernel clock: %s, status=0x%x maxerror=%ld us -> %s %s\n",
              synced ? "synchronised" : "unsynchronised", tx->status, tx->maxerror_us,
              std::string(toString(r.status)).c_str(), r.reason.c_str());
}

}  // namespace
}  // namespace nodegate
