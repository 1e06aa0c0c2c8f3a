// What the gate holds back right now (publish/kube/gate_hold.h), for the people who ask: the
// publisher (real or --kube none) records every plan here; the HTTP API (/api/v1/checks, "gate"),
// the status page and /metrics (nodegate_gate_held_labels{reason}) read it. A hold that appears,
// changes or goes is logged once, not at every reconcile. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <nlohmann/json.hpp>

#include "publish/kube/gate_hold.h"

namespace nodegate::kube {

// The reasons a hold can have, in the order they are shown (every one exported, from 0).
inline constexpr const char* kHoldReasons[] = {"SelectedByRunningPods", "PodViewIncomplete",
                                               "ClosingDelay"};

class GateHoldBoard {
 public:
  explicit GateHoldBoard(prometheus::Registry& registry);

  void update(const std::vector<LabelHold>& holds, const PodView& pods,
              const std::string& node_name);

  struct State {
    bool published = false;  // a plan was recorded (a publisher with a Node to compare ran)
    std::vector<LabelHold> holds;
    bool pods_complete = false;
    std::string pods_why;
    std::size_t pods = 0;
  };
  State state() const;
  // {published, holds: [{label, kept, wanted, reason, pods, release_at}], pod_view: {complete,
  // reason, pods}}.
  nlohmann::json toJson() const;

 private:
  mutable std::mutex mu_;
  State state_;
  prometheus::Family<prometheus::Gauge>& gauge_;
};

}  // namespace nodegate::kube
