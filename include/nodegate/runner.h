// Running probes: the one place that times a probe, catches what escapes it and enforces the
// "hint on every non-PASS" rule. Used by `nodegate check` and by the agent's loop.
#pragma once

#include <string>
#include <vector>

#include "nodegate/check.h"
#include "nodegate/probe.h"

namespace nodegate {

// Runs one probe; an exception becomes UNKNOWN/ProbeError and is logged.
CheckResult runProbe(Probe& probe, const ProbeContext& ctx);

// The gate: open only when every required check is present and PASS.
bool gateOpen(const std::vector<CheckResult>& results, const Config& config);

// Required checks that keep the gate closed, in the order given.
std::vector<std::string> gateBlockers(const std::vector<CheckResult>& results,
                                      const Config& config);

}  // namespace nodegate
