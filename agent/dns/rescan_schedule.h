// When hop discovery rescans: soon after events (link, netns and process changes), coalescing a
// burst into one pass, and periodically as the safety net for anything the events miss. Pure (the
// caller passes the time), so the debounce is tested without sleeping.
#pragma once

#include <algorithm>
#include <chrono>

namespace nodegate::dns {

class RescanSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // debounce: how long after the first event of a burst the pass runs (the rest of the burst
  // lands in the same pass). min_gap: least time between the starts of two passes, which bounds
  // the rate under a steady stream of events. periodic: the safety-net cadence.
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

  // An event asks for a pass. Events during a pending debounce join it; an event during a pass
  // (after begin()) asks for another one, since the running pass may have read too early.
  void event(Clock::time_point now) {
    if (pending_) return;
    pending_ = true;
    pending_at_ = std::max(now + debounce_, started_ + min_gap_);
  }

  bool due(Clock::time_point now) const {
    return (pending_ && now >= pending_at_) || now >= next_periodic_;
  }
  // Whether the pass that is due was asked for by an event (else it is the periodic one).
  bool eventDue(Clock::time_point now) const { return pending_ && now >= pending_at_; }
  Clock::time_point next() const {
    return pending_ ? std::min(pending_at_, next_periodic_) : next_periodic_;
  }

  // A pass starts now: it covers every event so far.
  void begin(Clock::time_point now) {
    pending_ = false;
    started_ = now;
    next_periodic_ = now + periodic_;
  }

 private:
  std::chrono::milliseconds debounce_, min_gap_, periodic_;
  bool pending_ = false;
  Clock::time_point pending_at_{};
  Clock::time_point started_{};
  Clock::time_point next_periodic_;
};

}  // namespace nodegate::dns
