// Entry points of the nodegate subcommands; main() only parses options and dispatches.
#pragma once

#include <signal.h>

#include "cli/options.h"

namespace nodegate {

int runCheck(const Options& opts);        // agent/check_command.cpp
int runAgent(const Options& opts);        // agent/agent.cpp
int runDeviceProbe(const Options& opts);  // agent/cli/device_probe_command.cpp
int runDnsTrace(const Options& opts);     // agent/dns_trace_command.cpp

// How the daemons (agent, device-probe) take signals: SIGTERM, SIGINT and SIGHUP blocked on the
// calling thread, for sigwaitinfo on the returned set (every thread started after inherits the
// mask), and SIGPIPE ignored. Call before any thread starts. In device_probe_command.cpp.
sigset_t blockDaemonSignals();

}  // namespace nodegate
