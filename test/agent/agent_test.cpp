// Unit tests of the agent: state and damping, trigger routing, probe timeouts, the loop, the
// HTTP router and handlers, the metrics publisher. Probes here are fakes; the HTTP listener test
// binds a real civetweb socket on 127.0.0.1 (ports 19200-19209 belong to this file).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "loop/runner.h"
#include "loop/state.h"
#include "publish/http_server.h"
#include "publish/metrics.h"
#include "publish/page.h"
#include "publish/routes.h"
#include "triggers/kernel_events.h"

namespace nodegate {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

class FakeProbe final : public Probe {
 public:
  using Fn = std::function<CheckResult(int run)>;
  FakeProbe(std::string name, std::uint32_t triggers, Fn fn) : fn_(std::move(fn)) {
    spec_.name = std::move(name);
    spec_.triggers = triggers;
  }
  const ProbeSpec& spec() const override { return spec_; }
  CheckResult run(const ProbeContext& ctx) override {
    {
      std::lock_guard l(mu_);
      started_ = std::chrono::steady_clock::now();
      seen_.reset();
      if (ctx.reads) seen_ = *ctx.reads;
    }
    CheckResult r = fn_(++runs);
    std::lock_guard l(mu_);
    finished_ = std::chrono::steady_clock::now();
    return r;
  }
  std::atomic<int> runs{0};

  // The checks it reads (ProbeSpec::reads).
  FakeProbe& reading(std::vector<std::string> checks) {
    spec_.reads = std::move(checks);
    return *this;
  }
  // What the latest run was handed (nullopt: no reads at all), and when it started and ended.
  std::optional<std::map<std::string, CheckResult>> seen() const {
    std::lock_guard l(mu_);
    return seen_;
  }
  std::chrono::steady_clock::time_point started() const {
    std::lock_guard l(mu_);
    return started_;
  }
  std::chrono::steady_clock::time_point finished() const {
    std::lock_guard l(mu_);
    return finished_;
  }

 private:
  ProbeSpec spec_;
  Fn fn_;
  mutable std::mutex mu_;
  std::optional<std::map<std::string, CheckResult>> seen_;
  std::chrono::steady_clock::time_point started_, finished_;
};

CheckResult result(const std::string& check, Status s, std::string reason = "R") {
  return makeResult(check, s, std::move(reason), "message of " + check,
                    s == Status::Pass ? "" : "do something about " + check);
}

FakeProbe::Fn always(Status s, const std::string& check) {
  return [s, check](int) { return result(check, s); };
}

using TP = std::chrono::system_clock::time_point;
TP at(int seconds) {
  return TP(std::chrono::seconds(1'000'000 + seconds));
}

// ---------------------------------------------------------------- state and damping

TEST(StateStore, FirstResultIsPublishedAtOnceEvenWithDamping) {
  StateStore st({"a"});
  EXPECT_TRUE(st.apply(result("a", Status::Fail), at(0), 3));
  Config cfg;
  cfg.required = {"a"};
  auto snap = st.snapshot(cfg, at(0));
  ASSERT_EQ(snap.checks.size(), 1u);
  EXPECT_EQ(snap.checks[0].result.status, Status::Fail);
  EXPECT_EQ(snap.checks[0].since, at(0));
  EXPECT_TRUE(snap.complete);
  EXPECT_FALSE(snap.gate_open);
  EXPECT_EQ(snap.gate_blockers, std::vector<std::string>{"a"});
}

TEST(StateStore, DampingHoldsANewStatusUntilItRepeats) {
  StateStore st({"a"});
  Config cfg;
  st.apply(result("a", Status::Pass), at(0), 3);
  EXPECT_FALSE(st.apply(result("a", Status::Fail), at(1), 3));
  EXPECT_FALSE(st.apply(result("a", Status::Fail), at(2), 3));
  auto s = st.snapshot(cfg, at(2));
  EXPECT_EQ(s.checks[0].result.status, Status::Pass);
  EXPECT_EQ(s.checks[0].raw_status, Status::Fail);
  EXPECT_EQ(s.checks[0].last_run, at(2));
  EXPECT_TRUE(st.apply(result("a", Status::Fail), at(3), 3));
  s = st.snapshot(cfg, at(3));
  EXPECT_EQ(s.checks[0].result.status, Status::Fail);
  EXPECT_EQ(s.checks[0].since, at(3));
}

TEST(StateStore, AnInterruptedStreakStartsOver) {
  StateStore st({"a"});
  Config cfg;
  st.apply(result("a", Status::Pass), at(0), 2);
  st.apply(result("a", Status::Fail), at(1), 2);
  st.apply(result("a", Status::Pass), at(2), 2);  // flap back: streak reset
  st.apply(result("a", Status::Fail), at(3), 2);
  EXPECT_EQ(st.snapshot(cfg, at(3)).checks[0].result.status, Status::Pass);
  st.apply(result("a", Status::Warn), at(4), 2);  // a different new status: streak restarts
  EXPECT_EQ(st.snapshot(cfg, at(4)).checks[0].result.status, Status::Pass);
  st.apply(result("a", Status::Warn), at(5), 2);
  EXPECT_EQ(st.snapshot(cfg, at(5)).checks[0].result.status, Status::Warn);
  EXPECT_EQ(st.snapshot(cfg, at(5)).checks[0].since, at(5));
}

TEST(StateStore, SinceMovesOnlyOnStatusChangeButDetailsFollow) {
  StateStore st({"a"});
  Config cfg;
  st.apply(result("a", Status::Fail, "One"), at(0), 1);
  auto gen = st.generation();
  EXPECT_FALSE(st.apply(result("a", Status::Fail, "One"), at(5), 1));
  EXPECT_EQ(st.generation(), gen);  // identical: nothing published changed
  EXPECT_TRUE(st.apply(result("a", Status::Fail, "Two"), at(6), 1));
  auto s = st.snapshot(cfg, at(6));
  EXPECT_EQ(s.checks[0].result.reason, "Two");
  EXPECT_EQ(s.checks[0].since, at(0));
  EXPECT_GT(st.generation(), gen);
}

TEST(StateStore, NotRunYetIsIncompleteAndKeepsTheGateClosed) {
  StateStore st({"a", "b"});
  Config cfg;
  cfg.required = {"a"};
  st.apply(result("a", Status::Pass), at(0), 1);
  auto s = st.snapshot(cfg, at(0));
  EXPECT_FALSE(s.complete);
  EXPECT_TRUE(s.gate_open);  // only "a" is required
  cfg.required = {"a", "b"};
  s = st.snapshot(cfg, at(0));
  EXPECT_FALSE(s.gate_open);
  EXPECT_EQ(s.checks[1].result.reason, "NotRunYet");
}

TEST(StateStore, DampingComesFromConfigWithDefaultOne) {
  Config cfg;
  EXPECT_EQ(dampingFor(cfg, "lvm"), 1);
  cfg.damping["lvm"] = 3;
  cfg.damping["bad"] = 0;
  EXPECT_EQ(dampingFor(cfg, "lvm"), 3);
  EXPECT_EQ(dampingFor(cfg, "bad"), 1);
}

// ---------------------------------------------------------------- runner

struct Fixture {
  std::vector<FakeProbe*> probes;
  std::shared_ptr<Runner> runner;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();

