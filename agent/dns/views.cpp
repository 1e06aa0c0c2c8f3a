#include "dns/views.h"

#include <algorithm>
#include <map>
#include <set>

namespace nodegate::dns {

Result<TracesQuery> parseTracesQuery(const std::string& query_string) {
  auto q = parseQuery(query_string);
  TracesQuery out;
  try {
    if (q.count("after")) out.after = std::stoull(q["after"]);
    if (q.count("limit")) out.limit = std::min<std::size_t>(std::stoul(q["limit"]), 1000);
  } catch (const std::exception&) {
    return Error{0, "after and limit must be non-negative integers"};
  }
  out.vmi = q.count("vmi") ? q["vmi"] : "";
  if (!out.vmi.empty() && out.vmi.find('/') == std::string::npos)
    return Error{0, "vmi must be NAMESPACE/NAME"};
  return out;
}

nlohmann::json tracesJson(const Correlator& engine, const std::vector<HopDevice>& devices,
                          const TracerFacts& facts, const TracesQuery& q, const TimeBase& base) {
  nlohmann::json j;
  j["tracer"] = "running";
  j["in_flight"] = engine.inFlight();
  const auto& cs = engine.stats();
  const auto& ts = facts.tracer;
  j["stats"] = {{"observations", cs.observations},
                {"orphan_responses", cs.orphan_responses},
                {"orphan_drops", cs.orphan_drops},
                {"evicted_in_flight", cs.evicted_in_flight},
                {"evicted_done", cs.evicted_done},
                {"unaccounted_dropped", cs.unaccounted_dropped},
                {"events", ts.events},
                {"events_lost", ts.events_lost},
                {"drops_available", facts.drops_available},
                {"not_dns", ts.not_dns},
                {"short_packets", ts.short_packets},
                {"frags_skipped", ts.frags_skipped},
                {"ext_skipped", ts.ext_skipped},
                {"tcp_prefix_segments", ts.tcp_prefix_segments},
                {"paged_skipped", ts.paged_skipped}};
  j["discovery"] = {{"link_events", facts.link_events},   {"process_events", facts.process_events},
                    {"rescans", facts.rescans},           {"event_rescans", facts.event_rescans},
                    {"full_rescans", facts.full_rescans}, {"netns_listed", facts.netns_listed},
                    {"pass_seconds", facts.pass_seconds}, {"asked_by", facts.asked_by}};
  std::map<std::string, nlohmann::json> paths;
  for (const auto& d : devices)
    paths[d.vmi].push_back({{"hop", std::string(hopName(d.hop))},
                            {"number", static_cast<int>(d.hop)},
                            {"device", d.ifname},
                            {"netns", d.netns_path.empty() ? "self" : d.netns_path},
                            {"netns_ino", d.netns_ino}});
  nlohmann::json vmis = nlohmann::json::array();
  for (auto& [name, hops] : paths) {
    if (!q.vmi.empty() && name != q.vmi && !name.empty()) continue;
    vmis.push_back({{"vmi", name.empty() ? "(shared)" : name}, {"hops", hops}});
  }
  j["vmis"] = std::move(vmis);
  std::vector<const QueryTrace*> picked;
  for (const auto& t : engine.done())
    if (t.seq > q.after && (q.vmi.empty() || t.vmi == q.vmi)) picked.push_back(&t);
  if (picked.size() > q.limit)
    picked.erase(picked.begin(), picked.end() - static_cast<long>(q.limit));
  nlohmann::json traces = nlohmann::json::array();
  for (const auto* t : picked) traces.push_back(traceJson(*t, base));
  j["traces"] = std::move(traces);
  return j;
}

std::string pageSection(const Correlator& engine, const std::vector<HopDevice>& devices,
                        const TimeBase& base) {
  std::map<std::string, VmiPath> paths;
  std::set<Hop> shared;
  for (const auto& d : devices) {
    if (d.vmi.empty()) {
      shared.insert(d.hop);
      continue;
    }
    auto& p = paths[d.vmi];
    p.vmi = d.vmi;
    if (std::find(p.hops.begin(), p.hops.end(), d.hop) == p.hops.end()) p.hops.push_back(d.hop);
  }
  for (const auto& t : engine.done()) {
    auto it = paths.find(t.vmi);
    if (it == paths.end()) continue;  // a VM that is gone
    it->second.recent.push_back(t);
    if (it->second.recent.size() > 20) it->second.recent.erase(it->second.recent.begin());
  }
  std::vector<VmiPath> out;
  for (auto& [name, p] : paths) {
    for (Hop h : shared) p.hops.push_back(h);
    std::sort(p.hops.begin(), p.hops.end());
    out.push_back(std::move(p));
  }
  std::string note = std::to_string(devices.size()) + " devices traced; " +
                     std::to_string(engine.inFlight()) + " queries in flight";
  return renderDnsSection(out, base, true, note);
}

void registerDnsEndpoints(AgentServices& s,
                          std::function<nlohmann::json(const HttpRequest&, int*)> api,
                          std::function<std::string()> section) {
  s.debug_routes.handle("/api/v1/dns/traces", [api](const HttpRequest& req) {
    int status = 200;
    nlohmann::json j = api(req, &status);
    return HttpResponse::json(
        status, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  });
  s.page.add("dns", "Guest DNS", [section](const Snapshot&) { return section(); });
}

}  // namespace nodegate::dns
