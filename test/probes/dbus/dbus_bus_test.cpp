// time-sync and node-services against a real dbus-daemon on a private socket, with the test
// service (test_service.cpp) playing timedated and systemd, and the production sdbus-c++ seam.
// The kernel clock is faked here so verdicts are deterministic; timex_kernel_test uses the real
// one.
#include <gtest/gtest.h>
#include <sys/timex.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "bus_harness.h"
#include "node_services.h"
#include "sys/dbus.h"
#include "time_sync.h"
#include "triggers/time_sync_watch.h"

namespace nodegate {
namespace {

using namespace std::chrono_literals;
using testing::TestBus;
using SteadyClock = std::chrono::steady_clock;

class FakeClock final : public KernelClock {
 public:
  KernelTimex tx;
  bool fail = false;
  FakeClock() { setSynced(true); }
  void setSynced(bool synced) {
    tx.status = synced ? (STA_PLL | STA_NANO) : (STA_UNSYNC | STA_NANO);
    tx.maxerror_us = synced ? 20000 : 16000000;
    tx.esterror_us = synced ? 300 : 16000000;
    tx.offset = 1500;
  }
  Result<KernelTimex> adjtimex() override {
    if (fail) return Error{EPERM, "failed to read the kernel clock state (adjtimex): denied"};
    return tx;
  }
};

// Counts watcher callbacks and lets a test wait for the next ones.
class Counter {
 public:
  void bump() {
    std::lock_guard lk(mu_);
    ++n_;
    cv_.notify_all();
  }
  int value() {
    std::lock_guard lk(mu_);
    return n_;
  }
  bool waitAbove(int n, std::chrono::milliseconds d) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, d, [&] { return n_ > n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

class DBusProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.set("time-sync", "bus", bus_.address());
    cfg_.set("node-services", "bus", bus_.address());
  }
  CheckResult runTime() {
    ProbeContext ctx{host_, cfg_};
    return time_.run(ctx);
  }
  CheckResult runServices() {
    ProbeContext ctx{host_, cfg_};
    return services_.run(ctx);
  }
  // Runs until the result has the status (a restarted service needs a moment to be reachable).
  CheckResult runTimeUntil(Status want, std::chrono::milliseconds d = 5s) {
    auto deadline = SteadyClock::now() + d;
    CheckResult r = runTime();
    while (r.status != want && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
      r = runTime();
    }
    return r;
  }
  static std::string evidence(const CheckResult& r, const std::string& source) {
    for (const auto& e : r.evidence)
      if (e.source == source) return e.observed;
    return "<none>";
  }

  TestBus bus_;
  HostRoot host_{"/nonexistent-nodegate-root"};  // no uptime: no backdating of unsync
  Config cfg_;
  std::shared_ptr<DBus> dbus_ = makeSysDBus();
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  TimeSyncProbe time_{dbus_, clock_};
  NodeServicesProbe services_{dbus_};
};

TEST_F(DBusProbeTest, ReadsTimedateAndFollowsPropertyChanges) {
  ASSERT_TRUE(bus_.startService({"--synced", "1", "--ntp", "1", "--timezone", "Europe/Berlin"}));
  auto r = runTime();
  EXPECT_EQ(r.status, Status::Pass) << r.reason << ": " << r.message;
  EXPECT_EQ(evidence(r, "timedate1 Timezone"), "Europe/Berlin");
  EXPECT_EQ(evidence(r, "timedate1 NTPSynchronized"), "true");

  bus_.control("SetTimedate", false, false, std::string("Asia/Tokyo"));
  r = runTime();
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "SourcesDisagree") << r.message;
  EXPECT_EQ(evidence(r, "timedate1 Timezone"), "Asia/Tokyo");
  EXPECT_EQ(evidence(r, "timedate1 NTP"), "false");

