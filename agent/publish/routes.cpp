// The agent's HTTP routes (publish/routes.h).
#include "publish/routes.h"

#include <string>

#include <nlohmann/json.hpp>

namespace nodegate {

void registerCoreRoutes(HttpRouter& router, const AgentEndpoints& ep) {
  router.handle("/metrics", [ep](const HttpRequest&) {
    if (ep.process) ep.process->refresh();
    HttpResponse r = HttpResponse::text(200, serializeMetrics(*ep.registry));
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  });
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

void registerDebugRoutes(HttpRouter& router, const AgentEndpoints& ep) {
  registerCoreRoutes(router, ep);
  auto dump = [](const nlohmann::json& j) {
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  router.handle("/api/v1/checks", [ep, dump](const HttpRequest&) {
    return HttpResponse::json(
        200, dump(snapshotJson(*ep.runner->snapshot(), ep.page_info.runbook_base_url)));
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
    return HttpResponse::html(200, renderPage(*ep.runner->snapshot(), ep.page_info, *ep.sections));
  });
}

}  // namespace nodegate
