// What the publisher's threads share: the latest snapshot to publish and the newest copy of the
// Node seen (from a GET, the watch, or the answer to our own write). The reconciler takes work
// from here; the watcher and the reconciler offer Nodes. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "nodegate/snapshot.h"

namespace nodegate::kube {

// resourceVersions are opaque to clients, but every server in practice (etcd revisions, and
// our fake) issues increasing integers; when both parse, an older one is never adopted.
bool newerRv(const std::string& a, const std::string& b);
std::string rvOf(const nlohmann::json& obj);
std::string uidOf(const nlohmann::json& obj);
// A JSON object from a response body or a watch line; nullopt for anything else.
std::optional<nlohmann::json> parseObject(std::string_view text);

class NodeCache {
 public:
  using SteadyClock = std::chrono::steady_clock;
  // Sees every copy of the Node the cache adopts, in the order adopted (it is called under the
  // cache's lock: keep it short, and never call back into the cache).
  using NodeObserver = std::function<void(const nlohmann::json& node)>;

  // Set before any thread uses the cache.
  void setObserver(NodeObserver observer) { observer_ = std::move(observer); }

  void setSnapshot(const Snapshot& snapshot);
  // Adopts a Node seen in a response, a relist or a watch event unless it is no newer than
  // what we hold or than what we wrote ourselves: a stale copy (a watch event delivered late,
  // a GET answered before our PATCH landed) would otherwise make us "repair" our own write.
  // A different uid is a Node deleted and created again, always adopted. Wakes the reconciler.
  void offer(const nlohmann::json& node);
  // The Node as a fresh GET shows it after the server went back in time (restored etcd,
  // resourceVersion lower than before) or the Node was recreated: adopted whatever we held or
  // wrote, and the reconciler woken.
  void reset(const nlohmann::json& node);
  // The answer to our own write: already reconciled, so kept without waking the reconciler.
  void adoptWritten(const nlohmann::json& node);
  // Something else the plan reads changed (the pod view): reconcile again.
  void wake();

  struct Work {
    Snapshot snapshot;
    nlohmann::json node;
  };
  // Waits until a snapshot and a Node are both known and either changed since the last take,
  // or `force` holds, or `until` passes (which forces). nullopt once stop() was called.
  std::optional<Work> take(SteadyClock::time_point until, bool force);
  void stop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<Snapshot> latest_;
  bool snapshot_dirty_ = false;
  std::optional<nlohmann::json> node_;
  bool node_dirty_ = false;
  bool woken_ = false;
  std::string written_rv_;  // newest resourceVersion our own writes produced
  NodeObserver observer_;
  void adopted() {
    if (observer_) observer_(*node_);
  }
};

}  // namespace nodegate::kube
