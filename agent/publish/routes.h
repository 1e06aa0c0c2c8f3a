// The agent's HTTP endpoints, separate from runAgent() so tests serve them from a Runner built
// with fake probes. Route contract (DESIGN.md):
//   --listen:       GET /metrics, /healthz (503 when no cycle finished within 3 resync periods),
//                   /readyz (503 until the first full cycle)
//   --debug-listen: all of the above plus /api/v1/checks, /api/v1/checks/{name} (404 unknown),
//                   / (the HTML status page) and whatever extensions register.
#pragma once

#include <memory>

#include <prometheus/registry.h>

#include "loop/runner.h"
#include "publish/http_server.h"
#include "publish/metrics.h"
#include "publish/page.h"

namespace nodegate {

struct AgentEndpoints {
  std::shared_ptr<Runner> runner;
  std::shared_ptr<prometheus::Registry> registry;
  ProcessMetrics* process = nullptr;  // refreshed on every scrape when set
  const PageSections* sections = nullptr;
  PageInfo page_info;
};

void registerCoreRoutes(HttpRouter& router, const AgentEndpoints& endpoints);
void registerDebugRoutes(HttpRouter& router, const AgentEndpoints& endpoints);

}  // namespace nodegate
