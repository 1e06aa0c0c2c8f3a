// The agent's HTTP endpoints and listeners, separate from runAgent() so tests serve them from a
// Runner built with fake probes. Route contract (DESIGN.md):
//   --health-listen: GET /healthz (503 when no cycle finished within 3 resync periods), /readyz
//                    (503 until the first full cycle)
//   --listen:        GET /metrics and the two above
//   --debug-listen:  all of the above plus /api/v1/checks (its "gate" with the holds kept for
//                    running pods), /api/v1/checks/{name} (404 unknown),
//                    / (the HTML status page) and whatever extensions register.
// Why three listeners: civetweb gives each connection a worker thread until it is served or
// cut off by the request timeout, so clients on the network that dribble their requests can
// hold every worker of --listen for as long as they keep reconnecting. The kubelet's probes must
// not depend on that: they go to --health-listen, a listener of its own on loopback (the pod
// is hostNetwork, so the kubelet reaches it; nobody off the node can), with its own workers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "loop/runner.h"
#include "publish/http_server.h"
#include "publish/kube/hold_board.h"
#include "publish/metrics.h"
#include "publish/page.h"

namespace nodegate {

struct AgentEndpoints {
  std::shared_ptr<Runner> runner;
  std::shared_ptr<prometheus::Registry> registry;
  ProcessMetrics* process = nullptr;  // refreshed on every scrape when set
  const PageSections* sections = nullptr;
  PageInfo page_info;
  std::shared_ptr<const kube::GateHoldBoard> holds;  // what the gate keeps for running pods
};

void registerHealthRoutes(HttpRouter& router, const AgentEndpoints& endpoints);
void registerCoreRoutes(HttpRouter& router, const AgentEndpoints& endpoints);   // + health
void registerDebugRoutes(HttpRouter& router, const AgentEndpoints& endpoints);  // + core

// The addresses of the agent's listeners ("" = that listener is off; metrics is always on).
struct ListenAddresses {
  std::string metrics, health, debug;
};

// The routers the listeners serve; extensions add their routes to debug while it is served.
struct AgentRouters {
  std::shared_ptr<HttpRouter> health, core, debug;
};
AgentRouters makeAgentRouters(const AgentEndpoints& endpoints);

// The limits each listener runs with (why each number: routes.cpp).
HttpServer::Limits metricsListenerLimits();
HttpServer::Limits healthListenerLimits();
HttpServer::Limits debugListenerLimits();

// Starts every listener that has an address; an error (naming the listener) when one fails,
// after stopping the ones already started.
Result<std::vector<std::unique_ptr<HttpServer>>> startAgentListeners(
    const ListenAddresses& addresses, const AgentRouters& routers);

}  // namespace nodegate
