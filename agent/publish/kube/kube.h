// The Kubernetes publisher's entry point, called by the agent when --kube is not "none".
#pragma once

#include <memory>

#include <prometheus/registry.h>

#include "cli/options.h"
#include "nodegate/result.h"
#include "nodegate/snapshot.h"

namespace nodegate {

// Builds the publisher from --kube/--kubeconfig/in-cluster settings. An Error means the chosen
// mode cannot work (e.g. --kube incluster outside a pod); with --kube auto and nothing found the
// caller falls back to logging.
Result<std::unique_ptr<Publisher>> makeKubePublisher(const Options& opts, const Config& config,
                                                     prometheus::Registry& registry);

}  // namespace nodegate
