#include "loop/runner.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "nodegate/log.h"
#include "nodegate/runner.h"

namespace nodegate {
namespace {

constexpr double kDeadlineGraceSeconds = 1;

// CPU time of the calling thread, in seconds (0 where the clock cannot be read).
double threadCpuSeconds() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string fmtSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

}  // namespace

std::uint32_t probeTriggers(const Probe& probe, const Config& config) {
  std::uint32_t bits = probe.triggers();
  // Names were validated when the config was parsed.
  for (const auto& name : config.extraTriggers(probe.name()))
    if (auto bit = parseTriggerName(name)) bits |= *bit;
  return bits;
}

// Completion signalling shared by the runner and its workers.
struct Runner::Sync {
  std::mutex mu;
  std::condition_variable cv;
};

namespace {

// Starts fn on a detached thread with a 2 MiB stack. glibc keeps up to 40 MiB of exited threads'
// stacks for reuse: 14 probes at its default 8 MiB overflow that cache and map fresh stacks every
// cycle, at 2 MiB they all come from it (the spawns of a full cycle measured 0.7 -> 0.3 ms CPU).
// 2 MiB is far more than any probe's deepest call chain. Returns 0 or the pthread error.
int startDetached(std::function<void()> fn) {
  pthread_attr_t attr;
  if (int rc = pthread_attr_init(&attr)) return rc;
  pthread_attr_setstacksize(&attr, 2u << 20);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  auto* arg = new std::function<void()>(std::move(fn));
  pthread_t t;
  int rc = pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
        (*f)();
        return nullptr;
      },
      arg);
  pthread_attr_destroy(&attr);
  if (rc != 0) delete arg;
  return rc;
}

}  // namespace

// One probe's runs across cycles. The threads that run it own the worker jointly with the
// runner, so a stuck run can be abandoned (at its deadline, or at shutdown) without freeing what
// it still uses.
struct Runner::Worker {
  std::shared_ptr<Probe> probe;
  HostRoot host;
  // Guarded by sync->mu:
  bool busy = false;  // a run is in progress (possibly past its deadline)
  Clock::time_point busy_since;
  std::uint64_t seq = 0;      // ids of submitted runs
  std::uint64_t done_id = 0;  // the run that finished last (results of abandoned runs are dropped)
  CheckResult done_result;
};

// The runs of one cycle, taken in turn by at most RunnerOptions::max_parallel threads that end
// when none is left to take: between cycles (a minute, usually) no probe thread exists, and idle
// threads would keep ~10 KiB of stack each resident for nothing. A run that waits for the checks
// it reads is appended when they are done, and awaitBatch starts a thread for it if none is left.
// Shared with those threads, so one that is abandoned at a deadline keeps the batch alive.
struct Runner::Batch {
  struct Run {
    std::shared_ptr<Worker> w;
    std::uint64_t id = 0;
    std::shared_ptr<const std::map<std::string, CheckResult>> reads;  // null: reads nothing
  };
  std::shared_ptr<Sync> sync;
  std::shared_ptr<const Config> cfg;
  std::vector<Run> runs;
  // Guarded by sync->mu:
  std::size_t next = 0;     // runs before it have started
  std::size_t threads = 0;  // drain threads that have not returned
  bool closed = false;      // shutdown: take no more runs
  double cpu_s = 0;         // CPU of the runs that returned, on their threads

  static void drain(const std::shared_ptr<Batch>& self) {
    for (;;) {
      Run run;
      {
        std::lock_guard l(self->sync->mu);
        if (self->closed || self->next >= self->runs.size()) {
          --self->threads;
          return;
        }
        run = self->runs[self->next++];
        run.w->busy = true;
        run.w->busy_since = Clock::now();  // the run's deadline counts from here
      }
      self->sync->cv.notify_all();
      ProbeContext ctx{run.w->host, *self->cfg, run.reads.get()};
      const double cpu0 = threadCpuSeconds();
      CheckResult r = runProbe(*run.w->probe, ctx);
      const double cpu = threadCpuSeconds() - cpu0;
      {
        std::lock_guard l(self->sync->mu);
        self->cpu_s += cpu;
        run.w->busy = false;
        run.w->done_id = run.id;
        run.w->done_result = std::move(r);
      }
      self->sync->cv.notify_all();
    }
  }
};

