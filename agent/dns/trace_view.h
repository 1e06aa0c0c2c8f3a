// The readable forms of finished DNS traces: the JSON of /api/v1/dns/traces (a documented
// contract, also what `nodegate dns trace` reads), the one-line on-call form the CLI prints, and
// the status page's DNS section (per VM, the path as a row of hops in inline SVG).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dns/correlator.h"

namespace nodegate::dns {

// Engine timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns); wall = mono + offset.
struct TimeBase {
  std::int64_t mono_to_wall_ns = 0;
  static TimeBase now();
};

// One trace:
//   {seq, vmi, time, id, qname, qtype, transport: udp|tcp, family: ipv4|ipv6,
//    result: verdictName() (answered|not_found|server_error|refused|unanswered|
//            service_translation_missing|unreachable|connection_refused|slow_failover|
//            truncated_tcp_failed|node_local_cache_down),
//    detail: verdictDetail() (correlator.h), hint: verdictHint()|null,
//    server: the address the guest sent the query to, rcode: "NOERROR"|null, nodata,
//    latency_seconds: number|null, truncated, retry_of, tcp_retry_of, tcp_retried_by (0 = none),
//    tcp_failure: string|null, connect_only (a TCP connection seen without its query),
//    icmp: {type, code, from, hop}|null, reset_hop: string|null,
//    failover: {unanswered_server, lost_seconds, first_attempt}|null,
//    node_local (sent to a node-local DNS cache), cache_upstream: where that cache asked
//    upstream for it|null,
//    last_hop, drop_reason: string|null, drop_hop: string|null,
//    hops: [{hop, number, query: {t_seconds, src, dst}|null, response: {...}|null,
//            latency_seconds: number|null}] in path order}
nlohmann::json traceJson(const QueryTrace& t, const TimeBase& base);

// Which layer a failure belongs to and where to look; "" for an answered query.
std::string verdictHint(const QueryTrace& t);

// The line `nodegate dns trace` prints for one trace JSON (tolerates missing fields: it reads
// whatever agent version answers). Addresses are shown where a NAT changed them.
std::string traceLine(const nlohmann::json& trace);

struct VmiPath {
  std::string vmi;
  std::vector<Hop> hops;           // traced hops of this VM's path, in order
  std::vector<QueryTrace> recent;  // newest last
};

// HTML fragment for the status page (escaped; no scripts, no external assets).
std::string renderDnsSection(const std::vector<VmiPath>& paths, const TimeBase& base,
                             bool tracer_running, const std::string& note);

}  // namespace nodegate::dns
