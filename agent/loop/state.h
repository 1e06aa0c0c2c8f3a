// The agent's state: the published result of every check, when its status last changed, and
// flap damping. Pure (time is passed in), so damping is unit-tested without clocks or threads.
//
// Damping N (Config.damping[check], default 1): a new raw status is published only after it
// was seen on N consecutive runs. The very first result of a check is published at once (there
// is nothing older to protect). While a change is pending, the previously published result stays
// (status, reason, message, hint, evidence, labels) but its metrics and duration follow the
// latest run: domain gauges are measurements, not verdicts.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "nodegate/check.h"
#include "nodegate/config.h"
#include "nodegate/snapshot.h"

namespace nodegate {

class StateStore {
 public:
  using Clock = std::chrono::system_clock;

  // names: every check in registry order (the snapshot keeps this order).
  explicit StateStore(std::vector<std::string> names);

  // Records one run. Returns true when something published changed (status, reason, message,
  // hint, evidence or labels).
  bool apply(const CheckResult& result, Clock::time_point now, int damping);

  // The snapshot of the current state, with the gate computed under config.
  Snapshot snapshot(const Config& config, Clock::time_point now) const;

  std::uint64_t generation() const { return generation_; }
  // The state of one check (nullptr for a name never seen).
  const CheckState* find(const std::string& check) const;
  // The result of the check's latest run as the probe gave it, before damping (nullptr before
  // its first run): what a probe that reads the check sees when it did not run this cycle, the
  // same kind of result it sees when it did.
  const CheckResult* latestRun(const std::string& check) const;

 private:
  struct Entry {
    CheckState state;
    bool ran = false;
    CheckResult latest;                // the latest run, undamped (valid when ran)
    Status pending = Status::Unknown;  // raw status waiting to be published
    int streak = 0;                    // consecutive runs that reported `pending`
  };
  std::vector<std::string> order_;
  std::map<std::string, Entry> entries_;
  std::uint64_t generation_ = 0;
};

// The damping a check gets under config (>= 1).
int dampingFor(const Config& config, const std::string& check);

}  // namespace nodegate
