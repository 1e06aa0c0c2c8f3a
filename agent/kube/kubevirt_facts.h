// kubevirt-node's facts (probes/kubevirt_node.h) from what the agent already watches, so the check
// costs no API request of its own: the Node as the publisher's watch sees it (every copy its cache
// adopts, publish/kube/node_cache.h) and the virt-handler pods of the pod source
// (kube/pod_source.h). facts() returns the last view at once; a change of what it would return
// calls the change hook (the agent's: trigger `kube`, so the check re-runs).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "kube/pod_source.h"
#include "kubevirt_node.h"

namespace nodegate::kube {

class KubeVirtFactsBoard final : public KubeVirtSource {
 public:
  static constexpr std::chrono::seconds kPodViewGrace{60};

  // pods: this node's pod source; null when the pod watch is off (kube.pod_watch=false): the
  // virt-handler pods are then never known (PodViewIncomplete).
  explicit KubeVirtFactsBoard(std::shared_ptr<PodSource> pods);
  ~KubeVirtFactsBoard() override;  // unsubscribes from the pod source
  KubeVirtFactsBoard(const KubeVirtFactsBoard&) = delete;
  KubeVirtFactsBoard& operator=(const KubeVirtFactsBoard&) = delete;

  KubeVirtFacts facts() override;

  // A copy of the Node as the publisher adopted it (its NodeCache observer).
  void nodeSeen(const nlohmann::json& node);
  // Called, on the watch's or the pod source's thread, after what facts() returns changed. Set
  // once the consumer exists (the runner is built after the probes that read the board).
  void onChange(std::function<void()> fn);
  // Waits, at most `timeout`, until the Node has been seen and the pods listed (or known not to
  // be watched): the agent's first cycle waits for it, so that a restart does not publish
  // NodeNotRead for the moment the watches take, and then the true verdict again (two writes and
  // two Events for nothing). False at the timeout: the check then says what is missing.
  bool waitUntilSeen(std::chrono::milliseconds timeout);

 private:
  void podsChanged();
  void changed();

  std::shared_ptr<PodSource> pods_;
  int listener_ = 0;

  std::mutex mu_;
  std::condition_variable seen_cv_;
  std::optional<KubeVirtNodeView> node_;
  std::optional<HandlerView> handlers_;  // as last reported to the hook
  // The pods as last seen complete, and since when the view is not: a watch that breaks and is
  // re-established a moment later (a dropped connection, a restored etcd) is no news about
  // virt-handler, so for kPodViewGrace the last complete view stands in (said in the facts).
  std::optional<HandlerView> last_complete_;
  std::optional<std::chrono::steady_clock::time_point> incomplete_since_;
  std::function<void()> on_change_;
};

}  // namespace nodegate::kube
