// The agent's loop: triggers -> probes -> state -> publishers.
//
// Extension point: Runner::trigger(bits) may be called from any thread (the D-Bus watcher fires
// kTriggerDBusTime, the DNS tracer kTriggerDns, the kernel event sources the udev/netlink bits).
// It only sets bits and wakes the loop; bursts are coalesced (debounce) into one cycle that
// re-runs the probes whose triggers() (plus the policy's `checks.<probe>.triggers` list of extra
// trigger names) include a fired bit. The jittered resync timer re-runs every probe.
//
// Each probe runs on a worker thread of the cycle under a deadline
// (`checks.<probe>.timeout_seconds`, default 10 s, nodegate/spec.h): a probe that does not finish
// in time is published as UNKNOWN/ProbeTimeout and the loop carries on; while it is still stuck it
// is not started again.
//
// A probe whose spec reads other checks (ProbeSpec::reads) starts once those of its cycle have a
// result (finished, or UNKNOWN at their deadline) and gets them in ProbeContext; a check that is
// not in the cycle is handed over as its latest run. A cycle that runs a check also runs the
// probes that read it. runCycle and runOnce share this: one way to run a cycle.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "loop/state.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/probe.h"
#include "nodegate/snapshot.h"

namespace nodegate {

// The bits a probe re-runs on under config: its own plus `checks.<name>.triggers`.
std::uint32_t probeTriggers(const Probe& probe, const Config& config);

struct RunnerOptions {
  std::chrono::duration<double> resync{60};
  double jitter = 0.1;                     // timer fires at resync * (1 ± jitter)
  std::chrono::milliseconds debounce{10};  // events closer than this share a cycle
  // Probe runs in flight at once, taken in turn from the cycle's list; 0: one thread per probe
  // (the agent). `nodegate check` uses a few: thread start-up costs more than most probes.
  std::size_t max_parallel = 0;
  std::shared_ptr<prometheus::Registry> registry;  // optional: runner metrics go here
};

class Runner {
 public:
  using Clock = std::chrono::steady_clock;

  Runner(ProbeList probes, HostRoot host, Config config, RunnerOptions options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Publishers see every snapshot after a cycle that ran probes. Add them before start().
  void addPublisher(std::shared_ptr<Publisher> publisher);

  // Starts the loop thread; the first cycle runs every probe.
  void start();
  // Stops the loop promptly (well under a second). Returns how many probes were still running
  // and had to be abandoned (their threads are detached and keep only their own state alive).
  int stop();

  // Thread-safe; see the header comment.
  void trigger(std::uint32_t bits);
  // New policy (SIGHUP): applies to the next cycle, which re-runs every probe.
  void reload(Config config);

  // The latest snapshot (never null; before the first cycle every check is "not run yet").
  std::shared_ptr<const Snapshot> snapshot() const;
  // When the last cycle finished; nullopt before the first one.
  std::optional<Clock::time_point> lastCycle() const;
  Clock::time_point started() const { return started_; }
  std::chrono::duration<double> resync() const { return options_.resync; }
  std::uint64_t cycles() const { return cycles_.load(); }

  // Runs one cycle on the caller's thread (the loop uses it; tests call it directly).
  void runCycle(std::uint32_t bits);
  // Runs every probe once under the same deadlines and returns the results in registry order,
  // without touching the state or publishing (`nodegate check`).
  std::vector<CheckResult> runOnce();

  static constexpr std::uint32_t kRunAll = 0xffffffffu;

 private:
  struct Worker;
  struct Sync;
  struct Batch;
  // One selected probe of a cycle. A probe that reads checks of the same cycle waits (run
  // unset) until each of them has its result; then its run joins the batch.
  struct Job {
    std::shared_ptr<Worker> w;
    double timeout = 0;               // seconds from the run's start
    std::optional<std::size_t> run;   // index into the batch's runs, once handed to it
    std::vector<std::size_t> inputs;  // the jobs of the checks it reads that are in this cycle
    std::shared_ptr<const std::map<std::string, CheckResult>> reads;  // the rest (latest runs)
    bool abandoned = false;  // its deadline passed while it ran
    std::optional<CheckResult> result;
  };
  std::shared_ptr<const Config> config() const;
  // The selected probes' results (nullopt when stopped half way).
  // probe_cpu_s: the CPU the probe runs took on their threads.
  std::optional<std::vector<CheckResult>> runProbes(std::uint32_t bits,
                                                    std::shared_ptr<const Config> cfg,
                                                    double* probe_cpu_s = nullptr);
  // Runs the batch under its deadlines; false when stopped before every job had a result.
  bool awaitBatch(const std::shared_ptr<Batch>& batch, std::vector<Job>& jobs);
  CheckResult timedOut(const std::string& name, double timeout);
  void loop();
  std::chrono::duration<double> jitteredResync();
  void publish(std::shared_ptr<const Snapshot> snap);
  // Applies one run's result to the state and logs a new verdict (cycle_mu_ held).
  void record(const CheckResult& result, std::chrono::system_clock::time_point now,
              const Config& config);

  HostRoot host_;
  RunnerOptions options_;
  std::shared_ptr<Sync> sync_;  // shared with worker threads, which may outlive the runner
  std::vector<std::shared_ptr<Worker>> workers_;
  std::vector<std::shared_ptr<Publisher>> publishers_;
  // Used by the loop thread only. A member, not a thread_local: a thread_local's 5 KB of state
  // would be in the static TLS block that every one of the agent's threads zeroes and keeps
  // resident (one more page each), though only this thread draws from it.
  std::mt19937 jitter_rng_{std::random_device{}()};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::shared_ptr<const Config> config_;
  std::uint32_t pending_ = 0;
  bool stop_ = false;
  std::shared_ptr<const Snapshot> snapshot_;
  std::optional<Clock::time_point> last_cycle_;

  std::mutex cycle_mu_;  // one cycle at a time (loop vs tests calling runCycle)
  StateStore state_;
  std::atomic<std::uint64_t> cycles_{0};
  std::atomic<bool> stopping_{false};
  Clock::time_point started_ = Clock::now();
  std::thread thread_;

  prometheus::Family<prometheus::Counter>* triggers_total_ = nullptr;
  prometheus::Family<prometheus::Counter>* timeouts_total_ = nullptr;
  struct CycleTiming {
    prometheus::Counter* cycles = nullptr;
    prometheus::Counter* wall = nullptr;
    prometheus::Counter* cpu = nullptr;
  };
  CycleTiming cycle_timing_[2];  // [0] triggered, [1] full
};

}  // namespace nodegate