namespace {

// Refuses a probe that reads its own result through others: it would wait for itself forever.
// Specs are constants, so this is a programming error, caught by the registry's tests.
void checkReadsHaveNoCycle(const std::vector<const ProbeSpec*>& specs) {
  std::map<std::string, const ProbeSpec*> by_name;
  for (const auto* s : specs) by_name[s->name] = s;
  std::map<std::string, int> mark;  // 1: on the path being walked, 2: done
  std::function<void(const ProbeSpec&, std::string)> walk = [&](const ProbeSpec& s,
                                                                std::string path) {
    path += (path.empty() ? "" : " -> ") + s.name;
    int& m = mark[s.name];
    if (m == 2) return;
    if (m == 1) throw std::invalid_argument("probe reads its own result: " + path);
    m = 1;
    for (const auto& r : s.reads)
      if (auto it = by_name.find(r); it != by_name.end()) walk(*it->second, path);
    mark[s.name] = 2;
  };
  for (const auto* s : specs) walk(*s, "");
}

}  // namespace

Runner::Runner(ProbeList probes, HostRoot host, Config config, RunnerOptions options)
    : host_(std::move(host)),
      options_(std::move(options)),
      sync_(std::make_shared<Sync>()),
      config_(std::make_shared<const Config>(std::move(config))),
      state_([&] {
        std::vector<std::string> names;
        for (const auto& p : probes) names.emplace_back(p->name());
        return names;
      }()) {
  std::vector<const ProbeSpec*> specs;
  for (const auto& p : probes) specs.push_back(&p->spec());
  checkReadsHaveNoCycle(specs);
  for (auto& p : probes) {
    auto w = std::make_shared<Worker>();
    w->probe = std::shared_ptr<Probe>(std::move(p));
    w->host = host_;
    workers_.push_back(std::move(w));
  }
  snapshot_ =
      std::make_shared<const Snapshot>(state_.snapshot(*config_, std::chrono::system_clock::now()));
  if (options_.registry) {
    auto& reg = *options_.registry;
    triggers_total_ = &prometheus::BuildCounter()
                           .Name("nodegate_agent_triggers_total")
                           .Help("Triggers received by the agent loop, by trigger name.")
                           .Register(reg);
    for (const auto& t : triggerNames()) triggers_total_->Add({{"trigger", t}});
    timeouts_total_ =
        &prometheus::BuildCounter()
             .Name("nodegate_agent_probe_timeouts_total")
             .Help("Probe runs that missed their deadline and were published as UNKNOWN.")
             .Register(reg);
    // Every series exists at 0 from the start, so increase() and rate() see the first timeout.
    for (const auto& w : workers_) timeouts_total_->Add({{"check", std::string(w->probe->name())}});
    // By scope: "full" cycles run every probe (start, resync timer, SIGHUP) and are comparable
    // with each other; "triggered" ones run the probes an event names, a few at a time.
    auto& wall = prometheus::BuildCounter()
                     .Name("nodegate_agent_cycle_seconds_total")
                     .Help(
                         "Wall time of the completed probe cycles: probe runs, state and "
                         "publishing, by scope (full: every probe; triggered: those an event "
                         "named).")
                     .Register(reg);
    auto& cpu = prometheus::BuildCounter()
                    .Name("nodegate_agent_cycle_cpu_seconds_total")
                    .Help(
                        "CPU time of the completed probe cycles: the probes' threads and the "
                        "loop's, by scope.")
                    .Register(reg);
    auto& count = prometheus::BuildCounter()
                      .Name("nodegate_agent_cycles_total")
                      .Help("Probe cycles the agent loop completed, by scope.")
                      .Register(reg);
    for (int full = 0; full < 2; ++full) {
      const prometheus::Labels scope{{"scope", full ? "full" : "triggered"}};
      cycle_timing_[full] = {&count.Add(scope), &wall.Add(scope), &cpu.Add(scope)};
    }
  }
}

Runner::~Runner() {
  stop();
}

void Runner::addPublisher(std::shared_ptr<Publisher> publisher) {
  publishers_.push_back(std::move(publisher));
}

void Runner::start() {
  {
    std::lock_guard l(mu_);
    pending_ |= kRunAll;
    started_ = Clock::now();
  }
  thread_ = std::thread(&Runner::loop, this);
}