  Fixture(std::vector<std::unique_ptr<FakeProbe>> list, Config cfg = {}, RunnerOptions ro = {}) {
    ProbeList pl;
    for (auto& p : list) {
      probes.push_back(p.get());
      pl.push_back(std::move(p));
    }
    ro.registry = registry;
    runner = std::make_shared<Runner>(std::move(pl), HostRoot("/nonexistent"), std::move(cfg), ro);
  }
};

std::vector<std::unique_ptr<FakeProbe>> routingProbes() {
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("misc", kTriggerTimer | kTriggerUdevMisc,
                                          always(Status::Pass, "misc")));
  v.push_back(std::make_unique<FakeProbe>("block", kTriggerTimer | kTriggerUdevBlock,
                                          always(Status::Pass, "block")));
  v.push_back(
      std::make_unique<FakeProbe>("timer-only", kTriggerTimer, always(Status::Pass, "timer-only")));
  return v;
}

TEST(Runner, TriggerRunsOnlyTheProbesListeningToIt) {
  Fixture f(routingProbes());
  f.runner->runCycle(kTriggerUdevMisc);
  EXPECT_EQ(f.probes[0]->runs, 1);
  EXPECT_EQ(f.probes[1]->runs, 0);
  EXPECT_EQ(f.probes[2]->runs, 0);
  f.runner->runCycle(kTriggerUdevBlock | kTriggerUdevMisc);
  EXPECT_EQ(f.probes[0]->runs, 2);
  EXPECT_EQ(f.probes[1]->runs, 1);
  EXPECT_EQ(f.probes[2]->runs, 0);
  EXPECT_FALSE(f.runner->snapshot()->complete);
  f.runner->runCycle(kTriggerTimer);  // the resync runs everything
  EXPECT_EQ(f.probes[2]->runs, 1);
  EXPECT_TRUE(f.runner->snapshot()->complete);
  f.runner->runCycle(kTriggerDns);  // nobody listens: no run, no cycle counted
  EXPECT_EQ(f.probes[0]->runs + f.probes[1]->runs + f.probes[2]->runs, 6);
}

int threadsOfThisProcess() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Between cycles the agent keeps no probe threads: each run's thread ends with the run.
TEST(Runner, NoProbeThreadOutlivesItsRun) {
  // The probe threads of the tests before this one end on their own, a moment after their runs
  // (detached): count from when none is left (the count held for 100 ms), or a loaded machine
  // makes this test see them leave.
  int before = threadsOfThisProcess();
  for (int i = 0, steady = 0; i < 300 && steady < 10; i++) {
    std::this_thread::sleep_for(10ms);
    const int n = threadsOfThisProcess();
    steady = n == before ? steady + 1 : 0;
    before = n;
  }
  Fixture f(routingProbes());
  EXPECT_EQ(threadsOfThisProcess(), before);
  f.runner->runCycle(kTriggerTimer);
  EXPECT_EQ(f.probes[0]->runs + f.probes[1]->runs + f.probes[2]->runs, 3);
  int now = threadsOfThisProcess();
  for (int i = 0; i < 100 && now != before; i++) {
    std::this_thread::sleep_for(10ms);
    now = threadsOfThisProcess();
  }
  EXPECT_EQ(now, before);
}

// The counter's sample with label scope=`scope`; -1 when there is none.
double counterValue(prometheus::Registry& reg, const std::string& name,
                    const std::string& scope = "full") {
  for (const auto& fam : reg.Collect())
    if (fam.name == name)
      for (const auto& m : fam.metric)
        for (const auto& l : m.label)
          if (l.name == "scope" && l.value == scope) return m.counter.value;
  return -1;
}

double threadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A cycle's wall time counts a probe that waits; its CPU time counts the probe that computes,
// on its own thread, and not the one that waits (docs/benchmarks/density.md reads both).
TEST(Runner, CountsEachCyclesWallAndCpuTime) {
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("spins", kTriggerTimer, [](int) {
    const double start = threadCpu();
    while (threadCpu() - start < 0.02) {
    }
    return result("spins", Status::Pass);
  }));
  v.push_back(std::make_unique<FakeProbe>("waits", kTriggerTimer | kTriggerUdevMisc, [](int) {
    std::this_thread::sleep_for(60ms);
    return result("waits", Status::Pass);
  }));
  Fixture f(std::move(v));
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycle_seconds_total"), 0);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycle_cpu_seconds_total"), 0);
  f.runner->runCycle(Runner::kRunAll);
  const double wall = counterValue(*f.registry, "nodegate_agent_cycle_seconds_total");
  const double cpu = counterValue(*f.registry, "nodegate_agent_cycle_cpu_seconds_total");
  EXPECT_GE(wall, 0.06);
  EXPECT_GE(cpu, 0.02);
  EXPECT_LT(cpu, 0.06);  // the sleeping probe's 60 ms are not CPU
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycles_total"), 1);
  f.runner->runCycle(kTriggerDns);  // nothing listens: no cycle, nothing added
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycle_seconds_total"), wall);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycle_cpu_seconds_total"), cpu);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycles_total", "triggered"), 0);
  // A cycle an event asked for (only "waits" listens) counts under its own scope.
  f.runner->runCycle(kTriggerUdevMisc);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycles_total", "triggered"), 1);
  EXPECT_GE(counterValue(*f.registry, "nodegate_agent_cycle_seconds_total", "triggered"), 0.06);
  EXPECT_LT(counterValue(*f.registry, "nodegate_agent_cycle_cpu_seconds_total", "triggered"), 0.02);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycles_total"), 1);
  EXPECT_EQ(counterValue(*f.registry, "nodegate_agent_cycle_seconds_total"), wall);
}

Result<Options> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "nodegate");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parseOptions(static_cast<int>(argv.size()), argv.data());
}

