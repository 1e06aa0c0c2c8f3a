// The DNS service's views: the JSON of /api/v1/dns/traces and the status page's DNS section,
// built from what the engine holds and what is traced, and the endpoints that serve them
// (registered whether or not a tracer runs, so a disabled one explains itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dns/correlator.h"
#include "dns/discovery.h"
#include "dns/trace_view.h"
#include "dns_tracer.h"
#include "extension.h"
#include "nodegate/result.h"

namespace nodegate::dns {

// What a GET /api/v1/dns/traces asks for: vmi filters ("ns/name", "" = all), after returns
// traces with seq > after (what --follow polls with), limit caps the newest returned.
struct TracesQuery {
  std::string vmi;
  std::uint64_t after = 0;
  std::size_t limit = 200;
};
// The query string's parameters; an error is the 400 answer's message.
Result<TracesQuery> parseTracesQuery(const std::string& query_string);

// What the tracer and discovery report beside the traces.
struct TracerFacts {
  TracerStats tracer;
  bool drops_available = false;
  bool link_events = false, process_events = false;
  std::uint64_t rescans = 0, event_rescans = 0, full_rescans = 0, netns_listed = 0;
  double pass_seconds = 0;  // wall time of all passes
  // What asked for passes, by kind of event (a pass covers every event since the one before).
  std::map<std::string, std::uint64_t> asked_by;
};

// Shape: {tracer, in_flight, stats, discovery, vmis: [{vmi, hops: [{hop, number, device, netns,
// netns_ino}]}] (vmi "(shared)" holds the DNS server's side every guest uses), traces:
// [traceJson()...] oldest first}.
nlohmann::json tracesJson(const Correlator& engine, const std::vector<HopDevice>& devices,
                          const TracerFacts& facts, const TracesQuery& q, const TimeBase& base);
// Per traced VM its path and its newest traces; VMs that are gone are left out.
std::string pageSection(const Correlator& engine, const std::vector<HopDevice>& devices,
                        const TimeBase& base);

// Serves /api/v1/dns/traces (api answers with a status) and adds the page section.
void registerDnsEndpoints(AgentServices& s,
                          std::function<nlohmann::json(const HttpRequest&, int*)> api,
                          std::function<std::string()> section);

}  // namespace nodegate::dns
