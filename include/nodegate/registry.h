// The explicit list of probes (probes/registry.cpp): one line each, no self-registration. Every
// other list of checks (conditions, default gate, config validation, docs) derives from it.
#pragma once

#include <vector>

#include "nodegate/config.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"
#include "nodegate/spec.h"

namespace nodegate {

// Every probe, in the order `nodegate check` prints them.
ProbeList makeProbes(const Seams& seams);
// Their specs, in the same order, without building a probe.
const std::vector<const ProbeSpec*>& probeSpecs();
// What --config may name: the probes' specs and the agent's own sections (kube).
const ConfigSchema& configSchema();
// The policy with no --config: configSchema()'s defaults.
Config defaultConfig();

}  // namespace nodegate