int Runner::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  stopping_ = true;
  cv_.notify_all();
  {
    std::lock_guard l(sync_->mu);  // wakes a cycle waiting for probe results
  }
  sync_->cv.notify_all();
  if (thread_.joinable()) thread_.join();

  // Runs still going hold their worker and finish on their own; their results are dropped.
  int abandoned = 0;
  std::lock_guard l(sync_->mu);
  for (auto& w : workers_) {
    if (!w->busy) continue;
    log::warn("probe still running at shutdown: abandoned",
              {{"check", std::string(w->probe->name())}});
    ++abandoned;
  }
  return abandoned;
}

void Runner::trigger(std::uint32_t bits) {
  if (triggers_total_)
    for (const auto& t : triggerNames())
      if (bits & *parseTriggerName(t)) triggers_total_->Add({{"trigger", t}}).Increment();
  {
    std::lock_guard l(mu_);
    pending_ |= bits;
  }
  cv_.notify_all();
}

void Runner::reload(Config config) {
  {
    std::lock_guard l(mu_);
    config_ = std::make_shared<const Config>(std::move(config));
    pending_ |= kRunAll;
  }
  cv_.notify_all();
}

std::shared_ptr<const Config> Runner::config() const {
  std::lock_guard l(mu_);
  return config_;
}

std::shared_ptr<const Snapshot> Runner::snapshot() const {
  std::lock_guard l(mu_);
  return snapshot_;
}

std::optional<Runner::Clock::time_point> Runner::lastCycle() const {
  std::lock_guard l(mu_);
  return last_cycle_;
}

std::chrono::duration<double> Runner::jitteredResync() {
  std::uniform_real_distribution<double> d(1.0 - options_.jitter, 1.0 + options_.jitter);
  return options_.resync * d(jitter_rng_);
}

void Runner::loop() {
  auto next_timer = Clock::now() + std::chrono::duration_cast<Clock::duration>(jitteredResync());
  for (;;) {
    std::uint32_t bits;
    {
      std::unique_lock l(mu_);
      cv_.wait_until(l, next_timer, [&] { return stop_ || pending_ != 0; });
      if (stop_) return;
      if (Clock::now() >= next_timer) {
        pending_ |= kTriggerTimer;
        if (triggers_total_) triggers_total_->Add({{"trigger", "timer"}}).Increment();
      }
      if (pending_ == 0) continue;
      // Coalesce a burst (udev and netlink report one link change several times).
      cv_.wait_for(l, options_.debounce, [&] { return stop_; });
      if (stop_) return;
      bits = std::exchange(pending_, 0);
    }
    if (bits & kTriggerTimer)
      next_timer = Clock::now() + std::chrono::duration_cast<Clock::duration>(jitteredResync());
    runCycle(bits);
  }
}

std::optional<std::vector<CheckResult>> Runner::runProbes(std::uint32_t bits,
                                                          std::shared_ptr<const Config> cfg,
                                                          double* probe_cpu_s) {
  const bool all = (bits & kTriggerTimer) != 0;
  // The cycle's probes: those the bits select, and then those that read a selected one.
  std::set<std::string> selected;
  for (auto& w : workers_)
    if (all || (probeTriggers(*w->probe, *cfg) & bits)) selected.emplace(w->probe->name());
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& w : workers_)
      for (const auto& r : w->probe->spec().reads)
        if (selected.count(r) && selected.emplace(w->probe->name()).second) grew = true;
  }

  auto batch = std::make_shared<Batch>();
  batch->sync = sync_;
  batch->cfg = cfg;
  std::vector<Job> jobs;  // registry order
  std::map<std::string, std::size_t> job_of;
  {
    std::lock_guard l(sync_->mu);
    for (auto& w : workers_) {
      std::string name(w->probe->name());
      if (!selected.count(name)) continue;
      Job j;
      j.w = w;
      // The probe's own bounds (a command's timeout, a D-Bus call's) use timeout_seconds too:
      // the deadline allows a second more, so they report what they saw first and the deadline
      // only catches a run that does not return at all.
      j.timeout = cfg->probeTimeout(name) + kDeadlineGraceSeconds;
      if (w->busy) {
        // Still stuck in an earlier run: do not stack another one on top of it.
        double stuck = std::chrono::duration<double>(Clock::now() - w->busy_since).count();
        j.result = makeResult(
            name, Status::Unknown, "ProbeTimeout",
            "probe has been running for " + fmtSeconds(stuck) + " s and has not returned",
            "check what the probe waits for (a hung mount, device or "
            "command); the agent keeps it UNKNOWN until it returns");
      }
      job_of[name] = jobs.size();
      jobs.push_back(std::move(j));
    }
    // What each job reads: a job of this cycle (registry order does not matter: the reads are
    // acyclic), else the check's latest run.
    for (auto& j : jobs) {
      const auto& reads = j.w->probe->spec().reads;
      if (reads.empty() || j.result) continue;
      auto latest = std::make_shared<std::map<std::string, CheckResult>>();
      for (const auto& r : reads) {
        if (auto it = job_of.find(r); it != job_of.end())
          j.inputs.push_back(it->second);
        else if (const CheckResult* last = state_.latestRun(r))
          latest->emplace(r, *last);
      }
      j.reads = std::move(latest);
    }
  }
  if (!awaitBatch(batch, jobs)) return std::nullopt;  // a half cycle is not published at shutdown
  if (probe_cpu_s) {
    std::lock_guard l(sync_->mu);
    *probe_cpu_s = batch->cpu_s;  // a run abandoned at its deadline counts nothing
  }
  std::vector<CheckResult> results;
  results.reserve(jobs.size());
  for (auto& j : jobs) results.push_back(std::move(*j.result));
  return results;
}