  // The kernel loses sync too: within the grace a warning, past it a failure.
  clock_->setSynced(false);
  r = runTime();
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "NotSynchronizedYet");
  cfg_.set("time-sync", "grace_seconds", 0);
  r = runTime();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "NotSynchronized");
  EXPECT_NE(r.hint.find("set-ntp true"), std::string::npos) << r.hint;
}

TEST_F(DBusProbeTest, PropertiesChangedFiresTheWatcher) {
  ASSERT_TRUE(bus_.startService({"--unit", "kubelet.service=active/running/0"}));
  Counter count;
  TimeSyncWatcher watcher(*dbus_, bus_.address(), [&] { count.bump(); });
  // The watcher subscribes on its own thread; change until the first signal is seen.
  bool seen = false;
  for (int i = 0; i < 50 && !seen; ++i) {
    bus_.control("SetTimedate", i % 2 == 0, true, std::string("UTC"));
    seen = count.waitAbove(0, 100ms);
  }
  ASSERT_TRUE(seen) << "no callback for timedate1 PropertiesChanged";
  std::this_thread::sleep_for(200ms);
  int before = count.value();

  // A change on another interface is not ours.
  bus_.control("SetUnit", std::string("kubelet.service"), std::string("loaded"),
               std::string("failed"), std::string("failed"), std::uint32_t{1});
  EXPECT_FALSE(count.waitAbove(before, 500ms)) << "callback for a systemd1 unit change";

  // Exactly this change, one signal, one callback.
  bus_.control("SetTimedate", true, false, std::string("Europe/Paris"));
  EXPECT_TRUE(count.waitAbove(before, 2s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(count.value(), before + 1);
}

TEST_F(DBusProbeTest, ServiceVanishesAndComesBack) {
  ASSERT_TRUE(bus_.startService());
  EXPECT_EQ(runTime().status, Status::Pass);
  bus_.stopService();
  auto r = runTime();
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "TimedateUnavailable");
  EXPECT_NE(r.message.find("org.freedesktop.timedate1"), std::string::npos) << r.message;
  clock_->fail = true;
  r = runTime();
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "NoTimeSource");
  clock_->fail = false;
  ASSERT_TRUE(bus_.startService());
  r = runTimeUntil(Status::Pass);
  EXPECT_EQ(r.status, Status::Pass) << r.message;
}

TEST_F(DBusProbeTest, SlowAnswerTimesOutInsteadOfStalling) {
  ASSERT_TRUE(bus_.startService());
  EXPECT_EQ(runTime().status, Status::Pass);
  bus_.control("SetDelay", std::uint32_t{4000});
  clock_->fail = true;  // so the verdict rests on the bus alone
  auto t0 = SteadyClock::now();
  auto r = runTime();
  auto took = SteadyClock::now() - t0;
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_LT(took, 1800ms) << "a slow service must cost at most the call timeout";
  EXPECT_NE(evidence(r, "timedate1").find("timedate1"), std::string::npos);

  // Once the service answers quickly again, so does the probe.
  bus_.control("SetDelay", std::uint32_t{0});
  clock_->fail = false;
  r = runTimeUntil(Status::Pass, 10s);
  EXPECT_EQ(r.status, Status::Pass) << r.message;
}

TEST_F(DBusProbeTest, WrongPropertyTypesAreReportedNotMisread) {
  ASSERT_TRUE(bus_.startService({"--wrong-types", "--unit", "kubelet.service=active/running/2"}));
  auto r = runTime();
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "TimedateUnavailable");
  EXPECT_NE(r.message.find("NTPSynchronized: type is 's', expected 'b'"), std::string::npos)
      << r.message;
  cfg_.set("node-services", "units", nlohmann::json::array({"kubelet.service"}));
  auto s = runServices();
  EXPECT_EQ(s.status, Status::Unknown);
  EXPECT_NE(s.message.find("NRestarts: type is 's', expected 'u'"), std::string::npos) << s.message;
}

