// Entry points of the nodegate subcommands; main() only parses options and dispatches.
#pragma once

#include "cli/options.h"

namespace nodegate {

int runCheck(const Options& opts);        // agent/check_command.cpp
int runAgent(const Options& opts);        // agent/agent.cpp
int runDeviceProbe(const Options& opts);  // agent/cli/device_probe_command.cpp
int runDnsTrace(const Options& opts);     // agent/dns_trace_command.cpp

}  // namespace nodegate
