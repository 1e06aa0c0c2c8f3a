// The Kubernetes publisher behind makeKubePublisher(), exposed for tests and the fleet
// benchmark, which build it from an explicit client config instead of flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <prometheus/registry.h>

#include "cli/options.h"
#include "kube/client.h"
#include "kube/cluster_dns.h"
#include "nodegate/config.h"
#include "nodegate/snapshot.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

// Tunables, from the "kube" section of --config (checks.kube.<key>) with these defaults.
struct PublisherOptions {
  PublishSettings publish;
  double qps = 5;                           // kube.qps
  double burst = 10;                        // kube.burst
  std::chrono::seconds heartbeat{300};      // kube.heartbeat_seconds; 0 = no heartbeat writes
  double startup_jitter_s = 2;              // kube.startup_jitter_seconds: spreads a fleet restart
  double watch_timeout_s = 300;             // kube.watch_timeout_seconds, jittered up to +50%
  std::string event_namespace = "default";  // kube.event_namespace (kubelet puts Node events there)
  std::uint64_t seed = 0;                   // 0: random
  // Read-only DNS facts (Cilium's ConfigMap, CoreDNS endpoints) refreshed every cluster.refresh;
  // null: not read (tests of the Node writes).
  std::shared_ptr<ClusterDnsBoard> cluster_dns;
  ClusterDnsOptions cluster;
};

PublisherOptions publisherOptions(const Options& opts, const Config& config);

std::unique_ptr<Publisher> startPublisher(ClientConfig client, PublisherOptions options,
                                          prometheus::Registry& registry);

}  // namespace nodegate::kube
