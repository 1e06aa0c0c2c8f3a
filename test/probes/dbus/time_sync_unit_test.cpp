// Pure parts of time-sync and node-services: property parsing, the kernel-state reading,
// the verdict table, restart windows, bus addresses. No bus, no kernel.
#include <gtest/gtest.h>
#include <sys/timex.h>

#include "node_services.h"
#include "time_sync.h"

namespace nodegate {
namespace {

using namespace std::chrono_literals;

DBusValue b(bool v) {
  return {"b", v};
}
DBusValue s(std::string v) {
  return {"s", std::move(v)};
}

const MetricSample* metric(const CheckResult& r, const std::string& name) {
  for (const auto& m : r.metrics)
    if (m.name == name) return &m;
  return nullptr;
}

TEST(ParseTimedate, ReadsTheThreeProperties) {
  auto r = parseTimedate({{"NTPSynchronized", b(true)},
                          {"NTP", b(false)},
                          {"Timezone", s("Europe/Berlin")},
                          {"LocalRTC", b(false)}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->ntp_synchronized);
  ASSERT_TRUE(r->ntp.has_value());
  EXPECT_FALSE(*r->ntp);
  EXPECT_EQ(r->timezone, "Europe/Berlin");
}

TEST(ParseTimedate, WrongTypeAndMissingAreErrorsNamingTheProperty) {
  auto wrong = parseTimedate({{"NTPSynchronized", s("yes")}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("NTPSynchronized: type is 's', expected 'b'"),
            std::string::npos)
      << wrong.error().message;
  auto missing = parseTimedate({{"NTP", b(true)}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("not present"), std::string::npos);
  auto tz =
      parseTimedate({{"NTPSynchronized", b(true)}, {"Timezone", DBusValue{"u", std::uint64_t{3}}}});
  ASSERT_FALSE(tz.ok());
  EXPECT_NE(tz.error().message.find("Timezone"), std::string::npos);
}

TEST(InterpretTimex, UnitsAndTheChronyCase) {
  KernelTimex tx;
  tx.status = STA_PLL | STA_NANO;
  tx.maxerror_us = 12000;
  tx.esterror_us = 500;
  tx.offset = -250000;  // ns, because STA_NANO
  auto t = interpretTimex(tx);
  EXPECT_TRUE(t.synchronized);
  EXPECT_DOUBLE_EQ(t.max_error_s, 0.012);
  EXPECT_DOUBLE_EQ(t.est_error_s, 0.0005);
  EXPECT_DOUBLE_EQ(t.offset_s, -0.00025);
  tx.status = STA_PLL;  // microseconds
  EXPECT_DOUBLE_EQ(interpretTimex(tx).offset_s, -0.25);

  // chronyd without rtcsync keeps STA_UNSYNC on a disciplined clock: trust the error bound.
  tx.status = STA_UNSYNC;
  tx.maxerror_us = 40000;
  EXPECT_TRUE(interpretTimex(tx).synchronized);
  // At the kernel's cap the clock is not disciplined, whatever the flags say.
  tx.maxerror_us = 16000000;
  EXPECT_FALSE(interpretTimex(tx).synchronized);
}

TEST(UnsyncedBefore, OnlyAtTheCapAndBoundedByUptime) {
  KernelTimex tx;
  tx.status = STA_UNSYNC;
  tx.maxerror_us = 16000000;
  auto t = interpretTimex(tx);
  EXPECT_DOUBLE_EQ(unsyncedBefore(t, 300.0), 300.0);
  EXPECT_DOUBLE_EQ(unsyncedBefore(t, 1e6), 32000.0);
  EXPECT_DOUBLE_EQ(unsyncedBefore(t, std::nullopt), 0.0);
  tx.status = 0;
  tx.maxerror_us = 1000;
  EXPECT_DOUBLE_EQ(unsyncedBefore(interpretTimex(tx), 300.0), 0.0);
}

TEST(UnsyncedClock, TracksSinceWhenAcrossRuns) {
  UnsyncedClock c;
  auto t0 = std::chrono::steady_clock::time_point(1000s);
  EXPECT_DOUBLE_EQ(c.observe(false, t0, 0), 0.0);
  EXPECT_DOUBLE_EQ(c.observe(false, t0 + 30s, 0), 30.0);
  EXPECT_DOUBLE_EQ(c.observe(false, t0 + 40s, 500), 40.0);  // prior only backdates the first
  EXPECT_DOUBLE_EQ(c.observe(true, t0 + 50s, 0), 0.0);
  EXPECT_DOUBLE_EQ(c.observe(false, t0 + 60s, 20), 20.0);
}

TimexInfo kernel(bool synced, double max_error = 0.01) {
  TimexInfo t;
  t.synchronized = synced;
  t.sta_unsync = !synced;
  t.max_error_s = max_error;
  t.offset_s = 0.0001;
  return t;
}

TimedateInfo timedate(bool synced, bool ntp = true) {
  TimedateInfo t;
  t.ntp_synchronized = synced;
  t.ntp = ntp;
  t.timezone = "UTC";
  return t;
}

TEST(EvaluateTimeSync, VerdictTable) {
  TimeSyncPolicy policy;  // 100 ms, 600 s grace
  struct Case {
    std::optional<TimedateInfo> bus;
    std::optional<TimexInfo> k;
    double unsynced_for;
    Status status;
    const char* reason;
  };
  const Case cases[] = {
      {timedate(true), kernel(true), 0, Status::Pass, "Synchronized"},
      {timedate(true), kernel(true, 0.5), 0, Status::Warn, "MaxErrorHigh"},
      {timedate(false), kernel(true), 0, Status::Warn, "SourcesDisagree"},
      {std::nullopt, kernel(true), 0, Status::Warn, "TimedateUnavailable"},
      {timedate(true), std::nullopt, 0, Status::Warn, "KernelClockUnreadable"},
      {timedate(false), kernel(false, 16), 10, Status::Warn, "NotSynchronizedYet"},
      {timedate(false), kernel(false, 16), 601, Status::Fail, "NotSynchronized"},
      {timedate(true), kernel(false, 16), 601, Status::Fail, "NotSynchronized"},
      {std::nullopt, kernel(false, 16), 601, Status::Fail, "NotSynchronized"},
      {timedate(false), std::nullopt, 601, Status::Fail, "NotSynchronized"},
      {std::nullopt, std::nullopt, 0, Status::Unknown, "NoTimeSource"},
  };
  for (const auto& c : cases) {
    TimeSyncInputs in;
    in.timedate = c.bus;
    in.timedate_error = c.bus ? "" : "failed to connect to unix:path=/x: No such file";
    in.kernel = c.k;
    in.kernel_error = c.k ? "" : "failed to read the kernel clock state (adjtimex): EPERM";
    in.unsynced_for_s = c.unsynced_for;
    auto r = evaluateTimeSync(in, policy);
    EXPECT_EQ(r.status, c.status) << c.reason << ": " << r.message;
    EXPECT_EQ(r.reason, c.reason) << r.message;
    if (r.status != Status::Pass) {
      EXPECT_FALSE(r.hint.empty()) << c.reason;
    }
    if (c.status == Status::Unknown) {
      EXPECT_TRUE(r.metrics.empty());
      continue;
    }
    const auto* synced = metric(r, "nodegate_time_synchronized");
    ASSERT_NE(synced, nullptr);
    EXPECT_EQ(synced->value, (c.k ? c.k->synchronized : c.bus->ntp_synchronized) ? 1.0 : 0.0);
    EXPECT_EQ(metric(r, "nodegate_time_max_error_seconds") != nullptr, c.k.has_value());
    if (c.k) {
      EXPECT_DOUBLE_EQ(metric(r, "nodegate_time_max_error_seconds")->value, c.k->max_error_s);
    }
  }
}

TEST(EvaluateTimeSync, NtpDisabledChangesTheHint) {
  TimeSyncInputs in;
  in.timedate = timedate(false, /*ntp=*/false);
  in.kernel = kernel(false, 16);
  in.unsynced_for_s = 5000;
  auto r = evaluateTimeSync(in, {});
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_NE(r.hint.find("timedatectl set-ntp true"), std::string::npos);
  EXPECT_NE(r.message.find("NTP is disabled"), std::string::npos);
}

TEST(ProbeBusAddress, DefaultsToTheHostSocketAndEscapes) {
  Config cfg;
  HostRoot host("/host");
  EXPECT_EQ(probeBusAddress(host, cfg, kTimeSyncBusSetting),
            "unix:path=/host/run/dbus/system_bus_socket");
  cfg.set("time-sync", "bus", "/tmp/my bus,x");
  EXPECT_EQ(probeBusAddress(host, cfg, kTimeSyncBusSetting), "unix:path=/tmp/my%20bus%2cx");
  cfg.set("time-sync", "bus", "unix:abstract=nodegate");
  EXPECT_EQ(probeBusAddress(host, cfg, kTimeSyncBusSetting), "unix:abstract=nodegate");
  EXPECT_EQ(probeBusTimeout(cfg, "time-sync"), 1000ms);
  cfg.set("time-sync", "timeout_seconds", -4);
  EXPECT_EQ(probeBusTimeout(cfg, "time-sync"), 1000ms);
}

TEST(RestartHistory, CountsInsideTheWindowOnly) {
  RestartHistory h;
  auto t0 = std::chrono::steady_clock::time_point(10000s);
  EXPECT_FALSE(h.observe(5, t0, 600s).has_value());  // one sample is no rate
  EXPECT_EQ(h.observe(7, t0 + 60s, 600s), 2u);
  EXPECT_EQ(h.observe(9, t0 + 300s, 600s), 4u);
  // t0 falls out of the window; the t0+60 sample becomes the baseline.
  EXPECT_EQ(h.observe(9, t0 + 700s, 600s), 2u);
  EXPECT_EQ(h.observe(9, t0 + 1000s, 600s), 0u);
  // The counter went down: history restarts.
  EXPECT_FALSE(h.observe(1, t0 + 1010s, 600s).has_value());
}

TEST(ParseUnitState, TypesAreChecked) {
  DBusProperties unit = {
      {"LoadState", s("loaded")}, {"ActiveState", s("active")}, {"SubState", s("running")}};
  DBusProperties service = {{"NRestarts", DBusValue{"u", std::uint64_t{4}}}};
  auto ok = parseUnitState("kubelet.service", unit, &service);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->n_restarts, 4u);
  DBusProperties bad_service = {{"NRestarts", s("4")}};
  auto bad = parseUnitState("kubelet.service", unit, &bad_service);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("NRestarts: type is 's', expected 'u'"), std::string::npos);
  unit["ActiveState"] = DBusValue{"u", std::uint64_t{1}};
  EXPECT_FALSE(parseUnitState("kubelet.service", unit, nullptr).ok());
}

UnitReport unitReport(std::string name, std::string load, std::string active, std::string sub,
                      std::optional<std::uint64_t> in_window = std::nullopt) {
  UnitReport r;
  r.name = name;
  r.state = UnitState{name, load, active, sub, 3};
  r.restarts_in_window = in_window;
  return r;
}

TEST(EvaluateNodeServices, WorstUnitWins) {
  NodeServicesPolicy p;
  auto pass =
      evaluateNodeServices({unitReport("kubelet.service", "loaded", "active", "running", 0),
                            unitReport("containerd.service", "loaded", "active", "running")},
                           p);
  EXPECT_EQ(pass.status, Status::Pass) << pass.message;
  EXPECT_EQ(pass.metrics.size(), 4u);

  auto restarting =
      evaluateNodeServices({unitReport("kubelet.service", "loaded", "active", "running", 4)}, p);
  EXPECT_EQ(restarting.status, Status::Warn);
  EXPECT_EQ(restarting.reason, "UnitRestarting");

  UnitReport unreadable;
  unreadable.name = "containerd.service";
  unreadable.error = "failed to read ...: timeout";
  auto mixed =
      evaluateNodeServices({unitReport("kubelet.service", "loaded", "failed", "failed"), unreadable,
                            unitReport("crio.service", "not-found", "inactive", "dead")},
                           p);
  EXPECT_EQ(mixed.status, Status::Fail);
  EXPECT_EQ(mixed.reason, "UnitFailed");
  EXPECT_NE(mixed.message.find("crio.service is not installed"), std::string::npos);

  auto unknown = evaluateNodeServices(
      {unitReport("crio.service", "not-found", "inactive", "dead"), unreadable}, p);
  EXPECT_EQ(unknown.status, Status::Unknown);
  EXPECT_EQ(unknown.reason, "UnitUnreadable");

  auto activating = evaluateNodeServices(
      {unitReport("kubelet.service", "loaded", "activating", "auto-restart", 1)}, p);
  EXPECT_EQ(activating.status, Status::Warn);
  EXPECT_EQ(activating.reason, "UnitTransitioning");
}

TEST(Probes, NullSeamsAreUnknownNotACrash) {
  HostRoot host("/nonexistent-nodegate-root");
  Config cfg;
  ProbeContext ctx{host, cfg};
  TimeSyncProbe t(nullptr, nullptr);
  auto r = t.run(ctx);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "NoTimeSource");
  NodeServicesProbe n(nullptr);
  EXPECT_EQ(n.run(ctx).status, Status::Unknown);
}

}  // namespace
}  // namespace nodegate
