// The Kubernetes publisher: reconciles the latest snapshot against the Node (labels, conditions,
// taint, events), writing only differences, over the process's shared API connection.
//
// Parts: NodeCache (publish/kube/node_cache.h) holds the latest snapshot and the newest Node
// seen; NodeWatcher (node_watch.h) GETs and watches the Node into it; the reconcile thread takes
// work from it, plans with the pure functions of node_state.h and gate_hold.h (a label running
// pods select is held, the node closed by the taint instead) and sends the patches;
// EventRecorder (event_recorder.h) posts the transitions. publish() only hands over.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kube/connection.h"
#include "kube/pod_source.h"
#include "nodegate/snapshot.h"
#include "publish/kube/hold_board.h"
#include "publish/kube/node_cache.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

// Tunables, from the "kube" section of --config (checks.kube.<key>) with these defaults.
struct PublisherOptions {
  PublishSettings publish;
  std::chrono::seconds heartbeat{300};      // kube.heartbeat_seconds; 0 = no heartbeat writes
  double startup_jitter_s = 2;              // kube.startup_jitter_seconds: spreads a fleet restart
  double watch_timeout_s = 300;             // kube.watch_timeout_seconds, jittered up to +50%
  std::string event_namespace = "default";  // kube.event_namespace (kubelet puts Node events there)
  std::uint64_t seed = 0;                   // 0: random
  // kube.label_release_delay_seconds: how long nodegate's taint must have been on the Node
  // before a label running pods could select is removed (gate_hold.h).
  std::chrono::seconds release_delay{10};
  std::shared_ptr<GateHoldBoard> holds;  // where the plans are shown; may be null
  // Every copy of the Node the publisher adopts (kubevirt-node's view of it: no request of its
  // own); may be empty. Called on the publisher's threads under its cache's lock.
  NodeCache::NodeObserver node_seen;
};

// Starts the publisher's threads. Shutdown (destruction) writes nothing: labels stay, so a
// restart does not flap the gate. `pods` is this node's pod view (null: none, so no label is
// ever removed, PodViewIncomplete); every change of it re-reconciles.
std::unique_ptr<Publisher> startPublisher(std::shared_ptr<Connection> connection,
                                          PublisherOptions options,
                                          std::shared_ptr<PodSource> pods);

}  // namespace nodegate::kube
