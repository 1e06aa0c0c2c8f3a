#include "dns/trace_view.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "publish/http_server.h"
#include "publish/page.h"

namespace nodegate::dns {
namespace {

std::string endpoint(const std::string& addr, std::uint16_t port, bool v6) {
  if (addr.empty()) return "";
  return (v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

nlohmann::json sightingJson(const Sighting* s, std::uint64_t first_ns, bool v6) {
  if (!s) return nullptr;
  return {{"t_seconds", static_cast<double>(s->ts_ns - std::min(s->ts_ns, first_ns)) / 1e9},
          {"src", endpoint(s->saddr, s->sport, v6)},
          {"dst", endpoint(s->daddr, s->dport, v6)}};
}

const Sighting* at(const std::vector<Sighting>& path, Hop h) {
  for (const auto& s : path)
    if (s.hop == h) return &s;
  return nullptr;
}

std::vector<Hop> hopsOf(const QueryTrace& t) {
  std::vector<Hop> hops;
  for (const auto* path : {&t.query_path, &t.response_path})
    for (const auto& s : *path)
      if (std::find(hops.begin(), hops.end(), s.hop) == hops.end()) hops.push_back(s.hop);
  std::sort(hops.begin(), hops.end());
  return hops;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 0.01 ? "%.2f ms" : "%.1f ms", seconds * 1e3);
  return buf;
}

std::string str(const nlohmann::json& j, const char* key, std::string fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::uint64_t num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

bool flag(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

std::string verdictHint(const QueryTrace& t) {
  switch (t.verdict) {
    case Verdict::NotFound:
      if (t.cluster_name)
        return "guest resolver configuration: a cluster name is unknown to " + t.original_daddr +
               "; the guest asked a server that cannot see the cluster's zones (not the cluster "
               "DNS), or that server forwards to a resolver that cannot";
      return t.rcode.value_or(0) == 0
                 ? "DNS data: the name exists but has no " + qtypeName(t.qtype) + " record"
                 : "DNS data or guest configuration: the name does not exist where the guest "
                   "asked (a typo, a search-domain expansion, or a server that cannot see the "
                   "zone)";
    case Verdict::ServerError:
      return "DNS server: it failed the query (" +
             (t.rcode ? rcodeName(*t.rcode) : std::string("error")) +
             "); check its logs and its upstream (CoreDNS: the forward target)";
    case Verdict::Refused:
      return "DNS server policy: it refuses this client or this name (ACL, no recursion for the "
             "client, a zone it does not serve)";
    case Verdict::Unreachable:
      return t.icmp_code && icmpUnreachableName(t.ipv6, *t.icmp_code) == "port-unreachable"
                 ? "DNS server host: nothing listens on port 53 at " + t.original_daddr +
                       ", or a firewall rejects the query"
                 : "network: the server cannot be reached (no route, or a firewall rejects it)";
    case Verdict::ConnectionRefused:
      return "DNS server or firewall: port 53 over TCP is closed or reset (`reject with tcp "
             "reset`, a server without TCP)";
    case Verdict::SlowFailover:
      return "guest resolver configuration: its first nameserver " + t.failover_server +
             " does not answer, so every lookup waits the resolver's timeout first; fix or remove "
             "it (dnsPolicy: None with explicit nameservers, options timeout:1 attempts:2)";
    case Verdict::TruncatedTcpFailed:
      return "network policy or guest resolver: the answer needs TCP, and DNS over TCP is blocked "
             "on the path or the guest's resolver does not retry over TCP";
    case Verdict::NodeLocalCacheDown:
      return "node-local DNS cache: the node-local-dns DaemonSet pod on this node is down or not "
             "yet ready (a new node, cilium/cilium#43080); `kubectl -n kube-system get pods -o "
             "wide -l k8s-app=node-local-dns` for this node, and its logs";
    case Verdict::Unanswered:
      if (t.node_local && t.upstream_seen)
        return "DNS server upstream of the node-local cache: the cache at " + t.original_daddr +
               " asked " + t.upstream_server + " and got no answer in time";
      return "network: the query was lost after " + std::string(hopName(t.last_hop)) +
             (t.drop_reason.empty() ? "" : " (kernel drop " + t.drop_reason + ")");
    case Verdict::ServiceTranslationMissing:
      return "CNI service translation: the ClusterIP " + t.original_daddr +
             " was not translated for traffic forwarded from the pod (Cilium socket LB: "
             "socketLB.hostNamespaceOnly=true)";
    default:
      return "";
  }
}

TimeBase TimeBase::now() {
  timespec mono{}, wall{};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  ::clock_gettime(CLOCK_REALTIME, &wall);
  auto ns = [](const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; };
  return {ns(wall) - ns(mono)};
}

nlohmann::json traceJson(const QueryTrace& t, const TimeBase& base) {
  nlohmann::json j;
  j["seq"] = t.seq;
  j["vmi"] = t.vmi;
  auto wall = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(static_cast<std::int64_t>(t.first_ns) + base.mono_to_wall_ns)));
  j["time"] = rfc3339(wall);
  j["id"] = t.id;
  j["qname"] = t.qname;
  j["qtype"] = qtypeName(t.qtype);
  j["transport"] = t.tcp ? "tcp" : "udp";
  j["family"] = t.ipv6 ? "ipv6" : "ipv4";
  j["result"] = std::string(verdictName(t.verdict));
  j["detail"] = verdictDetail(t);
  const std::string hint = verdictHint(t);
  j["hint"] = hint.empty() ? nlohmann::json(nullptr) : nlohmann::json(hint);
  j["server"] = t.original_daddr;
  j["rcode"] = t.rcode ? nlohmann::json(rcodeName(*t.rcode)) : nlohmann::json(nullptr);
  j["nodata"] = t.rcode.value_or(1) == 0 && t.no_answers;
  j["connect_only"] = t.connect_only;
  j["icmp"] = t.icmp_code ? nlohmann::json{{"type", icmpUnreachableName(t.ipv6, *t.icmp_code)},
                                           {"code", *t.icmp_code},
                                           {"from", t.icmp_from},
                                           {"hop", std::string(hopName(t.icmp_hop))}}
                          : nlohmann::json(nullptr);
  j["reset_hop"] = t.reset_hop == Hop::Unknown ? nlohmann::json(nullptr)
                                               : nlohmann::json(std::string(hopName(t.reset_hop)));
  j["failover"] =
      t.failover_of
          ? nlohmann::json{{"unanswered_server", t.failover_server},
                           {"lost_seconds", static_cast<double>(t.failover_lost_ns) / 1e9},
                           {"first_attempt", t.failover_of}}
          : nlohmann::json(nullptr);
  auto lat = t.latencyNs();
  j["latency_seconds"] =
      lat ? nlohmann::json(static_cast<double>(*lat) / 1e9) : nlohmann::json(nullptr);
  j["truncated"] = t.truncated;
  j["retry_of"] = t.retry_of;
  j["tcp_retry_of"] = t.tcp_retry_of;
  j["tcp_retried_by"] = t.tcp_retried_by;
  j["tcp_failure"] =
      t.tcp_failure.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.tcp_failure);
  j["node_local"] = t.node_local;
  j["cache_upstream"] =
      t.upstream_seen ? nlohmann::json(t.upstream_server) : nlohmann::json(nullptr);
  j["last_hop"] = std::string(hopName(t.last_hop));
  j["drop_reason"] =
      t.drop_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.drop_reason);
  j["drop_hop"] = t.drop_reason.empty() ? nlohmann::json(nullptr)
                                        : nlohmann::json(std::string(hopName(t.drop_hop)));
  nlohmann::json hops = nlohmann::json::array();
  for (Hop h : hopsOf(t)) {
    auto hl = t.hopLatencyNs(h);
    hops.push_back({{"hop", std::string(hopName(h))},
                    {"number", static_cast<int>(h)},
                    {"query", sightingJson(at(t.query_path, h), t.first_ns, t.ipv6)},
                    {"response", sightingJson(at(t.response_path, h), t.first_ns, t.ipv6)},
                    {"latency_seconds", hl ? nlohmann::json(static_cast<double>(*hl) / 1e9)
                                           : nlohmann::json(nullptr)}});
  }
  j["hops"] = std::move(hops);
  return j;
}

namespace {

// The answer and its timing, for the verdicts where one came back.
std::string answerText(const nlohmann::json& t) {
  std::string s = str(t, "rcode", "?");
  if (flag(t, "nodata")) s = "NODATA (" + s + ", no answers)";
  if (t.contains("latency_seconds") && t["latency_seconds"].is_number())
    s += " in " + ms(t["latency_seconds"].get<double>());
  if (flag(t, "truncated")) s += " TRUNCATED";
  return s;
}

// What the CLI says after the hops: upper-case words for what went wrong, then the evidence.
std::string resultText(const nlohmann::json& t) {
  const std::string result = str(t, "result", "?");
  if (result == "answered") return answerText(t);
  if (result == "not_found")
    return "NOT FOUND: " + answerText(t) + " from " + str(t, "server", "?");
  if (result == "server_error") return "SERVER ERROR: " + answerText(t);
  if (result == "refused") return "REFUSED: " + answerText(t);
  if (result == "slow_failover" || result == "truncated_tcp_failed")
    return answerText(t) + ", " + (result == "slow_failover" ? "SLOW FAILOVER: " : "TCP FAILED: ") +
           str(t, "detail", "?");
  if (result == "unreachable") return "UNREACHABLE: " + str(t, "detail", "?");
  if (result == "connection_refused") return "CONNECTION REFUSED: " + str(t, "detail", "?");
  if (result == "node_local_cache_down") return "NODE-LOCAL CACHE DOWN: " + str(t, "detail", "?");
  std::string line = result == "service_translation_missing" ? "LOST: service IP not translated"
                                                             : "LOST: no answer";
  line += ", last seen at " + str(t, "last_hop", "?");
  if (t.contains("drop_reason") && t["drop_reason"].is_string())
    line += ", kernel drop " + str(t, "drop_reason") +
            (str(t, "drop_hop", "unknown") == "unknown" ? " beyond the traced hops"
                                                        : " at " + str(t, "drop_hop"));
  return line;
}

}  // namespace

std::string traceLine(const nlohmann::json& t) {
  const std::string qname = str(t, "qname", "?");
  std::string line = str(t, "time", "-") + " " + str(t, "vmi", "?") + " " +
                     (qname.empty() ? "(connection)" : str(t, "qtype", "?") + " " + qname) + " " +
                     str(t, "transport", "udp");
  if (t.contains("id") && t["id"].is_number_unsigned()) {
    char id[16];
    std::snprintf(id, sizeof id, " id=0x%04x", t["id"].get<unsigned>());
    line += id;
  }
  line += " |";
  // Show the 5-tuple at the first hop and again wherever a NAT rewrote it.
  std::string prev_src, prev_dst;
  bool first = true;
  if (t.contains("hops") && t["hops"].is_array()) {
    for (const auto& h : t["hops"]) {
      line += first ? " " : " > ";
      first = false;
      line += str(h, "hop", "?");
      if (h.contains("query") && h["query"].is_object()) {
        std::string src = str(h["query"], "src"), dst = str(h["query"], "dst");
        if (src != prev_src || dst != prev_dst) line += " " + src + "->" + dst;
        prev_src = src;
        prev_dst = dst;
      }
      if (!h.contains("response") || !h["response"].is_object()) line += " (no answer)";
    }
  }
  line += " | " + resultText(t);
  if (num(t, "retry_of")) line += " (retry of #" + std::to_string(num(t, "retry_of")) + ")";
  if (num(t, "tcp_retry_of"))
    line += " (TCP retry of truncated #" + std::to_string(num(t, "tcp_retry_of")) + ")";
  if (t.contains("hint") && t["hint"].is_string()) line += "\n    hint: " + str(t, "hint");
  return line;
}

namespace {

const char* resultClass(Verdict v) {
  switch (v) {
    case Verdict::Answered:
      return "ok";
    case Verdict::ServerError:
    case Verdict::NotFound:
    case Verdict::Refused:
    case Verdict::SlowFailover:
      return "warn";
    case Verdict::InFlight:
      return "none";
    default:
      return "bad";
  }
}

// No answer came back to the guest: the path is drawn up to where the query was last seen.
bool lostOnPath(Verdict v) {
  return v == Verdict::Unanswered || v == Verdict::ServiceTranslationMissing ||
         v == Verdict::Unreachable || v == Verdict::ConnectionRefused ||
         v == Verdict::NodeLocalCacheDown;
}

// Per VM, the servers its resolver waited for in vain before asking the next one, with the
// queries that lost time to each and the time lost (the slow-failover pattern).
std::string failoverSummary(const VmiPath& p) {
  std::map<std::string, std::pair<std::size_t, std::uint64_t>> by_server;
  for (const auto& t : p.recent)
    if (t.failover_of) {
      auto& [n, lost] = by_server[t.failover_server];
      ++n;
      lost += t.failover_lost_ns;
    }
  std::string h;
  for (const auto& [server, v] : by_server)
    h += "<p class=\"dns-failover\">Slow failover: nameserver " + htmlEscape(server) +
         " did not answer; " + std::to_string(v.first) + " recent quer" +
         (v.first == 1 ? "y" : "ies") + " lost " + ms(static_cast<double>(v.second) / 1e9) +
         " waiting for it before the next nameserver answered.</p>";
  return h;
}

// One row of boxes, one per hop, joined by arrows. A hop the query reached is filled; one the
// answer also passed shows its round trip; the last hop of a lost query is outlined in red.
std::string hopRowSvg(const VmiPath& p, const QueryTrace& t) {
  constexpr int kW = 112, kGap = 28, kH = 44;
  const int width = static_cast<int>(p.hops.size()) * (kW + kGap);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                  "\" height=\"" + std::to_string(kH + 24) + "\" role=\"img\" aria-label=\"" +
                  htmlEscape("DNS path of " + p.vmi) + "\">";
  const bool lost = lostOnPath(t.verdict);
  int x = 2;
  for (std::size_t i = 0; i < p.hops.size(); ++i) {
    Hop h = p.hops[i];
    bool q = at(t.query_path, h) != nullptr, r = at(t.response_path, h) != nullptr;
    const char* fill = r ? "#cdeccd" : q ? (lost ? "#fde2c4" : "#e6f0ff") : "#eeeeee";
    bool last = lost && h == t.last_hop;
    s += "<g class=\"hop" + std::string(last ? " last-seen" : "") + "\" data-hop=\"" +
         std::string(hopName(h)) + "\">";
    s += "<rect x=\"" + std::to_string(x) + "\" y=\"2\" width=\"" + std::to_string(kW) +
         "\" height=\"" + std::to_string(kH) + "\" rx=\"6\" fill=\"" + fill + "\" stroke=\"" +
         (last ? "#c62828\" stroke-width=\"3" : "#888888\" stroke-width=\"1") + "\"/>";
    s += "<text x=\"" + std::to_string(x + kW / 2) +
         "\" y=\"20\" text-anchor=\"middle\" font-size=\"12\">" + std::string(hopName(h)) +
         "</text>";
    std::string sub = r   ? ms(static_cast<double>(t.hopLatencyNs(h).value_or(0)) / 1e9)
                      : q ? (last ? "last seen" : "query only")
                          : "not seen";
    s += "<text x=\"" + std::to_string(x + kW / 2) +
         "\" y=\"37\" text-anchor=\"middle\" font-size=\"11\">" + htmlEscape(sub) + "</text></g>";
    if (i + 1 < p.hops.size())
      s += "<line x1=\"" + std::to_string(x + kW) + "\" y1=\"24\" x2=\"" +
           std::to_string(x + kW + kGap - 4) + "\" y2=\"24\" stroke=\"#555555\"/>";
    x += kW + kGap;
  }
  std::string caption =
      t.qname + " " + qtypeName(t.qtype) + ": " + std::string(verdictName(t.verdict));
  if (t.verdict != Verdict::Answered) caption += " (" + verdictDetail(t) + ")";
  s += "<text x=\"2\" y=\"" + std::to_string(kH + 18) + "\" font-size=\"12\">" +
       htmlEscape(caption) + "</text></svg>";
  return s;
}

}  // namespace

std::string renderDnsSection(const std::vector<VmiPath>& paths, const TimeBase& base,
                             bool tracer_running, const std::string& note) {
  std::string h;
  if (!tracer_running) {
    h += "<p>DNS tracer not running";
    if (!note.empty()) h += ": " + htmlEscape(note);
    h += ".</p>";
    return h;
  }
  if (!note.empty()) h += "<p>" + htmlEscape(note) + "</p>";
  if (paths.empty()) return h + "<p>No guests traced on this node.</p>";
  for (const auto& p : paths) {
    h += "<div class=\"dns-vm\" id=\"dns-" + htmlEscape(p.vmi) + "\"><h3>" + htmlEscape(p.vmi) +
         "</h3>";
    if (p.recent.empty()) {
      h += "<p>No DNS queries seen yet.</p></div>";
      continue;
    }
    // The newest failure if there is one (that is what on-call needs to see), else the newest.
    const QueryTrace* shown = &p.recent.back();
    for (auto it = p.recent.rbegin(); it != p.recent.rend(); ++it)
      if (it->verdict != Verdict::Answered) {
        shown = &*it;
        break;
      }
    h += hopRowSvg(p, *shown);
    if (const std::string hint = verdictHint(*shown); !hint.empty())
      h += "<p class=\"dns-hint\">" + htmlEscape(hint) + "</p>";
    h += failoverSummary(p);
    h += "<table class=\"dns-recent\"><tr><th>time</th><th>query</th><th>result</th>"
         "<th>latency</th><th>last hop</th><th>drop reason</th></tr>";
    std::size_t n = 0;
    for (auto it = p.recent.rbegin(); it != p.recent.rend() && n < 10; ++it, ++n) {
      auto j = traceJson(*it, base);
      auto lat = it->latencyNs();
      h += "<tr class=\"" + std::string(resultClass(it->verdict)) + "\"><td>" +
           htmlEscape(j["time"].get<std::string>()) + "</td><td>" +
           htmlEscape(it->qname + " " + qtypeName(it->qtype) + (it->tcp ? " tcp" : "")) +
           "</td><td>" +
           htmlEscape(std::string(verdictName(it->verdict)) +
                      (it->rcode ? " " + rcodeName(*it->rcode) : "")) +
           "</td><td>" + (lat ? ms(static_cast<double>(*lat) / 1e9) : "-") + "</td><td>" +
           std::string(hopName(it->last_hop)) + "</td><td>" +
           htmlEscape(it->drop_reason.empty() ? "-" : it->drop_reason) + "</td></tr>";
    }
    h += "</table></div>";
  }
  return h;
}

}  // namespace nodegate::dns
