// How other components (DNS tracer, D-Bus time watcher, ...) plug into `nodegate agent`.
//
// 1. Write a factory `Result<std::unique_ptr<Extension>> startMyThing(AgentServices& s)` that
//    starts your threads and registers what you need through AgentServices:
//      - s.registry:      the one prometheus::Registry (agent/publish/metrics.h) for your counters.
//      - s.debug_routes:  routes on --debug-listen (agent/publish/http_server.h), e.g.
//      /api/v1/dns/traces.
//      - s.page:          an HTML section on the status page "/" (agent/publish/page.h).
//      - s.trigger(bits): re-run the probes listening to those bits (any thread, returns at once).
//      - s.snapshot():    the latest published state (cheap: a shared pointer).
//      - s.kernel_events: the agent's kernel event sources (agent/triggers/kernel_events.h), to
//      listen to link and
//                         netns changes with addListener() (remove it in your destructor); null
//                         when none could be opened.
//      - s.cluster_dns:   what the API says about the cluster's DNS (Cilium, CoreDNS endpoints),
//                         kept fresh by the agent's cluster-DNS reader; never null (empty without
//                         an API connection).
//      - s.dns_verdicts:  the board the DNS tracer publishes its guests' verdicts on and the
//                         dns-path probe reads (the same one is in the probes' Seams).
// 2. Add ONE line for it to agentExtensions() in agent/extensions.cpp.
// The agent starts extensions one after another on a starter thread, after the loop and the HTTP
// listeners are up (so a slow start, e.g. loading BPF programs, delays nothing else; routes and
// page sections may be added while serving). It destroys them (their destructor must stop their
// threads) after the listeners and before the loop stops. A factory error is logged as a warning
// and the agent runs on without that extension. AgentServices outlives every extension.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "cli/options.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/result.h"
#include "nodegate/snapshot.h"
#include "publish/http_server.h"
#include "publish/page.h"

namespace nodegate {

class ClusterDnsBoard;
class DnsVerdictBoard;
class KernelEvents;

struct AgentServices {
  const Options& options;
  const HostRoot& host;
  const Config& config;  // the policy as loaded at start (reloads reach probes, not extensions)
  std::shared_ptr<prometheus::Registry> registry;
  HttpRouter& debug_routes;
  PageSections& page;
  std::function<void(std::uint32_t trigger_bits)> trigger;
  std::function<std::shared_ptr<const Snapshot>()> snapshot;
  KernelEvents* kernel_events = nullptr;  // outlives every extension
  std::shared_ptr<const ClusterDnsBoard> cluster_dns;
  std::shared_ptr<DnsVerdictBoard> dns_verdicts;  // the DNS tracer writes, dns-path reads
};

// A running component; destroying it stops it.
class Extension {
 public:
  virtual ~Extension() = default;
};

struct ExtensionFactory {
  const char* name;
  std::function<Result<std::unique_ptr<Extension>>(AgentServices&)> start;
};

// agent/extensions.cpp: every extension the agent starts, one line each.
std::vector<ExtensionFactory> agentExtensions();

}  // namespace nodegate
