// The explicit list of probes (probes/registry.cpp): one line each, no self-registration.
#pragma once

#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

ProbeList makeProbes(const Seams& seams);

}  // namespace nodegate