bool Runner::awaitBatch(const std::shared_ptr<Batch>& batch, std::vector<Job>& jobs) {
  const std::size_t to_run = static_cast<std::size_t>(
      std::count_if(jobs.begin(), jobs.end(), [](const Job& j) { return !j.result; }));
  const std::size_t want =
      options_.max_parallel == 0 ? to_run : std::min(options_.max_parallel, to_run);
  int start_error = 0;
  std::unique_lock l(sync_->mu);
  for (;;) {
    const auto now = Clock::now();
    // Collect what finished and what missed its deadline.
    bool waiting = false;
    Clock::time_point earliest = Clock::time_point::max();
    std::size_t stuck = 0;  // threads still inside a run abandoned at its deadline
    for (auto& j : jobs) {
      if (j.abandoned && j.w->done_id != batch->runs[*j.run].id) ++stuck;
      if (j.result || !j.run || *j.run >= batch->next) continue;
      const auto& run = batch->runs[*j.run];
      if (run.w->done_id == run.id) {
        j.result = std::move(run.w->done_result);
        continue;
      }
      const auto deadline = run.w->busy_since + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(j.timeout));
      if (now >= deadline) {
        j.result = timedOut(std::string(run.w->probe->name()), j.timeout);
        j.abandoned = true;
        ++stuck;
        continue;
      }
      waiting = true;
      earliest = std::min(earliest, deadline);
    }
    // Hand over the runs whose inputs are all in, with them.
    for (auto& j : jobs) {
      if (j.result || j.run) continue;
      if (!std::all_of(j.inputs.begin(), j.inputs.end(),
                       [&](std::size_t i) { return jobs[i].result.has_value(); }))
        continue;
      std::shared_ptr<const std::map<std::string, CheckResult>> reads = j.reads;
      if (!j.inputs.empty()) {
        auto all_reads = std::make_shared<std::map<std::string, CheckResult>>(*j.reads);
        for (std::size_t i : j.inputs) all_reads->emplace(jobs[i].result->check, *jobs[i].result);
        reads = std::move(all_reads);
      }
      j.run = batch->runs.size();
      batch->runs.push_back(Batch::Run{j.w, ++j.w->seq, std::move(reads)});
    }
    // Keep `want` threads taking runs: at the start, in place of one stuck past a deadline, and
    // for a run handed over after the threads of the others had ended.
    while (batch->threads - stuck < want && batch->next < batch->runs.size()) {
      if (int rc = startDetached([batch] { Batch::drain(batch); })) {
        start_error = rc;
        break;
      }
      ++batch->threads;
    }
    // Runs no thread will take. Their results may be what another job waits for: look again.
    if (start_error && batch->threads == stuck) {
      bool gave_up = false;
      for (auto& j : jobs)
        if (!j.result && j.run && *j.run >= batch->next) {
          j.result = makeResult(
              std::string(j.w->probe->name()), Status::Unknown, "ProbeNotStarted",
              std::string("could not start a thread for the probe: ") + std::strerror(start_error),
              "the agent is out of threads or memory; see its limits");
          gave_up = true;
        }
      if (gave_up) continue;
    }
    if (stopping_) {
      batch->closed = true;
      return std::all_of(jobs.begin(), jobs.end(),
                         [](const Job& j) { return j.result.has_value(); });
    }
    const bool pending = std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) {
      return !j.result && (!j.run || *j.run >= batch->next);
    });
    if (!waiting && !pending) return true;
    // A job not started yet, or waiting for its inputs, is woken by the notify of the run that
    // starts or finishes; the earliest deadline bounds the wait otherwise.
    sync_->cv.wait_until(l, earliest);
  }
}