TEST_F(DBusProbeTest, NoBusAtAll) {
  cfg_.set("time-sync", "bus", bus_.dir() + "/no-such-socket");
  auto t0 = SteadyClock::now();
  auto r = runTime();
  EXPECT_LT(SteadyClock::now() - t0, 1500ms);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "TimedateUnavailable");
  EXPECT_NE(r.message.find("failed to connect to unix:path="), std::string::npos) << r.message;
  clock_->fail = true;
  EXPECT_EQ(runTime().status, Status::Unknown);
}

TEST_F(DBusProbeTest, WedgedBusCostsOneTimeout) {
  ASSERT_TRUE(bus_.startService());
  EXPECT_EQ(runTime().status, Status::Pass);
  bus_.freeze();
  clock_->fail = true;
  auto t0 = SteadyClock::now();
  auto r = runTime();
  EXPECT_LT(SteadyClock::now() - t0, 1800ms);
  EXPECT_EQ(r.status, Status::Unknown);
  // A fresh client (its handshake is what blocks now) must not stall either.
  TimeSyncProbe fresh(dbus_, clock_);
  ProbeContext ctx{host_, cfg_};
  t0 = SteadyClock::now();
  r = fresh.run(ctx);
  EXPECT_LT(SteadyClock::now() - t0, 1800ms);
  EXPECT_EQ(r.status, Status::Unknown);
  bus_.thaw();
  clock_->fail = false;
  r = runTimeUntil(Status::Pass, 10s);
  EXPECT_EQ(r.status, Status::Pass) << r.message;
}

TEST_F(DBusProbeTest, BusRestartReconnectsAndTriggers) {
  ASSERT_TRUE(bus_.startService());
  Counter count;
  TimeSyncWatcher watcher(*dbus_, bus_.address(), [&] { count.bump(); });
  EXPECT_EQ(runTime().status, Status::Pass);
  std::this_thread::sleep_for(300ms);  // let the watcher connect
  int before = count.value();

  bus_.stop();
  EXPECT_TRUE(count.waitAbove(before, 3s)) << "no callback when the bus went away";
  auto r = runTime();
  EXPECT_EQ(r.reason, "TimedateUnavailable") << r.message;
  int after_loss = count.value();

  bus_.start();
  ASSERT_TRUE(bus_.startService());
  EXPECT_TRUE(count.waitAbove(after_loss, 5s)) << "no callback after the bus came back";
  r = runTimeUntil(Status::Pass);
  EXPECT_EQ(r.status, Status::Pass) << r.message;
}

TEST_F(DBusProbeTest, NodeServicesUnitsAndRestarts) {
  ASSERT_TRUE(bus_.startService({"--no-timedate", "--unit", "kubelet.service=active/running/1",
                                 "--unit", "crio.service=active/running/0"}));
  // Default units: containerd is not installed here, so CRI-O is the runtime.
  auto r = runServices();
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_NE(r.message.find("crio.service active (running)"), std::string::npos) << r.message;
  EXPECT_EQ(evidence(r, "containerd.service"), "<none>");

  bus_.control("SetUnit", std::string("kubelet.service"), std::string("loaded"),
               std::string("active"), std::string("running"), std::uint32_t{6});
  r = runServices();
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "UnitRestarting") << r.message;

  bus_.control("SetUnit", std::string("kubelet.service"), std::string("loaded"),
               std::string("failed"), std::string("failed"), std::uint32_t{6});
  r = runServices();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "UnitFailed");

  cfg_.set("node-services", "units",
           nlohmann::json::array({"kubelet.service", "cri-dockerd.service"}));
  r = runServices();
  EXPECT_NE(r.message.find("cri-dockerd.service is not installed"), std::string::npos) << r.message;
}

TEST_F(DBusProbeTest, NodeServicesWithoutSystemd) {
  ASSERT_TRUE(bus_.startService({"--no-systemd"}));
  auto t0 = SteadyClock::now();
  auto r = runServices();
  EXPECT_LT(SteadyClock::now() - t0, 1500ms);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "UnitUnreadable");
  EXPECT_NE(r.message.find("org.freedesktop.systemd1"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace nodegate
