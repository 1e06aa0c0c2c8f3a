// `--kube none` (or auto with no cluster): logs what the Kubernetes publisher would send, from the
// same desired-state and patch functions (node_state.h), against a Node that holds only what
// earlier dry-run writes put there. So the first complete snapshot logs the full label patch and
// the conditions, later ones only what changed, as the real publisher writes only differences.
#pragma once

#include <nlohmann/json.hpp>

#include "nodegate/snapshot.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

class DryRunPublisher final : public Publisher {
 public:
  explicit DryRunPublisher(PublishSettings settings);
  void publish(const Snapshot& snapshot) override;

 private:
  PublishSettings s_;
  nlohmann::json node_;  // the Node as our would-be writes left it
};

}  // namespace nodegate::kube