// #22 item 11: every numeric and address flag has bounds, and the error names flag and value.
TEST(Options, NumericAndAddressFlagsAreBounded) {
  for (const char* v : {"nan", "inf", "-inf", "1e308", "1e-9", "0", "-3", "0.4", "86401", "2x"}) {
    auto o = parse({"agent", "--resync", v});
    ASSERT_FALSE(o.ok()) << v;
    EXPECT_THAT(o.error().message,
                HasSubstr(std::string("invalid value \"") + v + "\" for --resync"));
  }
  EXPECT_EQ(parse({"agent", "--resync", "0.5"})->resync_seconds, 0.5);
  EXPECT_EQ(parse({"agent", "--resync=86400"})->resync_seconds, 86400);
  for (const char* v : {"999.1.1.1:9810", "231.1.1.1.1:80", "127.0.0.1:0", "127.0.0.1:65536",
                        "127.0.0.1:", "host:80", "[::1]", "[::1]:", "[nope]:80", "1.2.3:4"}) {
    auto o = parse({"agent", "--listen", v});
    ASSERT_FALSE(o.ok()) << v;
    EXPECT_THAT(o.error().message,
                HasSubstr(std::string("invalid value \"") + v + "\" for --listen"));
  }
  for (const char* v : {"0.0.0.0:9810", "127.0.0.1:1", ":9810", "9810", "[::1]:65535"})
    EXPECT_TRUE(parse({"agent", "--listen", v}).ok()) << v;
  EXPECT_TRUE(parse({"agent", "--debug-listen", ""}).ok());  // off
  EXPECT_FALSE(parse({"agent", "--debug-listen", "256.0.0.1:9811"}).ok());
  for (const char* v : {"0", "8", "100", "131072", "-512", "512k", "", " 512", "1e3"}) {
    auto o = parse({"agent", "--dns-ring-kib", v});
    ASSERT_FALSE(o.ok()) << v;
    EXPECT_THAT(o.error().message,
                HasSubstr(std::string("invalid value \"") + v + "\" for --dns-ring-kib"));
  }
  EXPECT_EQ(parse({"agent"})->dns_ring_kib, 2048u);
  EXPECT_EQ(parse({"agent", "--dns-ring-kib", "16"})->dns_ring_kib, 16u);
  EXPECT_EQ(parse({"agent", "--dns-ring-kib=65536"})->dns_ring_kib, 65536u);
}

TEST(Runner, ConfigAddsTriggersToAProbe) {
  Config cfg;
  // An unknown name ("bogus") is now a config error (ConfigSchema, test/probes/config_test.cpp).
  cfg.set("timer-only", "triggers", nlohmann::json::array({"netlink"}));
  Fixture f(routingProbes(), cfg);
  f.runner->runCycle(kTriggerNetLink);
  EXPECT_EQ(f.probes[2]->runs, 1);
  EXPECT_EQ(f.probes[0]->runs, 0);
  EXPECT_EQ(parseTriggerName("udev-block"), kTriggerUdevBlock);
  EXPECT_EQ(triggerName(kTriggerDBusTime), "dbus-time");
  EXPECT_FALSE(parseTriggerName("nope"));
}

TEST(Runner, AHangingProbeBecomesUnknownAndTheOthersGoOn) {
  std::atomic<bool> release{false};
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("hang", kTriggerTimer, [&](int run) {
    if (run == 1)
      while (!release) std::this_thread::sleep_for(5ms);
    return result("hang", Status::Pass);
  }));
  v.push_back(std::make_unique<FakeProbe>("quick", kTriggerTimer, always(Status::Pass, "quick")));
  Config cfg;
  cfg.set("hang", "timeout_seconds", 0.2);
  Fixture f(std::move(v), cfg);

  auto t0 = std::chrono::steady_clock::now();
  f.runner->runCycle(kTriggerTimer);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 2s);
  auto s = f.runner->snapshot();
  EXPECT_EQ(s->find("hang")->result.status, Status::Unknown);
  EXPECT_EQ(s->find("hang")->result.reason, "ProbeTimeout");
  EXPECT_THAT(s->find("hang")->result.hint, HasSubstr("timeout_seconds"));
  EXPECT_EQ(s->find("quick")->result.status, Status::Pass);

  // Still stuck: not started a second time, still UNKNOWN.
  f.runner->runCycle(kTriggerTimer);
  EXPECT_EQ(f.probes[0]->runs, 1);
  EXPECT_THAT(f.runner->snapshot()->find("hang")->result.message, HasSubstr("has not returned"));

  release = true;
  std::this_thread::sleep_for(50ms);
  f.runner->runCycle(kTriggerTimer);
  EXPECT_EQ(f.probes[0]->runs, 2);
  EXPECT_EQ(f.runner->snapshot()->find("hang")->result.status, Status::Pass);
  EXPECT_THAT(serializeMetrics(*f.registry),
              HasSubstr("nodegate_agent_probe_timeouts_total{check=\"hang\"} 1"));
}

TEST(Runner, AThrowingProbeBecomesUnknown) {
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>(
      "boom", kTriggerTimer, [](int) -> CheckResult { throw std::runtime_error("kaput"); }));
  Fixture f(std::move(v));
  f.runner->runCycle(kTriggerTimer);
  const auto* st = f.runner->snapshot()->find("boom");
  EXPECT_EQ(st->result.status, Status::Unknown);
  EXPECT_EQ(st->result.reason, "ProbeError");
}

// ---------------------------------------------------------------- probes that read other checks

// A probe that reads others runs after them, with their results of the same cycle, whatever the
// registry order and however few threads take the runs (the agent: one each; `nodegate check`'s
// runOnce: a few; one thread would deadlock if the reader were taken first and waited).
TEST(Runner, AReaderRunsAfterTheChecksItReadsWithTheirResults) {
  for (std::size_t threads : {0, 1, 3}) {
    SCOPED_TRACE("max_parallel " + std::to_string(threads));
    std::vector<std::unique_ptr<FakeProbe>> v;
    v.push_back(
        std::make_unique<FakeProbe>("reader", kTriggerTimer, always(Status::Pass, "reader")));
    v.back()->reading({"slow", "quick"});
    v.push_back(std::make_unique<FakeProbe>("slow", kTriggerTimer, [](int) {
      std::this_thread::sleep_for(100ms);
      return result("slow", Status::Fail, "SlowFailed");
    }));
    v.push_back(std::make_unique<FakeProbe>("quick", kTriggerTimer, always(Status::Warn, "quick")));
    RunnerOptions ro;
    ro.max_parallel = threads;
    Fixture f(std::move(v), {}, ro);
    auto results = f.runner->runOnce();
    ASSERT_EQ(results.size(), 3u);
    EXPECT_EQ(results[0].check, "reader");  // registry order, not the order they ran in
    EXPECT_GE(f.probes[0]->started(), f.probes[1]->finished());
    EXPECT_GE(f.probes[0]->started(), f.probes[2]->finished());
    auto seen = f.probes[0]->seen();
    ASSERT_TRUE(seen);
    ASSERT_EQ(seen->size(), 2u);
    EXPECT_EQ(seen->at("slow").reason, "SlowFailed");
    EXPECT_EQ(seen->at("quick").status, Status::Warn);
    EXPECT_FALSE(f.probes[1]->seen());  // a probe that reads nothing is handed nothing

    f.runner->runCycle(kTriggerTimer);  // the loop's cycles go the same way
    EXPECT_EQ(f.probes[0]->runs, 2);
    EXPECT_GE(f.probes[0]->started(), f.probes[1]->finished());
    EXPECT_EQ(f.probes[0]->seen()->at("slow").reason, "SlowFailed");
  }
}

