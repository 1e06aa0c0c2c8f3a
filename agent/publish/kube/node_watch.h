// The publisher's eyes: GETs the Node, then watches it (bookmarks on, resuming from the newest
// resourceVersion seen) and offers every copy to the NodeCache, so that anyone else's edit of
// our labels, conditions or taint reaches the reconciler and is undone. A 410, a DELETED event
// or an ERROR starts over with a fresh GET; failures back off (Retry-After honoured).
// A server that went back in time (etcd restored from a backup: our resourceVersion is "too
// large", 504) is relisted at once too; when the fresh GET shows an older resourceVersion or
// another uid than we had seen, the cache is reset to it (NodeCache::reset), so the restored
// Node is reconciled now instead of after the server's versions pass ours again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "kube/connection.h"
#include "publish/kube/node_cache.h"

namespace nodegate::kube {

struct NodeWatchOptions {
  std::string node_name;
  double watch_timeout_s = 300;  // each watch asks for this, jittered up to +50%
  std::uint64_t seed = 1;
};

class NodeWatcher {
 public:
  // Starts the thread; `cache` and `connection` must outlive the watcher.
  NodeWatcher(Connection& connection, NodeWatchOptions options, NodeCache& cache);
  ~NodeWatcher();  // stops and joins
  NodeWatcher(const NodeWatcher&) = delete;
  NodeWatcher& operator=(const NodeWatcher&) = delete;

 private:
  void loop();
  // One watch from `rv` (updated as events arrive); false: start over with a GET.
  bool watchOnce(std::string* rv, double timeout_s, Backoff* backoff);
  // Remembers the newest copy of the Node itself (not bookmarks, whose version is the whole
  // server's): what a relist is compared with.
  void seen(const nlohmann::json& node);
  std::string nodePath() const { return "/api/v1/nodes/" + o_.node_name; }

  NodeWatchOptions o_;
  NodeCache& cache_;
  Stopper stop_;
  ApiClient api_;
  std::string seen_rv_, seen_uid_;  // watcher thread only
  std::thread thread_;
};

}  // namespace nodegate::kube
