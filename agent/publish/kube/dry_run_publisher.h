// `--kube none` (or auto with no cluster): logs what the Kubernetes publisher would send, from the
// same plan and patch functions (gate_hold.h planNode, node_state.h), against a Node that holds
// only what earlier dry-run writes put there. So the first complete snapshot logs the full label
// patch and the conditions, later ones only what changed, as the real publisher writes only
// differences. No pod is bound to that simulated Node, so the pod view is complete and empty:
// a closing gate keeps its label for the release delay (ClosingDelay), as it would on a real
// Node without pods, and is released by the first snapshot after it.
#pragma once

#include <chrono>
#include <memory>

#include <nlohmann/json.hpp>

#include "nodegate/snapshot.h"
#include "publish/kube/gate_hold.h"
#include "publish/kube/hold_board.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

class DryRunPublisher final : public Publisher {
 public:
  DryRunPublisher(PublishSettings settings, std::chrono::seconds release_delay,
                  std::shared_ptr<GateHoldBoard> holds);
  void publish(const Snapshot& snapshot) override;

 private:
  PublishSettings s_;
  std::chrono::seconds release_delay_;
  std::shared_ptr<GateHoldBoard> holds_;
  ClosedSince closed_;
  nlohmann::json node_;  // the Node as our would-be writes left it
};

}  // namespace nodegate::kube