CheckResult Runner::timedOut(const std::string& name, double timeout) {
  log::warn("probe timed out", {{"check", name}, {"timeout_seconds", fmtSeconds(timeout)}});
  if (timeouts_total_) timeouts_total_->Add({{"check", name}}).Increment();
  auto r = makeResult(name, Status::Unknown, "ProbeTimeout",
                      "probe did not finish within " + fmtSeconds(timeout) + " s",
                      "check what the probe waits for (a hung mount, device or command) or raise "
                      "checks." +
                          name + ".timeout_seconds");
  r.duration =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(timeout));
  return r;
}

std::vector<CheckResult> Runner::runOnce() {
  std::lock_guard cycle(cycle_mu_);
  auto results = runProbes(kRunAll, config());
  return results ? std::move(*results) : std::vector<CheckResult>{};
}

void Runner::runCycle(std::uint32_t bits) {
  std::lock_guard cycle(cycle_mu_);
  // The cycle's cost as the agent itself sees it, whatever the scheduler does with its threads
  // (the CPU figure) and as a caller waits for it (the wall figure): docs/benchmarks/density.md
  // compares them at 1 and 100 VMs.
  const auto wall0 = Clock::now();
  const double cpu0 = threadCpuSeconds();
  auto cfg = config();
  double probe_cpu_s = 0;
  auto results = runProbes(bits, cfg, &probe_cpu_s);
  if (!results) return;

  auto now = std::chrono::system_clock::now();
  bool any = false;
  for (const auto& r : *results) {
    record(r, now, *cfg);
    any = true;
  }
  if (!any) return;

  auto snap = std::make_shared<const Snapshot>(state_.snapshot(*cfg, now));
  {
    std::lock_guard l(mu_);
    if (snapshot_->gate_open != snap->gate_open || (snap->complete && !snapshot_->complete))
      log::info("gate verdict", {{"open", snap->gate_open ? "true" : "false"},
                                 {"complete", snap->complete ? "true" : "false"}});
    snapshot_ = snap;
    last_cycle_ = Clock::now();
  }
  publish(snap);
  ++cycles_;
  if (cycle_timing_[0].cycles) {
    // The timer bit and kRunAll (start, reload) run every probe (runProbes).
    const auto& t = cycle_timing_[(bits & kTriggerTimer) ? 1 : 0];
    t.cycles->Increment();
    t.wall->Increment(std::chrono::duration<double>(Clock::now() - wall0).count());
    t.cpu->Increment(probe_cpu_s + threadCpuSeconds() - cpu0);
  }
}

void Runner::record(const CheckResult& r, std::chrono::system_clock::time_point now,
                    const Config& cfg) {
  Status before = Status::Unknown;
  std::string before_reason;
  if (auto* cur = snapshot_->find(r.check)) {
    before = cur->result.status;
    before_reason = cur->result.reason;
  }
  const bool changed = state_.apply(r, now, dampingFor(cfg, r.check));
  // "changed" at info only for a new verdict (status or reason): a message that carries a
  // measurement ("unsynchronised for 17 min") differs at every run and is debug detail.
  const auto* published = state_.find(r.check);
  if (changed && published &&
      (published->result.status != before || published->result.reason != before_reason))
    log::info("check result changed", {{"check", r.check},
                                       {"status", std::string(toString(published->result.status))},
                                       {"previous", std::string(toString(before))},
                                       {"reason", r.reason},
                                       {"previous_reason", before_reason}});
  else if (changed)
    log::debug("check details changed", {{"check", r.check}, {"message", r.message}});
}

void Runner::publish(std::shared_ptr<const Snapshot> snap) {
  for (auto& p : publishers_) {
    try {
      p->publish(*snap);
    } catch (const std::exception& e) {
      log::error("failed to publish snapshot", {{"error", e.what()}});
    }
  }
}

}  // namespace nodegate
