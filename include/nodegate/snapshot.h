// Snapshot: what the agent's state holds after a cycle, handed to every publisher (Kubernetes,
// metrics, HTTP). Data flows one way: publishers read snapshots and never call probes.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/check.h"

namespace nodegate {

// One change of a check's published verdict (status or reason).
struct Transition {
  std::chrono::system_clock::time_point at;
  std::optional<Status> from;  // nullopt: the check's first result
  Status to = Status::Unknown;
  std::string reason;  // the new reason
};

// Where CheckState::since comes from.
enum class SinceSource {
  Transition,  // the agent saw the status begin (a change between two of its runs)
  Probe,       // the probe knew how long the condition had held (CheckResult::held_for)
  AgentStart,  // first seen at the agent's first run: the status may be older
};
std::string_view toString(SinceSource s);  // "transition", "probe", "agent-start"

struct CheckState {
  // The latest result as published: its status is the damped one (a new status must hold for
  // the probe's damping count before it shows here); the raw latest status is kept beside it.
  CheckResult result;
  Status raw_status = Status::Unknown;
  std::chrono::system_clock::time_point since;  // when the published status began
  SinceSource since_source = SinceSource::AgentStart;
  std::chrono::system_clock::time_point last_run;  // when the probe last finished
  std::vector<Transition> history;                 // oldest first, the last kHistory changes
  static constexpr std::size_t kHistory = 10;
};

struct Snapshot {
  std::vector<CheckState> checks;  // registry order
  bool gate_open = false;
  std::vector<std::string> gate_blockers;  // required checks that are not PASS
  std::vector<std::string> gate_required;  // the checks the policy in force requires (sorted)
  bool complete = false;                   // every probe has run at least once
  std::uint64_t generation = 0;            // bumps whenever anything published changed
  std::chrono::system_clock::time_point taken;

  const CheckState* find(const std::string& check) const {
    for (const auto& c : checks)
      if (c.result.check == check) return &c;
    return nullptr;
  }
};

// A consumer of snapshots. publish() is called from the agent loop after every cycle that ran
// probes; implementations must return quickly (queue the work on their own thread) and must
// tolerate identical snapshots (they are how "nothing changed" looks).
class Publisher {
 public:
  virtual ~Publisher() = default;
  virtual void publish(const Snapshot& snapshot) = 0;
};

}  // namespace nodegate
