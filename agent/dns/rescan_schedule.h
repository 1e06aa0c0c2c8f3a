// When hop discovery runs a pass, and what the pass must do: soon after events (link, netns and
// process changes), coalescing a burst into one pass, and periodically as the safety net for
// anything the events miss. An event names what changed (one process, one traced netns, the
// node's own links), so a pass re-reads only that; only the safety net, a lost event or a change
// discovery cannot place reads everything again. Pure (the caller passes the time), so the
// debounce is tested without sleeping.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>

namespace nodegate::dns {

// What a pass must look at again. A full pass scans every process and lists every netns; a
// targeted one only what is named here, so its cost follows what changed, not the VM count.
struct DiscoveryWork {
  bool full = false;              // scan /proc and list every netns
  bool host = false;              // the agent's own netns (its rtnetlink source fired)
  std::set<std::uint64_t> netns;  // traced netns, by inode, whose link watch fired
  std::map<int, bool> pids;       // processes to look at again; true: it exited

  static DiscoveryWork everything() {
    DiscoveryWork w;
    w.full = true;
    return w;
  }
  bool empty() const { return !full && !host && netns.empty() && pids.empty(); }
  // Later events win for a pid: an exit then an exec is a reused pid, to be read again.
  void merge(const DiscoveryWork& o) {
    full |= o.full;
    host |= o.host;
    netns.insert(o.netns.begin(), o.netns.end());
    for (const auto& [pid, exited] : o.pids) pids[pid] = exited;
  }
};

class RescanSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // debounce: how long after the first event of a burst the pass runs (the rest of the burst
  // lands in the same pass), so targeted passes come at most once a debounce.
  // min_gap: least time between the starts of two full passes, which bounds their rate under a
  // steady stream of events that need one. periodic: the safety net's cadence (a full pass).
  RescanSchedule(std::chrono::milliseconds debounce, std::chrono::milliseconds min_gap,
                 std::chrono::milliseconds periodic, Clock::time_point now)
      : debounce_(debounce),
        min_gap_(min_gap),
        periodic_(periodic),
        next_periodic_(now + periodic) {}

  void setPeriodic(std::chrono::milliseconds periodic, Clock::time_point now) {
    periodic_ = periodic;
    next_periodic_ = now + periodic;
  }
  std::chrono::milliseconds periodic() const { return periodic_; }

  // An event asks for a pass doing `work` (by default a full one). Events during a pending
  // debounce join it; an event during a pass (after begin()) asks for another one, since the
  // running pass may have read too early.
  void event(Clock::time_point now, const DiscoveryWork& work = DiscoveryWork::everything()) {
    if (work.empty()) return;
    if (!pending_) {
      pending_ = true;
      pending_at_ = now + debounce_;
    }
    work_.merge(work);
    if (work_.full) pending_at_ = std::max(pending_at_, full_started_ + min_gap_);
  }

  bool due(Clock::time_point now) const { return eventDue(now) || now >= next_periodic_; }
  // Whether the pass that is due was asked for by an event (else it is the periodic one).
  bool eventDue(Clock::time_point now) const { return pending_ && now >= pending_at_; }
  Clock::time_point next() const {
    return pending_ ? std::min(pending_at_, next_periodic_) : next_periodic_;
  }

  // A pass starts now: it covers every event so far, and is a full one when the safety net is due.
  DiscoveryWork begin(Clock::time_point now) {
    DiscoveryWork w = std::move(work_);
    work_ = {};
    pending_ = false;
    if (now >= next_periodic_) w.full = true;
    if (w.full) {
      full_started_ = now;
      next_periodic_ = now + periodic_;
    }
    return w;
  }

 private:
  std::chrono::milliseconds debounce_, min_gap_, periodic_;
  bool pending_ = false;
  DiscoveryWork work_;
  Clock::time_point pending_at_{};
  Clock::time_point full_started_{};
  Clock::time_point next_periodic_;
};

}  // namespace nodegate::dns