// A dependency that misses its deadline does not hold its reader: the reader runs when the
// deadline passes and sees the UNKNOWN the cycle publishes; the next cycle, with the dependency
// still stuck, it sees that too.
TEST(Runner, AReaderOfAHangingCheckRunsAtItsDeadlineAndSeesUnknown) {
  // Shared with the abandoned run's thread, which may outlive the test.
  auto release = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("hang", kTriggerTimer, [release](int) {
    while (!*release) std::this_thread::sleep_for(5ms);
    return result("hang", Status::Pass);
  }));
  v.push_back(std::make_unique<FakeProbe>("reader", kTriggerTimer, always(Status::Pass, "reader")));
  v.back()->reading({"hang"});
  Config cfg;
  cfg.set("hang", "timeout_seconds", 0.2);
  RunnerOptions ro;
  ro.max_parallel = 1;  // the only thread is stuck in "hang": the reader needs another
  Fixture f(std::move(v), cfg, ro);

  auto t0 = std::chrono::steady_clock::now();
  f.runner->runCycle(kTriggerTimer);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(f.probes[1]->runs, 1);
  auto seen = f.probes[1]->seen();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->at("hang").status, Status::Unknown);
  EXPECT_EQ(seen->at("hang").reason, "ProbeTimeout");
  EXPECT_EQ(f.runner->snapshot()->find("reader")->result.status, Status::Pass);

  f.runner->runCycle(kTriggerTimer);
  EXPECT_EQ(f.probes[0]->runs, 1);  // still stuck, not started again
  EXPECT_EQ(f.probes[1]->runs, 2);
  EXPECT_THAT(f.probes[1]->seen()->at("hang").message, HasSubstr("has not returned"));
  *release = true;
  // Its thread ends before the next test counts threads.
  for (int i = 0; i < 200 && f.probes[0]->finished() == std::chrono::steady_clock::time_point{};
       ++i)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(20ms);  // from the probe's return to the thread's exit
}

// A cycle that runs a check runs its readers too; one that runs only the reader hands it the
// check's latest run (undamped, as a run of the same cycle would be), and nothing for a check
// that never ran.
TEST(Runner, AReaderOutsideItsChecksCycleGetsTheirLatestRun) {
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("misc", kTriggerTimer | kTriggerUdevMisc, [](int run) {
    return result("misc", run == 1 ? Status::Pass : Status::Fail, "Run" + std::to_string(run));
  }));
  v.push_back(std::make_unique<FakeProbe>("reader", kTriggerTimer | kTriggerDns,
                                          always(Status::Pass, "reader")));
  v.back()->reading({"misc", "not-registered"});
  Config cfg;
  cfg.damping["misc"] = 3;
  Fixture f(std::move(v), cfg);

  f.runner->runCycle(kTriggerDns);  // misc has never run
  EXPECT_EQ(f.probes[0]->runs, 0);
  ASSERT_EQ(f.probes[1]->runs, 1);
  EXPECT_TRUE(f.probes[1]->seen()->empty());

  f.runner->runCycle(kTriggerTimer);
  EXPECT_EQ(f.probes[1]->seen()->at("misc").reason, "Run1");

  f.runner->runCycle(kTriggerUdevMisc);  // misc runs, so its reader runs with it
  EXPECT_EQ(f.probes[0]->runs, 2);
  EXPECT_EQ(f.probes[1]->runs, 3);
  EXPECT_EQ(f.probes[1]->seen()->at("misc").reason, "Run2");

  f.runner->runCycle(kTriggerDns);  // only the reader: misc's latest run
  EXPECT_EQ(f.probes[0]->runs, 2);
  EXPECT_EQ(f.probes[1]->runs, 4);
  EXPECT_EQ(f.probes[1]->seen()->at("misc").status, Status::Fail);
  EXPECT_EQ(f.runner->snapshot()->find("misc")->result.status, Status::Pass);  // damped
  EXPECT_FALSE(f.probes[1]->seen()->count("not-registered"));
}

TEST(Runner, AProbeThatReadsItselfIsRefused) {
  for (auto chain :
       {std::vector<std::pair<std::string, std::string>>{{"a", "a"}},
        std::vector<std::pair<std::string, std::string>>{{"a", "b"}, {"b", "c"}, {"c", "a"}}}) {
    std::vector<std::unique_ptr<FakeProbe>> v;
    for (const auto& [name, reads] : chain) {
      v.push_back(std::make_unique<FakeProbe>(name, kTriggerTimer, always(Status::Pass, name)));
      v.back()->reading({reads});
    }
    try {
      Fixture f(std::move(v));
      ADD_FAILURE() << "a cycle of reads was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("reads its own result"));
    }
  }
}

struct CountingPublisher final : Publisher {
  std::atomic<int> calls{0};
  std::atomic<bool> complete{false};
  void publish(const Snapshot& s) override {
    ++calls;
    complete = s.complete;
  }
};

