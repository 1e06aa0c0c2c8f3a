// The agent's HTTP routes (publish/routes.h).
#include "publish/routes.h"

#include <string>

#include <nlohmann/json.hpp>

namespace nodegate {

void registerHealthRoutes(HttpRouter& router, const AgentEndpoints& ep) {
  router.handle("/healthz", [ep](const HttpRequest&) {
    auto now = Runner::Clock::now();
    auto last = ep.runner->lastCycle().value_or(ep.runner->started());
    double age = std::chrono::duration<double>(now - last).count();
    double limit = 3 * ep.runner->resync().count();
    if (age > limit)
      return HttpResponse::text(503, "unhealthy: no probe cycle finished in the last " +
                                         std::to_string(static_cast<long>(age)) + " s\n");
    return HttpResponse::text(200, "ok\n");
  });
  router.handle("/readyz", [ep](const HttpRequest&) {
    if (!ep.runner->snapshot()->complete)
      return HttpResponse::text(503, "not ready: first probe cycle not finished\n");
    return HttpResponse::text(200, "ready\n");
  });
}

void registerCoreRoutes(HttpRouter& router, const AgentEndpoints& ep) {
  registerHealthRoutes(router, ep);
  router.handle("/metrics", [ep](const HttpRequest&) {
    if (ep.process) ep.process->refresh();
    HttpResponse r = HttpResponse::text(200, serializeMetrics(*ep.registry));
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
}

void registerDebugRoutes(HttpRouter& router, const AgentEndpoints& ep) {
  registerCoreRoutes(router, ep);
  auto dump = [](const nlohmann::json& j) {
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  router.handle("/api/v1/checks", [ep, dump](const HttpRequest&) {
    auto j = snapshotJson(*ep.runner->snapshot(), ep.page_info.runbook_base_url);
    if (ep.holds) {
      auto h = ep.holds->toJson();
      j["gate"]["holds"] = h["holds"];
      j["gate"]["pod_view"] = h["pod_view"];
    }
    return HttpResponse::json(200, dump(j));
  });
  router.handlePrefix("/api/v1/checks/", [ep, dump](const HttpRequest& req) {
    // The name is compared decoded and whole: "cpu-virt%00" is "cpu-virt\0", not cpu-virt.
    std::string name = percentDecode(req.path.substr(std::string("/api/v1/checks/").size()));
    auto snap = ep.runner->snapshot();
    if (const CheckState* st = snap->find(name))
      return HttpResponse::json(200,
                                dump(checkStateJson(*st, *snap, ep.page_info.runbook_base_url)));
    return HttpResponse::json(404, dump({{"error", "no such check"}, {"check", name}}));
  });
  router.handle("/", [ep](const HttpRequest&) {
    return HttpResponse::html(
        200, renderPage(*ep.runner->snapshot(), ep.page_info, *ep.sections, ep.holds.get()));
  });
}

AgentRouters makeAgentRouters(const AgentEndpoints& ep) {
  AgentRouters r{std::make_shared<HttpRouter>(), std::make_shared<HttpRouter>(),
                 std::make_shared<HttpRouter>()};
  registerHealthRoutes(*r.health, ep);
  registerCoreRoutes(*r.core, ep);
  registerDebugRoutes(*r.debug, ep);
  return r;
}

// Prometheus and the kubelet send their request at once and are answered in about a
// millisecond, so 16 workers serve them many times over; each costs ~50 KiB resident
// (docs/benchmarks/agent.md). A client that dribbles its request is cut off after 2 s: 24 such
// clients delay a scrape by about one timeout (test/agent/http_robustness_test.py). More than 16
// that keep reconnecting delay scrapes for as long as they go on; the kubelet's probes do not
// come here (--health-listen).
HttpServer::Limits metricsListenerLimits() {
  return {.worker_threads = 16, .queue = 64, .backlog = 128, .request_timeout_ms = 2000};
}

// The kubelet runs at most three probes of the pod at once (startup, liveness, readiness), each
// on a new connection; only processes on the node itself can connect to loopback.
HttpServer::Limits healthListenerLimits() {
  return {.max_body_bytes = 0,
          .max_header_bytes = 8 * 1024,
          .worker_threads = 4,
          .queue = 16,
          .backlog = 64,
          .request_timeout_ms = 1000};
}

// One engineer, the CLI and the page, through loopback (kubectl port-forward or exec).
HttpServer::Limits debugListenerLimits() {
  return {.worker_threads = 4, .queue = 32, .request_timeout_ms = 2000, .loopback_host_only = true};
}

Result<std::vector<std::unique_ptr<HttpServer>>> startAgentListeners(
    const ListenAddresses& addresses, const AgentRouters& routers) {
  std::vector<std::unique_ptr<HttpServer>> servers;
  struct Want {
    const std::string& address;
    std::shared_ptr<HttpRouter> router;
    const char* name;
    HttpServer::Limits limits;
  };
  for (const Want& w : {Want{addresses.metrics, routers.core, "metrics", metricsListenerLimits()},
                        Want{addresses.health, routers.health, "health", healthListenerLimits()},
                        Want{addresses.debug, routers.debug, "debug", debugListenerLimits()}}) {
    if (w.address.empty() && std::string_view(w.name) != "metrics") continue;
    auto s = HttpServer::start(w.address, w.router, w.name, w.limits);
    if (!s) return s.error();
    servers.push_back(std::move(s).value());
  }
  return servers;
}

}  // namespace nodegate
