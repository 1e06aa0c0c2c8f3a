// The Kubernetes side of `nodegate agent`, as the composition root (agent.cpp) builds it: the
// settings of each part from flags and --config, then one Connection (credentials, flow control,
// transport) shared by the publisher, local-pv's PV reader and the cluster-DNS reader;
// kubevirt-node's facts come from the publisher's Node watch and the pod source, with no
// request of their own. Nothing
// below agent/ sees Options: each part takes its own settings.
#pragma once

#include <memory>

#include <prometheus/registry.h>

#include "cli/options.h"
#include "kube/cluster_dns.h"
#include "kube/connection.h"
#include "kube/kubevirt_facts.h"
#include "kube/pod_source.h"
#include "kube/pv_source.h"
#include "nodegate/config.h"
#include "nodegate/result.h"
#include "nodegate/snapshot.h"
#include "publish/kube/publisher.h"

namespace nodegate {

struct KubeSettings {
  kube::ConnectionSettings connection;  // kube.qps, kube.burst
  kube::PublisherOptions publisher;
  bool pod_watch = true;  // kube.pod_watch
  kube::PodSourceOptions pods;
  bool pv_discovery = true;  // checks.local-pv.api_discovery
  kube::ApiPvOptions pvs;
  kube::ClusterDnsOptions cluster_dns;
};

// Every part's settings from the flags and the policy file.
KubeSettings kubeSettings(const Options& opts, const Config& config);

struct KubeSide {
  std::shared_ptr<kube::Connection> connection;         // null: --kube none, or auto and no cluster
  std::shared_ptr<Publisher> publisher;                 // the Kubernetes publisher, or the dry run
  std::shared_ptr<kube::PodSource> pods;                // this node's pods; null unless connected
  std::shared_ptr<PvSource> api_pvs;                    // for Seams::api_pvs; null unless connected
  std::unique_ptr<kube::ClusterDnsSource> cluster_dns;  // writes `facts`; null unless connected
  // For Seams::kubevirt: the Node (the publisher's watch) and the virt-handler pods (`pods`);
  // null unless connected.
  std::shared_ptr<kube::KubeVirtFactsBoard> kubevirt;
};

// Connects (unless --kube none) and starts the parts. With --kube auto, no usable cluster means
// the dry-run publisher and a warning; with an explicit mode it is an error. Either publisher
// records what the gate holds back in `holds`.
Result<KubeSide> startKubeSide(const Options& opts, const KubeSettings& settings,
                               prometheus::Registry& registry,
                               std::shared_ptr<ClusterDnsBoard> facts,
                               std::shared_ptr<kube::GateHoldBoard> holds);

}  // namespace nodegate