TEST(Runner, LoopRunsEverythingFirstThenReactsToTriggersFromOtherThreads) {
  RunnerOptions ro;
  ro.resync = std::chrono::duration<double>(3600);
  Fixture f(routingProbes(), {}, ro);
  auto pub = std::make_shared<CountingPublisher>();
  f.runner->addPublisher(pub);
  f.runner->start();
  auto wait = [&](auto pred) {
    auto end = std::chrono::steady_clock::now() + 3s;
    while (!pred() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(2ms);
    return pred();
  };
  ASSERT_TRUE(wait([&] { return pub->complete.load(); }));
  EXPECT_EQ(f.probes[2]->runs, 1);

  auto t0 = std::chrono::steady_clock::now();
  std::thread([&] { f.runner->trigger(kTriggerUdevBlock); }).join();
  ASSERT_TRUE(wait([&] { return f.probes[1]->runs.load() == 2; }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_EQ(f.probes[0]->runs, 1);
  EXPECT_EQ(f.probes[2]->runs, 1);
  EXPECT_THAT(serializeMetrics(*f.registry),
              HasSubstr("nodegate_agent_triggers_total{trigger=\"udev-block\"} 1"));
  f.runner->stop();
}

TEST(Runner, TheTimerResyncsEverything) {
  RunnerOptions ro;
  ro.resync = std::chrono::duration<double>(0.1);
  Fixture f(routingProbes(), {}, ro);
  f.runner->start();
  std::this_thread::sleep_for(600ms);
  f.runner->stop();
  EXPECT_GE(f.probes[2]->runs, 3);
}

TEST(Runner, StopsWithinASecondEvenWithAProbeStuck) {
  std::vector<std::unique_ptr<FakeProbe>> v;
  auto gate = std::make_shared<std::atomic<bool>>(false);
  v.push_back(std::make_unique<FakeProbe>("stuck", kTriggerTimer, [gate](int) {
    while (!*gate) std::this_thread::sleep_for(5ms);
    return result("stuck", Status::Pass);
  }));
  Fixture f(std::move(v));
  f.runner->start();
  std::this_thread::sleep_for(100ms);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(f.runner->stop(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  *gate = true;  // let the abandoned thread finish; it holds its own state
  std::this_thread::sleep_for(50ms);
}

TEST(Runner, ReloadAppliesTheNewPolicyAndRerunsEverything) {
  RunnerOptions ro;
  ro.resync = std::chrono::duration<double>(3600);
  Config cfg;
  cfg.required = {"misc"};
  Fixture f(routingProbes(), cfg, ro);
  f.runner->start();
  auto end = std::chrono::steady_clock::now() + 3s;
  while (!f.runner->snapshot()->complete && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(2ms);
  EXPECT_TRUE(f.runner->snapshot()->gate_open);
  Config strict;
  strict.required = {"misc", "missing-check"};
  f.runner->reload(strict);
  end = std::chrono::steady_clock::now() + 3s;
  while (f.runner->snapshot()->gate_open && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(2ms);
  EXPECT_FALSE(f.runner->snapshot()->gate_open);
  EXPECT_EQ(f.probes[2]->runs, 2);
  f.runner->stop();
}

// ---------------------------------------------------------------- router

HttpRequest get(std::string path, std::string method = "GET") {
  HttpRequest r;
  r.method = std::move(method);
  auto q = path.find('?');
  if (q != std::string::npos) {
    r.query = path.substr(q + 1);
    path.resize(q);
  }
  r.path = std::move(path);
  return r;
}

TEST(HttpRouter, UnknownPathIs404WrongMethodIs405WithAllow) {
  HttpRouter r;
  r.handle("/x", [](const HttpRequest&) { return HttpResponse::text(200, "x"); });
  r.handle("/post", [](const HttpRequest& q) { return HttpResponse::text(200, q.body); }, {"POST"});
  EXPECT_EQ(r.dispatch(get("/x")).status, 200);
  EXPECT_EQ(r.dispatch(get("/x", "HEAD")).status, 200);
  EXPECT_EQ(r.dispatch(get("/nope")).status, 404);
  EXPECT_EQ(r.dispatch(get("/x/")).status, 404);
  auto resp = r.dispatch(get("/x", "DELETE"));
  EXPECT_EQ(resp.status, 405);
  ASSERT_EQ(resp.headers.size(), 1u);
  EXPECT_EQ(resp.headers[0].first, "Allow");
  EXPECT_EQ(resp.headers[0].second, "GET, HEAD");
  EXPECT_EQ(r.dispatch(get("/post")).status, 405);
}

TEST(HttpRouter, LongestPrefixWinsAndExactBeatsPrefix) {
  HttpRouter r;
  r.handlePrefix("/api/", [](const HttpRequest&) { return HttpResponse::text(200, "api"); });
  r.handlePrefix("/api/v1/dns/", [](const HttpRequest&) { return HttpResponse::text(200, "dns"); });
  r.handle("/api/v1/dns/traces",
           [](const HttpRequest&) { return HttpResponse::text(200, "exact"); });
  EXPECT_EQ(r.dispatch(get("/api/v1/other")).body, "api");
  EXPECT_EQ(r.dispatch(get("/api/v1/dns/x")).body, "dns");
  EXPECT_EQ(r.dispatch(get("/api/v1/dns/traces")).body, "exact");
  EXPECT_EQ(r.dispatch(get("/apix")).status, 404);
}

TEST(HttpRouter, AThrowingHandlerIs500NotACrash) {
  HttpRouter r;
  r.handle("/t", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("bad"); });
  EXPECT_EQ(r.dispatch(get("/t")).status, 500);
}

TEST(HttpHelpers, QueryAndEscaping) {
  auto q = parseQuery("a=1&b=x%20y+z&flag&bad=%zz&a=2");
  EXPECT_EQ(q["a"], "2");
  EXPECT_EQ(q["b"], "x y z");
  EXPECT_EQ(q.count("flag"), 1u);
  EXPECT_EQ(q["bad"], "%zz");
  EXPECT_EQ(htmlEscape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

// ---------------------------------------------------------------- handlers

struct Served {
  Fixture f;
  PageSections sections;
  HttpRouter core, debug;
  AgentEndpoints ep;
  Served(std::vector<std::unique_ptr<FakeProbe>> probes, Config cfg, RunnerOptions ro = {})
      : f(std::move(probes), cfg, ro) {
    f.runner->addPublisher(std::make_shared<MetricsPublisher>(f.registry));
    ep.runner = f.runner;
    ep.registry = f.registry;
    ep.sections = &sections;
    ep.page_info = PageInfo{"node-a", "1.2.3", 10, "https://runbooks.example/checks/"};
    registerCoreRoutes(core, ep);
    registerDebugRoutes(debug, ep);
  }
};

std::vector<std::unique_ptr<FakeProbe>> pageProbes() {
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("kvm-device", kTriggerTimer, [](int) {
    auto r = makeResult("kvm-device", Status::Fail, "DeviceMissing", "no /dev/kvm <here>",
                        "load kvm_intel: modprobe kvm_intel");
    r.evidence.push_back({"<dev>/kvm", "ENOENT"});
    return r;
  }));
  v.push_back(std::make_unique<FakeProbe>("tun", kTriggerTimer, [](int) {
    auto r = result("tun", Status::Pass);
    r.metrics.push_back({"nodegate_test_bytes", "Test gauge.", {{"dev", "a"}}, 42});
    return r;
  }));
  return v;
}

TEST(Handlers, ReadyzAfterTheFirstCycleAndApiShapes) {
  Config cfg;
  cfg.required = {"kvm-device", "tun"};
  Served s(pageProbes(), cfg);
  EXPECT_EQ(s.core.dispatch(get("/readyz")).status, 503);
  EXPECT_EQ(s.core.dispatch(get("/healthz")).status, 200);        // grace: 3 resyncs from start
  EXPECT_EQ(s.core.dispatch(get("/api/v1/checks")).status, 404);  // not on the metrics listener
  s.f.runner->runCycle(Runner::kRunAll);
  EXPECT_EQ(s.core.dispatch(get("/readyz")).status, 200);

  auto api = s.debug.dispatch(get("/api/v1/checks"));
  ASSERT_EQ(api.status, 200);
  EXPECT_EQ(api.content_type, "application/json");
  auto j = nlohmann::json::parse(api.body);
  EXPECT_EQ(j["gate"]["open"], false);
  EXPECT_EQ(j["gate"]["blockers"], nlohmann::json::array({"kvm-device"}));
  EXPECT_EQ(j["complete"], true);
  ASSERT_EQ(j["checks"].size(), 2u);
  auto one = nlohmann::json::parse(s.debug.dispatch(get("/api/v1/checks/kvm-device")).body);
  EXPECT_EQ(one["status"], "FAIL");
  EXPECT_EQ(one["hint"], "load kvm_intel: modprobe kvm_intel");
  EXPECT_TRUE(one["since"].is_string());
  EXPECT_TRUE(one["last_run"].is_string());
  EXPECT_TRUE(one.contains("duration_seconds"));
  EXPECT_EQ(s.debug.dispatch(get("/api/v1/checks/nope")).status, 404);
  // The name is decoded and compared whole: a NUL does not cut it short.
  EXPECT_EQ(s.debug.dispatch(get("/api/v1/checks/kvm-device%00")).status, 404);
  EXPECT_EQ(s.debug.dispatch(get("/api/v1/checks/kvm-device%00x")).status, 404);
  EXPECT_EQ(s.debug.dispatch(get("/api/v1/checks/kvm%2Ddevice")).status, 200);
  EXPECT_EQ(s.debug.dispatch(get("/api/v1/checks", "POST")).status, 405);
}

TEST(Handlers, HealthzFailsWhenNoCycleWithinThreeResyncs) {
  RunnerOptions ro;
  ro.resync = std::chrono::duration<double>(0.05);
  Served s(pageProbes(), {}, ro);
  s.f.runner->runCycle(Runner::kRunAll);
  EXPECT_EQ(s.core.dispatch(get("/healthz")).status, 200);
  std::this_thread::sleep_for(200ms);  // > 3 x 50 ms without a cycle: the loop is not running
  auto r = s.core.dispatch(get("/healthz"));
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("no probe cycle"));
}

TEST(Handlers, PageShowsVerdictFailingChecksFirstWithHintsAndSections) {
  Config cfg;
  cfg.required = {"kvm-device", "tun"};
  Served s(pageProbes(), cfg);
  EXPECT_THAT(s.debug.dispatch(get("/")).body, HasSubstr("Starting"));
  s.sections.add("dns", "Guest DNS",
                 [](const Snapshot&) { return std::string("<p id=\"dns-x\">ok</p>"); });
  s.sections.add("broken", "Broken",
                 [](const Snapshot&) -> std::string { throw std::runtime_error("x"); });
  s.f.runner->runCycle(Runner::kRunAll);
  auto page = s.debug.dispatch(get("/"));
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  const std::string& b = page.body;
  EXPECT_THAT(b, HasSubstr("<meta http-equiv=\"refresh\""));
  EXPECT_THAT(b, HasSubstr("VM gate CLOSED"));
  EXPECT_THAT(b, HasSubstr("load kvm_intel: modprobe kvm_intel"));
  EXPECT_THAT(b, HasSubstr("no /dev/kvm &lt;here&gt;"));  // escaped
  EXPECT_THAT(b, Not(HasSubstr("<here>")));
  EXPECT_THAT(b, HasSubstr("id=\"dns-x\""));
  EXPECT_THAT(b, HasSubstr("this section failed to render"));
  EXPECT_LT(b.find("data-check=\"kvm-device\""), b.find("data-check=\"tun\""));  // failing first
  EXPECT_THAT(b, Not(HasSubstr("<script")));
  // No external assets: the only absolute URLs are the runbook links.
  EXPECT_THAT(b, Not(HasSubstr("http://")));
  std::size_t pos = 0, links = 0;
  while ((pos = b.find("https://", pos)) != std::string::npos) {
    EXPECT_EQ(b.compare(pos - 6, 6, "href=\""), 0) << b.substr(pos - 20, 60);
    EXPECT_EQ(b.compare(pos, 32, "https://runbooks.example/checks/"), 0);
    ++links;
    ++pos;
  }
  EXPECT_EQ(links, 2u);  // one per check
  EXPECT_THAT(b, HasSubstr("href=\"https://runbooks.example/checks/kvm-device.md\""));
  // The blocker is named with its reason in the verdict and marked on its card.
  EXPECT_THAT(b, HasSubstr("<code>kvm-device</code></a> FAIL DeviceMissing"));
  EXPECT_THAT(b, HasSubstr("BLOCKS THE GATE"));
  EXPECT_THAT(b, HasSubstr("first seen when the agent started"));
}

TEST(Handlers, SinceIsWhenTheStatusBeganAndHistoryListsTheChanges) {
  int phase = 0;
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("time-sync", kTriggerTimer, [&](int) {
    if (phase == 0) {
      auto r = makeResult("time-sync", Status::Fail, "NotSynchronized", "unsynchronised 17 min",
                          "fix ntp");
      r.held_for = std::chrono::minutes(17);
      return r;
    }
    if (phase == 1)
      return makeResult("time-sync", Status::Fail, "NotSynchronized", "unsynchronised 18 min",
                        "fix ntp");
    return result("time-sync", Status::Pass);
  }));
  Config cfg;
  cfg.required = {"time-sync"};
  Served s(std::move(v), cfg);
  s.f.runner->runCycle(Runner::kRunAll);
  auto j = nlohmann::json::parse(s.debug.dispatch(get("/api/v1/checks/time-sync")).body);
  EXPECT_EQ(j["since_source"], "probe");
  auto since = j["since"].get<std::string>();
  EXPECT_EQ(j["required"], true);
  EXPECT_EQ(j["blocks_gate"], true);
  EXPECT_EQ(j["runbook_url"], "https://runbooks.example/checks/time-sync.md");
  ASSERT_EQ(j["history"].size(), 1u);
  EXPECT_TRUE(j["history"][0]["from"].is_null());
  EXPECT_EQ(j["history"][0]["to"], "FAIL");
  // The probe dates the FAIL 17 minutes back: "since" is not the agent's first run.
  auto taken = nlohmann::json::parse(s.debug.dispatch(get("/api/v1/checks")).body)["taken"];
  EXPECT_LT(since,
            taken.get<std::string>().substr(0, 14) + "99");  // earlier the same day or before
  phase = 1;  // only the message moves: no new transition, since unchanged
  s.f.runner->runCycle(Runner::kRunAll);
  j = nlohmann::json::parse(s.debug.dispatch(get("/api/v1/checks/time-sync")).body);
  EXPECT_EQ(j["since"], since);
  EXPECT_EQ(j["history"].size(), 1u);
  phase = 2;
  s.f.runner->runCycle(Runner::kRunAll);
  j = nlohmann::json::parse(s.debug.dispatch(get("/api/v1/checks/time-sync")).body);
  EXPECT_EQ(j["since_source"], "transition");
  EXPECT_NE(j["since"], since);
  ASSERT_EQ(j["history"].size(), 2u);
  EXPECT_EQ(j["history"][1]["from"], "FAIL");
  EXPECT_EQ(j["history"][1]["to"], "PASS");
  EXPECT_EQ(j["blocks_gate"], false);
  std::string page = s.debug.dispatch(get("/")).body;
  EXPECT_THAT(page, HasSubstr("last 2 changes"));
}

TEST(Handlers, MetricsCarryChecksGateBuildAndDomainGaugesAndDropStaleSeries) {
  int phase = 0;
  std::vector<std::unique_ptr<FakeProbe>> v;
  v.push_back(std::make_unique<FakeProbe>("lvm", kTriggerTimer, [&](int) {
    auto r = result("lvm", Status::Pass);
    r.metrics.push_back({"nodegate_lvm_vg_free_bytes", "Free bytes.", {{"vg", "vg0"}}, 100});
    if (phase == 0)
      r.metrics.push_back({"nodegate_lvm_vg_free_bytes", "Free bytes.", {{"vg", "vg1"}}, 7});
    if (phase == 0) r.metrics.push_back({"nodegate_lvm_other", "Other.", {}, 1});
    r.metrics.push_back({"bad name!", "x", {}, 1});
    return r;
  }));
  Config cfg;
  cfg.required = {"lvm"};
  Served s(std::move(v), cfg);
  s.f.runner->runCycle(Runner::kRunAll);
  std::string m = s.core.dispatch(get("/metrics")).body;
  EXPECT_THAT(m, HasSubstr("nodegate_check_success{check=\"lvm\"} 1"));
  EXPECT_THAT(m, HasSubstr("nodegate_check_status{check=\"lvm\",status=\"PASS\"} 1"));
  EXPECT_THAT(m, HasSubstr("nodegate_check_status{check=\"lvm\",status=\"FAIL\"} 0"));
  EXPECT_THAT(m, HasSubstr("nodegate_check_duration_seconds{check=\"lvm\"}"));
  EXPECT_THAT(m, HasSubstr("nodegate_check_last_run_timestamp_seconds{check=\"lvm\"}"));
  EXPECT_THAT(m, HasSubstr("nodegate_gate_open 1"));
  EXPECT_THAT(m, HasSubstr("nodegate_build_info{version=\""));
  EXPECT_THAT(m, HasSubstr("nodegate_lvm_vg_free_bytes{vg=\"vg1\"} 7"));
  EXPECT_THAT(m, HasSubstr("nodegate_lvm_other 1"));
  EXPECT_THAT(m, Not(HasSubstr("bad name")));
  phase = 1;
  s.f.runner->runCycle(Runner::kRunAll);
  m = s.core.dispatch(get("/metrics")).body;
  EXPECT_THAT(m, HasSubstr("nodegate_lvm_vg_free_bytes{vg=\"vg0\"} 100"));
  EXPECT_THAT(m, Not(HasSubstr("vg=\"vg1\"")));
  EXPECT_THAT(m, Not(HasSubstr("nodegate_lvm_other")));  // whole family gone, HELP included
  phase = 0;
  s.f.runner->runCycle(Runner::kRunAll);  // and it comes back
  EXPECT_THAT(s.core.dispatch(get("/metrics")).body, HasSubstr("nodegate_lvm_other 1"));
}

TEST(Handlers, CheckInfoSaysReasonAndRequiredAndFollowsAReload) {
  Config cfg;
  cfg.required = {"kvm-device"};
  Served s(pageProbes(), cfg);
  s.f.runner->runCycle(Runner::kRunAll);
  std::string m = s.core.dispatch(get("/metrics")).body;
  EXPECT_THAT(m, HasSubstr("nodegate_check_info{check=\"kvm-device\",reason=\"DeviceMissing\","
                           "required=\"true\",status=\"FAIL\"} 1"));
  EXPECT_THAT(m, HasSubstr("nodegate_check_info{check=\"tun\",reason=\"R\",required=\"false\","
                           "status=\"PASS\"} 1"));
  // Counters exist at 0 before anything happened, so increase() sees the first event.
  EXPECT_THAT(m, HasSubstr("nodegate_agent_probe_timeouts_total{check=\"tun\"} 0"));
  std::string page = s.debug.dispatch(get("/")).body;
  auto tunCard = page.find("data-check=\"tun\"");
  ASSERT_NE(tunCard, std::string::npos);
  EXPECT_EQ(page.find("REQUIRED", tunCard), std::string::npos);

  // SIGHUP: the new policy reaches the metrics and the page's REQUIRED badges.
  Config now = cfg;
  now.required = {"kvm-device", "tun"};
  s.f.runner->reload(now);
  s.f.runner->runCycle(Runner::kRunAll);
  m = s.core.dispatch(get("/metrics")).body;
  EXPECT_THAT(m, HasSubstr("nodegate_check_info{check=\"tun\",reason=\"R\",required=\"true\","
                           "status=\"PASS\"} 1"));
  EXPECT_THAT(m, Not(HasSubstr("required=\"false\"")));  // the old series is gone
  page = s.debug.dispatch(get("/")).body;
  tunCard = page.find("data-check=\"tun\"");
  ASSERT_NE(tunCard, std::string::npos);
  EXPECT_NE(page.find("REQUIRED", tunCard), std::string::npos);
}

TEST(ProcessMetrics, ReadsThisProcess) {
  auto st = readProcessStats(HostRoot("/"));
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_GT(st->resident_bytes, 1e6);
  EXPECT_GT(st->virtual_bytes, st->resident_bytes);
  EXPECT_GE(st->open_fds, 3);
  EXPECT_GT(st->max_fds, st->open_fds);
  auto now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LT(st->start_time_seconds, now + 1);
  EXPECT_GT(st->start_time_seconds, now - 3600);
  EXPECT_FALSE(readProcessStats(HostRoot("/nonexistent")).ok());
}

TEST(KernelEvents, SubsystemsMapToTriggers) {
  EXPECT_EQ(triggerForUevent({"misc", "vhost-net", "add"}), kTriggerUdevMisc);
  EXPECT_EQ(triggerForUevent({"block", "sda", "change"}), kTriggerUdevBlock);
  EXPECT_EQ(triggerForUevent({"net", "tap0", "add"}), kTriggerNetLink);
  EXPECT_EQ(triggerForUevent({"usb", "1-1", "add"}), 0u);
  EXPECT_EQ(triggerForUevent({}), 0u);
}

// KVM's notice of a VM created or destroyed is not a device change: kvm-device creating its test
// VM must not re-trigger itself. The device itself coming or going, or a plain "change" written
// to its uevent file, still triggers.
TEST(KernelEvents, KvmVmLifecycleTriggersNothing) {
  EXPECT_EQ(triggerForUevent({"misc", "kvm", "change", "create"}), 0u);
  EXPECT_EQ(triggerForUevent({"misc", "kvm", "change", "destroy"}), 0u);
  EXPECT_EQ(triggerForUevent({"misc", "kvm", "change"}), kTriggerUdevMisc);
  EXPECT_EQ(triggerForUevent({"misc", "kvm", "add"}), kTriggerUdevMisc);
  EXPECT_EQ(triggerForUevent({"misc", "kvm", "remove"}), kTriggerUdevMisc);
  EXPECT_EQ(triggerForUevent({"misc", "tun", "change", "create"}), kTriggerUdevMisc);
}

// ---------------------------------------------------------------- real listener

std::string rawExchange(int port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    // Stop at a complete response, as a real client does with Content-Length.
    auto end = out.find("\r\n\r\n");
    auto cl = out.find("Content-Length: ");
    if (end != std::string::npos && cl != std::string::npos && cl < end) {
      std::size_t len = std::stoul(out.substr(cl + 16));
      bool head = bytes.rfind("HEAD ", 0) == 0;
      if (out.size() >= end + 4 + (head ? 0 : len)) break;
    }
  }
  ::close(fd);
  return out;
}

TEST(HttpServer, ServesRoutesAndRefusesOversizeBodies) {
  auto router = std::make_shared<HttpRouter>();
  router->handle("/echo",
                 [](const HttpRequest& r) { return HttpResponse::text(200, "got " + r.body); },
                 {"POST"});
  router->handle("/q", [](const HttpRequest& r) { return HttpResponse::text(200, r.query); });
  router->handlePrefix("/raw/",
                       [](const HttpRequest& r) { return HttpResponse::text(200, r.path); });
  auto server = HttpServer::start("127.0.0.1:19201", router, "test");
  ASSERT_TRUE(server.ok()) << server.error().message;
  EXPECT_EQ(server.value()->port(), 19201);
  EXPECT_THAT(rawExchange(19201, "GET /q?a=b HTTP/1.1\r\nHost: x\r\n\r\n"),
              HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(rawExchange(19201, "GET /q?a=b HTTP/1.1\r\nHost: x\r\n\r\n"),
              HasSubstr("\r\n\r\na=b"));
  EXPECT_THAT(rawExchange(19201, "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"), HasSubstr("404"));
  // Handlers get the path as sent: an escaped NUL does not cut it short on the way.
  EXPECT_THAT(rawExchange(19201, "GET /raw/a%00b%2f HTTP/1.1\r\nHost: x\r\n\r\n"),
              HasSubstr("\r\n\r\n/raw/a%00b%2f"));
  EXPECT_THAT(rawExchange(19201, "PUT /q HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
              HasSubstr("405"));
  EXPECT_THAT(
      rawExchange(19201, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
      HasSubstr("got hello"));
  EXPECT_THAT(
      rawExchange(19201, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\nxx"),
      HasSubstr("413"));
  std::string head = rawExchange(19201, "HEAD /q?abc HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(head, HasSubstr("Content-Length: 3"));
  EXPECT_THAT(head, Not(HasSubstr("\r\n\r\nabc")));
  // A second listener on the same port is a clear error, not a crash.
  auto clash = HttpServer::start("127.0.0.1:19201", router, "clash");
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.error().message, HasSubstr("failed to listen on 127.0.0.1:19201"));
  // A numeric address only: octets out of range are an error, not a wrapped address.
  auto wrapped = HttpServer::start("999.1.1.1:19202", router, "bad");
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(wrapped.error().message, HasSubstr("not a numeric IPv4 or [IPv6] address"));
  EXPECT_FALSE(HttpServer::start("127.0.0.1:65536", router, "bad").ok());
  // IPv6 where the loopback has ::1.
  auto v6 = HttpServer::start("[::1]:19202", router, "v6");
  if (!v6.ok()) {
    EXPECT_THAT(v6.error().message, HasSubstr("failed to listen on [::1]:19202"));
  }
}

TEST(HttpServer, LoopbackHostNamesOnly) {
  for (const char* ok : {"localhost", "LOCALHOST:9811", "localhost.", "127.0.0.1", "127.1.2.3:80",
                         "[::1]", "[::1]:9811"})
    EXPECT_TRUE(isLoopbackHost(ok, "127.0.0.1")) << ok;
  for (const char* bad : {"evil.example", "evil.example:9811", "10.0.0.5", "localhost.evil",
                          "127.0.0.1.nip.io", "[::2]", "", "localhost:x", "[::1]x"})
    EXPECT_FALSE(isLoopbackHost(bad, "127.0.0.1")) << bad;
  EXPECT_TRUE(isLoopbackHost("10.0.0.5:9811", "10.0.0.5"));  // its own specific address
  EXPECT_FALSE(isLoopbackHost("10.0.0.5", "0.0.0.0"));       // a wildcard is no address

  auto router = std::make_shared<HttpRouter>();
  router->handle("/", [](const HttpRequest&) { return HttpResponse::text(200, "page"); });
  HttpServer::Limits lim;
  lim.loopback_host_only = true;
  auto server = HttpServer::start("127.0.0.1:19203", router, "debug", lim);
  ASSERT_TRUE(server.ok()) << server.error().message;
  EXPECT_THAT(rawExchange(19203, "GET / HTTP/1.1\r\nHost: 127.0.0.1:19203\r\n\r\n"),
              HasSubstr("\r\n\r\npage"));
  EXPECT_THAT(rawExchange(19203, "GET / HTTP/1.1\r\nHost: localhost:19203\r\n\r\n"),
              HasSubstr("200 OK"));
  // What a browser sends after DNS rebinding evil.example to 127.0.0.1.
  std::string rebound = rawExchange(19203, "GET / HTTP/1.1\r\nHost: evil.example:19203\r\n\r\n");
  EXPECT_THAT(rebound, HasSubstr("421 Misdirected Request"));
  EXPECT_THAT(rebound, Not(HasSubstr("page")));
}

// civetweb gives a connection a worker until its request is complete or the request timeout
// cuts it off: clients that dribble their requests can hold every worker of the metrics
// listener. The agent's health listener has workers of its own, so the kubelet's probe is
// answered at once all the same.
TEST(HttpServer, HealthListenerAnswersWhileEveryMetricsWorkerIsHeld) {
  Served s(pageProbes(), {});
  s.f.runner->runCycle(Runner::kRunAll);
  auto started =
      startAgentListeners({"127.0.0.1:19205", "127.0.0.1:19206", ""}, makeAgentRouters(s.ep));
  ASSERT_TRUE(started.ok()) << started.error().message;
  ASSERT_EQ(started.value().size(), 2u);  // debug off
  const int workers = metricsListenerLimits().worker_threads;
  std::vector<int> holders;
  for (int i = 0; i < workers; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(19205);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::send(fd, "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    holders.push_back(fd);
  }
  std::this_thread::sleep_for(300ms);  // every worker is now reading a request
  // Each answer comes before a held worker could have freed up (request_timeout_ms, 2 s): the
  // bound is loose so that a loaded machine's scheduling does not decide, only the design.
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_THAT(rawExchange(19206, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                HasSubstr("200 OK"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  }
  EXPECT_THAT(rawExchange(19206, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
              HasSubstr("404"));  // the health listener serves health only
  // The premise: the metrics listener really had no free worker. Its request waited for the
  // holders' request timeout, and the holders were cut off.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(rawExchange(19205, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), HasSubstr("200 OK"));
  EXPECT_GT(std::chrono::steady_clock::now() - t0, 1s);
  int closed = 0;
  for (int fd : holders) {
    char c[512];
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n;
    while ((n = ::recv(fd, c, sizeof c, 0)) > 0) {
    }
    if (n == 0 || errno == ECONNRESET) ++closed;  // not EAGAIN: still open after a second
    ::close(fd);
  }
  EXPECT_EQ(closed, workers);
}

}  // namespace
}  // namespace nodegate
