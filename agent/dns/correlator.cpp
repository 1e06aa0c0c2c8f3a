#include "dns/correlator.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <iterator>

namespace nodegate::dns {

std::string_view hopName(Hop h) {
  switch (h) {
    case Hop::Tap:
      return "tap";
    case Hop::Bridge:
      return "bridge";
    case Hop::LauncherEth0:
      return "launcher-eth0";
    case Hop::HostVeth:
      return "host-veth";
    case Hop::HostOut:
      return "host-out";
    case Hop::Server:
      return "server";
    case Hop::Unknown:
      break;
  }
  return "unknown";
}

Hop hopFromNumber(unsigned n) {
  switch (n) {
    case 1:
      return Hop::Tap;
    case 2:
      return Hop::Bridge;
    case 4:
      return Hop::LauncherEth0;
    case 5:
      return Hop::HostVeth;
    case 6:
      return Hop::HostOut;
    case 7:
      return Hop::Server;
    default:
      return Hop::Unknown;
  }
}

std::string_view verdictName(Verdict v) {
  switch (v) {
    case Verdict::InFlight:
      return "in_flight";
    case Verdict::Answered:
      return "answered";
    case Verdict::ServerError:
      return "server_error";
    case Verdict::Unanswered:
      return "unanswered";
    case Verdict::ServiceTranslationMissing:
      return "service_translation_missing";
    case Verdict::NotFound:
      return "not_found";
    case Verdict::Refused:
      return "refused";
    case Verdict::Unreachable:
      return "unreachable";
    case Verdict::ConnectionRefused:
      return "connection_refused";
    case Verdict::SlowFailover:
      return "slow_failover";
    case Verdict::TruncatedTcpFailed:
      return "truncated_tcp_failed";
    case Verdict::NodeLocalCacheDown:
      return "node_local_cache_down";
  }
  return "unknown";
}

const std::vector<Verdict>& finishedVerdicts() {
  static const std::vector<Verdict> kAll = {
      Verdict::Answered,          Verdict::ServerError,
      Verdict::Unanswered,        Verdict::ServiceTranslationMissing,
      Verdict::NotFound,          Verdict::Refused,
      Verdict::Unreachable,       Verdict::ConnectionRefused,
      Verdict::SlowFailover,      Verdict::TruncatedTcpFailed,
      Verdict::NodeLocalCacheDown};
  return kAll;
}

Verdict answerVerdict(std::uint8_t rcode, bool no_answers) {
  switch (rcode) {
    case 0:
      return no_answers ? Verdict::NotFound : Verdict::Answered;
    case 3:
      return Verdict::NotFound;
    case 5:
      return Verdict::Refused;
    default:
      return Verdict::ServerError;
  }
}

bool serverAnswered(Verdict v) {
  return v == Verdict::Answered || v == Verdict::NotFound || v == Verdict::SlowFailover;
}

std::string rcodeName(unsigned rcode) {
  static const char* const kNames[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN",
                                       "NOTIMP",  "REFUSED", "YXDOMAIN", "YXRRSET",
                                       "NXRRSET", "NOTAUTH", "NOTZONE"};
  if (rcode < std::size(kNames)) return kNames[rcode];
  return "RCODE" + std::to_string(rcode);
}

std::string qtypeName(unsigned qtype) {
  switch (qtype) {
    case 1:
      return "A";
    case 2:
      return "NS";
    case 5:
      return "CNAME";
    case 6:
      return "SOA";
    case 12:
      return "PTR";
    case 15:
      return "MX";
    case 16:
      return "TXT";
    case 28:
      return "AAAA";
    case 33:
      return "SRV";
    case 65:
      return "HTTPS";
    case 255:
      return "ANY";
    default:
      return "TYPE" + std::to_string(qtype);
  }
}

// NXDOMAIN is an answer (the name does not exist); the others mean the server failed the client.
bool isErrorRcode(unsigned rcode) {
  return rcode != 0 && rcode != 3;
}

std::string icmpUnreachableName(bool ipv6, unsigned code) {
  static const char* const k4[] = {"net-unreachable",
                                   "host-unreachable",
                                   "protocol-unreachable",
                                   "port-unreachable",
                                   "fragmentation-needed",
                                   "source-route-failed",
                                   "net-unknown",
                                   "host-unknown",
                                   "source-host-isolated",
                                   "net-prohibited",
                                   "host-prohibited",
                                   "net-unreachable-for-tos",
                                   "host-unreachable-for-tos",
                                   "admin-prohibited"};
  static const char* const k6[] = {
      "no-route",         "admin-prohibited", "beyond-scope", "address-unreachable",
      "port-unreachable", "policy-fail",      "reject-route"};
  if (!ipv6 && code < std::size(k4)) return k4[code];
  if (ipv6 && code < std::size(k6)) return k6[code];
  return "code " + std::to_string(code);
}

namespace {

std::string_view withoutFinalDot(std::string_view s) {
  while (!s.empty() && s.back() == '.') s.remove_suffix(1);
  return s;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool clusterName(std::string_view qname, const std::vector<std::string>& domains) {
  const std::string_view name = withoutFinalDot(qname);
  for (const auto& d : domains) {
    const std::string_view domain = withoutFinalDot(d);
    if (domain.empty() || domain.size() > name.size()) continue;
    const std::string_view tail = name.substr(name.size() - domain.size());
    if (iequal(tail, domain) &&
        (name.size() == domain.size() || name[name.size() - domain.size() - 1] == '.'))
      return true;
  }
  std::string lowered(name);
  for (auto& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lowered.find(".svc.") != std::string::npos ||
         (lowered.size() > 4 && lowered.compare(lowered.size() - 4, 4, ".svc") == 0);
}

void Correlator::setClusterDomains(std::vector<std::string> domains) {
  cluster_domains_ = std::move(domains);
}

namespace {

const Sighting* sightingAt(const std::vector<Sighting>& path, Hop h) {
  for (const auto& s : path)
    if (s.hop == h) return &s;
  return nullptr;
}

Hop lowestHop(const std::vector<Sighting>& path) {
  Hop h = Hop::Unknown;
  for (const auto& s : path)
    if (h == Hop::Unknown || s.hop < h) h = s.hop;
  return h;
}

Hop highestHop(const std::vector<Sighting>& path) {
  Hop h = Hop::Unknown;
  for (const auto& s : path) h = std::max(h, s.hop);
  return h;
}

// Resolvers may randomise the case of names (0x20 encoding); the key must not. ASCII only, as
// DNS compares names (RFC 4343) and as std::tolower() does in the "C" locale the agent runs in,
// without a call into libc per character.
char lowerAscii(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
std::string lower(std::string s) {
  for (auto& c : s) c = lowerAscii(c);
  return s;
}

constexpr std::size_t kPathHops = 6;  // Tap, Bridge, LauncherEth0, HostVeth, HostOut, Server

bool sameVmi(const Observation& o, const QueryTrace& t) {
  return o.vmi.empty() || o.vmi == t.vmi;
}

Sighting toSighting(const Observation& o) {
  return {o.hop, o.ts_ns, o.saddr, o.daddr, o.sport, o.dport};
}

}  // namespace

std::optional<std::uint64_t> QueryTrace::hopLatencyNs(Hop h) const {
  const Sighting* q = sightingAt(query_path, h);
  const Sighting* r = sightingAt(response_path, h);
  if (!q || !r || r->ts_ns < q->ts_ns) return std::nullopt;
  return r->ts_ns - q->ts_ns;
}

std::optional<std::uint64_t> QueryTrace::latencyNs() const {
  std::optional<std::uint64_t> best;
  Hop best_hop = Hop::Unknown;
  for (const auto& q : query_path) {
    auto l = hopLatencyNs(q.hop);
    if (l && (best_hop == Hop::Unknown || q.hop < best_hop)) {
      best = l;
      best_hop = q.hop;
    }
  }
  return best;
}

Outcome::Outcome(const QueryTrace& t)
    : seq(t.seq),
      vmi(t.vmi),
      verdict(t.verdict),
      cluster_name(t.cluster_name),
      nodata(t.verdict == Verdict::NotFound && t.rcode.value_or(3) == 0),
      name(static_cast<std::uint32_t>(std::hash<std::string>{}(t.qname))),
      server(t.failover_of ? t.failover_server : t.original_daddr),
      failover_of(t.failover_of),
      failover_lost_ns(t.failover_lost_ns),
      drop_reason(t.drop_reason),
      drop_hop(t.drop_hop) {
  if (t.verdict != Verdict::Answered)
    detail = t.qname + " " + qtypeName(t.qtype) + ": " + verdictDetail(t);
  for (const auto& s : t.query_path) {
    const auto n = static_cast<unsigned>(s.hop);
    if (n >= hop_latency_ns.size() || (timed & (1u << n))) continue;
    if (auto l = t.hopLatencyNs(s.hop)) {
      timed = static_cast<std::uint8_t>(timed | (1u << n));
      hop_latency_ns[n] = *l;
    }
  }
}

const Correlator::Key& Correlator::lookupKey(const Observation& o) {
  probe_.qname.assign(o.qname);
  for (auto& c : probe_.qname) c = lowerAscii(c);
  probe_.qtype = o.qtype;
  probe_.tcp = o.tcp;
  probe_.id = o.id;
  return probe_;
}

Correlator::Key Correlator::keyOf(const QueryTrace& t) {
  return {t.qname, t.qtype, t.tcp, t.id};
}

void Correlator::observe(const Observation& o) {
  ++stats_.observations;
  if (o.syn || o.rst) return observeTcpControl(o);
  if (o.icmp) return observeIcmp(o);
  if (o.drop) {
    QueryTrace* t = findForDrop(o);
    if (!t) {
      ++stats_.orphan_drops;
      return;
    }
    // The first drop explains the loss; later ones are copies of the same fate.
    if (t->drop_reason.empty()) {
      t->drop_reason = o.drop_reason;
      // Unknown when the device is not on a traced path (dropped somewhere beyond the hops).
      t->drop_hop = o.hop;
      t->drop_on_response = o.response;
      t->drop_daddr = o.daddr;
    }
    t->last_ns = std::max(t->last_ns, o.ts_ns);
    return;
  }
  if (o.response) return observeResponse(o);
  // A query over TCP on a connection whose opening was seen: the connection did its job.
  if (o.tcp && !by_isn_.empty()) connectionEstablished(o);
  std::uint64_t retry_of = 0;
  QueryTrace* t = findForQuery(o, &retry_of);
  const bool started = !t;
  if (!t) {
    t = &start(o);
    t->retry_of = retry_of;
  }
  t->query_path.push_back(toSighting(o));
  t->last_ns = std::max(t->last_ns, o.ts_ns);
  if (started && o.hop >= Hop::HostOut && o.vmi.empty()) noteUpstream(*t);
}

// A query the node itself sent (first seen past the host veth): when a guest's query to a
// node-local cache with the same question is pending, it is the cache asking upstream, over UDP
// or TCP and with an id of its own (dnsmasq) or the guest's (CoreDNS): the cache is alive.
void Correlator::noteUpstream(const QueryTrace& upstream) {
  for (auto it = by_key_.lower_bound(Key{upstream.qname, upstream.qtype, false, 0});
       it != by_key_.end() && it->first.qname == upstream.qname &&
       it->first.qtype == upstream.qtype;
       ++it)
    for (std::uint64_t seq : it->second) {
      QueryTrace& t = in_flight_.at(seq);
      if (!t.node_local || t.upstream_seen || t.first_ns > upstream.first_ns) continue;
      t.upstream_seen = true;
      t.upstream_server = upstream.query_path.front().daddr;
    }
}

void Correlator::observeResponse(const Observation& o) {
  QueryTrace* t = findForResponse(o);
  if (!t) {
    ++stats_.orphan_responses;
    return;
  }
  if (t->response_path.empty()) t->response_path.reserve(kPathHops);
  t->response_path.push_back(toSighting(o));
  t->last_ns = std::max(t->last_ns, o.ts_ns);
  t->rcode = o.rcode;
  // A truncated answer often carries no records at all (they did not fit): that is not NODATA.
  t->no_answers = o.no_answers && !o.truncated;
  t->truncated = t->truncated || o.truncated;
  // The answer reached the first hop the query was seen at: nothing further will happen to it.
  if (o.hop <= lowestHop(t->query_path))
    finish(t->seq, answerVerdict(o.rcode, t->no_answers), o.ts_ns);
}

// An ICMP error is matched to its query by the quoted DNS header where the quote has one, by the
// connection's ISN for TCP, else by the quoted ports and destination as seen at the same hop (the
// NATs rewrite the quote as they rewrite the query, so it matches that hop's sighting).
void Correlator::observeIcmp(const Observation& o) {
  // Fragmentation needed is path MTU discovery at work, not a refusal of the query.
  if (!o.ipv6 && o.icmp_code == 4) return;
  QueryTrace* t = nullptr;
  if (o.tcp) {
    t = findConnection(o.tcp_seq, o);
  } else if (!o.qname.empty()) {
    auto it = by_key_.find(lookupKey(o));
    if (it != by_key_.end())
      for (auto r = it->second.rbegin(); r != it->second.rend() && !t; ++r)
        if (sameVmi(o, in_flight_.at(*r))) t = &in_flight_.at(*r);
  }
  if (!t) t = findByTuple(o, TupleMatch::Quoted, false);
  if (!t) {
    ++stats_.orphan_errors;
    return;
  }
  if (!t->icmp_code) {
    t->icmp_code = o.icmp_code;
    t->icmp_from = o.saddr;
    t->icmp_hop = o.hop;
  }
  t->last_ns = std::max(t->last_ns, o.ts_ns);
  // Back at the guest: classified now (Unreachable, unless the query left untranslated).
  if (o.hop <= lowestHop(t->query_path)) finish(t->seq, Verdict::InFlight, o.ts_ns);
}

// SYN, SYN+ACK and RST of TCP connections to port 53. A client's SYN opens a connect_only trace
// named by its ISN; the server's SYN+ACK and a RST answering the SYN acknowledge ISN + 1, which
// both NATs leave alone. A RST later in the connection is matched by its addresses at its hop.
void Correlator::observeTcpControl(const Observation& o) {
  if (o.syn && !o.ack) {
    if (!o.drop) return startConnection(o);
    QueryTrace* t = findConnection(o.tcp_seq, o);
    if (!t) {
      ++stats_.orphan_drops;
    } else if (t->drop_reason.empty()) {
      t->drop_reason = o.drop_reason;
      t->drop_hop = o.hop;
      t->drop_daddr = o.daddr;
    }
    return;
  }
  if (o.drop) return;  // a dropped SYN+ACK or RST: the guest just sees nothing
  QueryTrace* t = o.ack ? findConnection(o.tcp_seq - 1, o) : nullptr;
  if (!t && o.rst) t = findByTuple(o, TupleMatch::Reversed, false);
  if (!t) {
    if (o.rst) ++stats_.orphan_errors;
    return;
  }
  t->last_ns = std::max(t->last_ns, o.ts_ns);
  if (o.syn) {
    t->connected = true;
    if (!sightingAt(t->response_path, o.hop)) t->response_path.push_back(toSighting(o));
    return;
  }
  if (t->reset_hop == Hop::Unknown) t->reset_hop = o.hop;
  if (o.hop <= lowestHop(t->query_path)) finish(t->seq, Verdict::ConnectionRefused, o.ts_ns);
}

QueryTrace* Correlator::findConnection(std::uint32_t isn, const Observation& o) {
  auto it = by_isn_.find(isn);
  if (it == by_isn_.end()) return nullptr;
  QueryTrace& t = in_flight_.at(it->second);
  return sameVmi(o, t) ? &t : nullptr;
}

// The newest in-flight trace of the observation's transport whose query was seen at the
// observation's hop with the observation's addresses: the same ones (Same), the other way round (a
// segment from the server, Reversed), or the quoted destination and source port of an ICMP error
// (Quoted: its source address is the ICMP's sender). A linear walk: only ICMP errors, resets and
// TCP queries on an opened connection take it.
QueryTrace* Correlator::findByTuple(const Observation& o, TupleMatch how, bool connections) {
  for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
    QueryTrace& t = it->second;
    if (t.tcp != o.tcp || !sameVmi(o, t) || (connections && !t.connect_only)) continue;
    const Sighting* s = sightingAt(t.query_path, o.hop);
    if (!s) continue;
    bool match = false;
    switch (how) {
      case TupleMatch::Same:
        match = s->saddr == o.saddr && s->sport == o.sport && s->daddr == o.daddr &&
                s->dport == o.dport;
        break;
      case TupleMatch::Reversed:
        match = s->saddr == o.daddr && s->sport == o.dport && s->daddr == o.saddr &&
                s->dport == o.sport;
        break;
      case TupleMatch::Quoted:
        match = s->sport == o.sport && s->daddr == o.daddr && s->dport == o.dport;
        break;
    }
    if (match) return &t;
  }
  return nullptr;
}

void Correlator::startConnection(const Observation& o) {
  if (QueryTrace* t = findConnection(o.tcp_seq, o)) {
    // The SYN at the next hop, or the client sending it again (same ISN) where it was seen.
    if (!sightingAt(t->query_path, o.hop)) t->query_path.push_back(toSighting(o));
    t->last_ns = std::max(t->last_ns, o.ts_ns);
    return;
  }
  makeRoom();
  QueryTrace t;
  t.seq = next_seq_++;
  t.vmi = o.vmi;
  t.tcp = true;
  t.ipv6 = o.ipv6;
  t.connect_only = true;
  t.isn = o.tcp_seq;
  t.original_daddr = o.daddr;
  t.node_local = o.hop < Hop::HostOut && node_local_addrs_.count(o.daddr);
  t.node_local_absent = t.node_local && node_local_absent_.count(o.daddr);
  if (o.hop >= Hop::HostOut && o.vmi.empty())
    last_node_connect_ns_ = std::max(last_node_connect_ns_.value_or(0), o.ts_ns);
  t.first_ns = t.last_ns = o.ts_ns;
  t.query_path.push_back(toSighting(o));
  linkTcpRetry(t);
  by_isn_[t.isn] = t.seq;
  in_flight_.emplace(t.seq, std::move(t));
}

// A query went over a connection whose SYN opened a connect_only trace: that trace is done with,
// silently (the query's own trace tells what happened; start() links it to a truncated answer).
void Correlator::connectionEstablished(const Observation& o) {
  QueryTrace* c = findByTuple(o, TupleMatch::Same, true);
  if (!c) return;
  by_isn_.erase(c->isn);
  in_flight_.erase(c->seq);
}

// Evicting is counted rather than reported as "unanswered": the engine, not the network, lost
// track of it.
void Correlator::makeRoom() {
  if (in_flight_.size() < limits_.max_in_flight || in_flight_.empty()) return;
  auto oldest = in_flight_.begin();
  unindex(oldest->second);
  in_flight_.erase(oldest);
  ++stats_.evicted_in_flight;
}

QueryTrace& Correlator::start(const Observation& o) {
  makeRoom();
  QueryTrace t;
  t.seq = next_seq_++;
  t.vmi = o.vmi;
  t.id = o.id;
  t.qname = lower(o.qname);
  t.qtype = o.qtype;
  t.tcp = o.tcp;
  t.ipv6 = o.ipv6;
  t.original_daddr = o.daddr;
  t.node_local = o.hop < Hop::HostOut && node_local_addrs_.count(o.daddr);
  t.node_local_absent = t.node_local && node_local_absent_.count(o.daddr);
  t.first_ns = o.ts_ns;
  t.last_ns = o.ts_ns;
  // Room for the whole path (docs/dns-path.md: 6 hops) at once: growing by doubling was four
  // allocations and three moves of the sightings per direction.
  t.query_path.reserve(kPathHops);
  if (t.tcp) linkTcpRetry(t);
  if (!t.vmi.empty()) linkFailover(t);
  by_key_[keyOf(t)].push_back(t.seq);
  return in_flight_.emplace(t.seq, std::move(t)).first->second;
}

QueryTrace* Correlator::findForQuery(const Observation& o, std::uint64_t* retry_of) {
  auto it = by_key_.find(lookupKey(o));
  if (it == by_key_.end()) return nullptr;
  // Among attempts that have not passed this hop yet, the newest one that got just short of it
  // is the one moving: an older attempt stalled at the same place was lost there. Events of one
  // packet can arrive slightly out of hop order (different CPUs), hence the fallback.
  QueryTrace* fallback = nullptr;
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
    QueryTrace& t = in_flight_.at(*r);
    if (!sameVmi(o, t) || o.ts_ns > t.first_ns + limits_.timeout_ns) continue;
    // A query already seen at this hop that comes by again is the guest asking again (same id is
    // what glibc and dig do on a retry); the earlier attempt keeps its own verdict.
    if (sightingAt(t.query_path, o.hop) || !t.response_path.empty()) continue;
    // A node-local cache answers from the node: what leaves past the host veth with the same
    // question (and, from CoreDNS, the same id) is the cache's own query upstream.
    if (t.node_local && o.hop >= Hop::HostOut) continue;
    if (highestHop(t.query_path) < o.hop) return &t;
    fallback = &t;
  }
  if (fallback) return fallback;
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r)
    if (sameVmi(o, in_flight_.at(*r))) {
      *retry_of = *r;
      break;
    }
  return nullptr;
}

QueryTrace* Correlator::findForResponse(const Observation& o) {
  auto it = by_key_.find(lookupKey(o));
  if (it == by_key_.end()) return nullptr;
  // An answer on its way back belongs to the attempt whose answer was already seen further out,
  // else to one whose query got at least this far; oldest first, since with a retry in flight the
  // server answers both in order. An attempt lost on the way out cannot be answered. An answer
  // comes from where the query went at the same hop: with attempts at two servers in flight (slow
  // failover, same id) the second server's answer is the second attempt's. That is a preference,
  // not a rule: a device whose two directions see different NAT states still matches.
  for (const bool same_server : {true, false}) {
    QueryTrace* reached = nullptr;
    QueryTrace* any = nullptr;
    for (std::uint64_t seq : it->second) {
      QueryTrace& t = in_flight_.at(seq);
      if (!sameVmi(o, t) || sightingAt(t.response_path, o.hop)) continue;
      const Sighting* q = sightingAt(t.query_path, o.hop);
      if (same_server && q && (q->daddr != o.saddr || q->dport != o.sport)) continue;
      if (!t.response_path.empty()) return &t;
      if (!reached && highestHop(t.query_path) >= o.hop) reached = &t;
      if (!any) any = &t;
    }
    if (reached || any) return reached ? reached : any;
  }
  return nullptr;
}

QueryTrace* Correlator::findForDrop(const Observation& o) {
  // The newest attempt: a drop is reported right after the packet was seen.
  auto it = by_key_.find(lookupKey(o));
  if (it == by_key_.end()) return nullptr;
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
    QueryTrace& t = in_flight_.at(*r);
    if (sameVmi(o, t)) return &t;
  }
  return nullptr;
}

void Correlator::linkTcpRetry(QueryTrace& t) {
  // A resolver that gets a truncated UDP answer asks again over TCP, often with a new id; the
  // question and the guest are what tie the two together. A connection seen only by its SYN has no
  // question yet: the truncated answer from the same server is what it retries.
  for (auto it = awaiting_tcp_.rbegin(); it != awaiting_tcp_.rend(); ++it) {
    QueryTrace& u = it->second;
    if (u.vmi != t.vmi || t.first_ns < u.last_ns ||
        t.first_ns - u.last_ns > limits_.tcp_link_window_ns)
      continue;
    if (t.connect_only ? u.original_daddr != t.original_daddr || u.tcp_retried_by != 0
                       : u.qname != t.qname || u.qtype != t.qtype)
      continue;
    t.tcp_retry_of = u.seq;
    u.tcp_retried_by = t.seq;
    if (t.connect_only) {
      t.qname = u.qname;  // what the connection is for, for the reader
      t.qtype = u.qtype;
    }
    return;
  }
  if (t.connect_only) return;
  // A truncated answer finished another way (its answer missed the first hop).
  std::size_t looked = 0;
  for (auto it = done_.rbegin(); it != done_.rend() && looked < 256; ++it, ++looked) {
    const QueryTrace& u = *it;
    if (u.tcp || !u.truncated || u.vmi != t.vmi || u.qname != t.qname || u.qtype != t.qtype)
      continue;
    if (t.first_ns < u.done_ns || t.first_ns - u.done_ns > limits_.tcp_link_window_ns) continue;
    t.tcp_retry_of = u.seq;
    return;
  }
}

// A resolver with several nameservers asks the next one when the first stays silent for its
// timeout (glibc: resolv.conf `options timeout:N`, at least 1 s), with the same question and, in
// glibc, the same id. A query that starts while an earlier attempt at the same question from the
// same guest to another server is still unanswered follows that attempt; sooner than
// kMinFailoverNs it is a resolver asking every server at once (musl), not a failover.
void Correlator::linkFailover(QueryTrace& t) const {
  constexpr std::uint64_t kMinFailoverNs = 200'000'000;
  const QueryTrace* best = nullptr;
  for (auto it = by_key_.lower_bound(Key{t.qname, t.qtype, t.tcp, 0});
       it != by_key_.end() && it->first.qname == t.qname && it->first.qtype == t.qtype &&
       it->first.tcp == t.tcp;
       ++it) {
    for (std::uint64_t seq : it->second) {
      const QueryTrace& u = in_flight_.at(seq);
      if (u.vmi != t.vmi || !u.response_path.empty() || u.icmp_code ||
          u.reset_hop != Hop::Unknown || u.original_daddr == t.original_daddr ||
          u.first_ns + kMinFailoverNs > t.first_ns)
        continue;
      if (!best || u.first_ns > best->first_ns) best = &u;
    }
  }
  if (!best) return;
  t.failover_of = best->seq;
  t.failover_server = best->original_daddr;
  t.failover_lost_ns = t.first_ns - best->first_ns;
}

void Correlator::classifyUnanswered(QueryTrace& t) const {
  // What came back part of the way (the first hop missed it) still says what happened.
  if (t.reset_hop != Hop::Unknown) {
    t.verdict = Verdict::ConnectionRefused;
    return;
  }
  if (!t.response_path.empty() && !t.connect_only) {
    t.verdict = answerVerdict(t.rcode.value_or(0), t.no_answers);
    return;
  }
  bool reached_host = false, translated = false, untranslated_evidence = false;
  for (const auto& s : t.query_path) {
    if (!beyondLauncher(s.hop)) continue;
    reached_host = true;
    if (s.daddr != t.original_daddr) translated = true;
    // The host veth's ingress runs before netfilter's PREROUTING DNAT, so only later hops can
    // prove that the destination was left alone.
    if (s.hop >= Hop::HostOut && s.daddr == t.original_daddr) untranslated_evidence = true;
  }
  if (!t.drop_reason.empty() && !t.drop_on_response && !t.drop_daddr.empty()) {
    if (t.drop_daddr != t.original_daddr)
      translated = true;
    else if (beyondLauncher(t.drop_hop) || (t.drop_hop == Hop::Unknown && reached_host))
      untranslated_evidence = true;
  }
  if (reached_host && !translated && beyond_host_traced_) untranslated_evidence = true;
  // A query straight to a server, or to a cache on the node, needs no translation; one the node
  // itself sent (first seen past the host veth) is seen after its own NAT.
  if (server_addrs_.count(t.original_daddr) || t.node_local ||
      lowestHop(t.query_path) >= Hop::HostOut)
    untranslated_evidence = false;
  // An ICMP error for a query that left untranslated (no route for the ClusterIP) is a symptom:
  // the missing translation is the cause.
  t.verdict = reached_host && !translated && untranslated_evidence
                  ? Verdict::ServiceTranslationMissing
              : t.icmp_code ? Verdict::Unreachable
                            : Verdict::Unanswered;
}

// A query to a node-local cache that failed: is the cache the reason? Nothing listening on its
// address is proof (the kernel's NO_SOCKET drop, the ICMP unreachable or TCP reset it answers
// with), and so is its address being on no link of the node (the cache has not set it up). Plain
// silence is only when the cache did not ask upstream either, and only where its upstream queries
// would have been seen (a traced server hop); a live cache whose upstream is silent is silent too,
// and keeps its verdict.
bool Correlator::cacheDown(const QueryTrace& t) const {
  switch (t.verdict) {
    case Verdict::Unreachable:
    case Verdict::ConnectionRefused:
      return true;
    case Verdict::Unanswered:
      break;
    default:
      return false;
  }
  if (t.node_local_absent || (t.drop_reason == "NO_SOCKET" && !t.drop_on_response)) return true;
  const bool node_connected = last_node_connect_ns_ && *last_node_connect_ns_ >= t.first_ns;
  return beyond_host_traced_ && !t.upstream_seen && !node_connected;
}

void Correlator::unindex(const QueryTrace& t) {
  if (t.connect_only) {
    by_isn_.erase(t.isn);
    return;
  }
  const Key key = keyOf(t);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  auto& seqs = it->second;
  seqs.erase(std::remove(seqs.begin(), seqs.end(), t.seq), seqs.end());
  if (seqs.empty()) by_key_.erase(it);
}

void Correlator::finish(std::uint64_t seq, Verdict v, std::uint64_t now_ns) {
  auto node = in_flight_.extract(seq);
  if (node.empty()) return;
  QueryTrace t = std::move(node.mapped());
  unindex(t);

  t.done_ns = now_ns;
  t.cluster_name = !t.qname.empty() && clusterName(t.qname, cluster_domains_);
  if (v == Verdict::InFlight)
    classifyUnanswered(t);
  else
    t.verdict = v;
  // The answer came, but only after the guest had waited for another server.
  if (t.failover_of && (t.verdict == Verdict::Answered || t.verdict == Verdict::NotFound))
    t.verdict = Verdict::SlowFailover;
  t.last_hop = t.response_path.empty() ? highestHop(t.query_path) : lowestHop(t.response_path);
  // A connection that opened and carried no query we saw (a health check, or a query on a path
  // we do not trace) is no DNS failure.
  if (t.connect_only && t.connected && v == Verdict::InFlight) return;
  if (t.node_local && cacheDown(t)) t.verdict = Verdict::NodeLocalCacheDown;
  // A truncated answer that reached the guest: its TCP retry decides (settleTruncated()).
  if (t.truncated && !t.tcp && v != Verdict::InFlight) {
    if (awaiting_tcp_.size() >= limits_.max_in_flight) {
      QueryTrace oldest = std::move(awaiting_tcp_.begin()->second);
      awaiting_tcp_.erase(awaiting_tcp_.begin());
      ++stats_.evicted_in_flight;
      retire(std::move(oldest));  // keeps the verdict of its own answer
    }
    awaiting_tcp_.emplace(t.seq, std::move(t));
    return;
  }
  retire(std::move(t));
}

void Correlator::retire(QueryTrace t) {
  const bool settles = t.tcp && t.tcp_retry_of != 0;
  newly_done_.emplace_back(t);
  if (newly_done_.size() > limits_.max_unaccounted) {
    newly_done_.pop_front();
    ++stats_.unaccounted_dropped;
  }
  if (done_.full()) ++stats_.evicted_done;
  done_.overwrite_back(static_cast<const QueryTrace&>(t));  // a copy, into the slot's storage
  if (settles) settleTruncated(done_.empty() ? t : done_.back());
}

// A TCP retry finished: the truncated answer it retried keeps its own verdict if the retry got a
// DNS answer, and is TruncatedTcpFailed otherwise.
void Correlator::settleTruncated(const QueryTrace& tcp) {
  auto it = awaiting_tcp_.find(tcp.tcp_retry_of);
  if (it == awaiting_tcp_.end() || it->second.tcp_retried_by != tcp.seq) return;
  QueryTrace u = std::move(it->second);
  awaiting_tcp_.erase(it);
  const bool got_answer = serverAnswered(tcp.verdict) || tcp.verdict == Verdict::ServerError ||
                          tcp.verdict == Verdict::Refused;
  if (!got_answer) {
    u.verdict = Verdict::TruncatedTcpFailed;
    u.tcp_failure = "TCP retry " + std::string(verdictName(tcp.verdict));
  }
  u.done_ns = tcp.done_ns;
  retire(std::move(u));
}

// Truncated answers whose TCP retry never came within the link window, or was never seen to
// finish (a connection that opened and carried nothing we saw, an evicted trace).
void Correlator::finishAwaiting(std::uint64_t now_ns) {
  for (auto it = awaiting_tcp_.begin(); it != awaiting_tcp_.end();) {
    const QueryTrace& u = it->second;
    const bool linked = u.tcp_retried_by != 0;
    if (now_ns < u.last_ns + limits_.tcp_link_window_ns + (linked ? limits_.timeout_ns : 0)) {
      ++it;
      continue;
    }
    QueryTrace t = std::move(it->second);
    it = awaiting_tcp_.erase(it);
    t.verdict = Verdict::TruncatedTcpFailed;
    t.tcp_failure = linked ? "TCP retry not seen to finish" : "no TCP retry";
    t.done_ns = now_ns;
    retire(std::move(t));
  }
}

std::vector<Outcome> Correlator::expire(std::uint64_t now_ns) {
  std::vector<std::uint64_t> old;
  for (const auto& [seq, t] : in_flight_)
    if (now_ns >= t.first_ns + limits_.timeout_ns) old.push_back(seq);
  for (std::uint64_t seq : old) finish(seq, Verdict::InFlight, now_ns);
  finishAwaiting(now_ns);
  std::vector<Outcome> out(std::make_move_iterator(newly_done_.begin()),
                           std::make_move_iterator(newly_done_.end()));
  newly_done_.clear();
  return out;
}

namespace {

std::string seconds(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ns) / 1e9);
  return buf;
}

std::string icmpText(const QueryTrace& t) {
  return "ICMP " + icmpUnreachableName(t.ipv6, t.icmp_code.value_or(0)) + " from " +
         (t.icmp_from.empty() ? "?" : t.icmp_from) + " at " + std::string(hopName(t.icmp_hop));
}

std::string lostText(const QueryTrace& t) {
  std::string d = "no answer, last seen at " + std::string(hopName(t.last_hop));
  if (t.verdict == Verdict::ServiceTranslationMissing)
    d += " with the service IP " + t.original_daddr + " untranslated";
  if (!t.drop_reason.empty())
    d += ", kernel drop " + t.drop_reason +
         (t.drop_hop == Hop::Unknown ? " beyond the traced hops"
                                     : " at " + std::string(hopName(t.drop_hop)));
  if (t.node_local && t.upstream_seen)
    d += "; the node-local cache asked " + t.upstream_server + " upstream";
  return d;
}

// What shows that nothing serves the node-local cache's address (Correlator::cacheDown()).
std::string cacheDownText(const QueryTrace& t) {
  std::string d = "node-local DNS cache " + t.original_daddr + " is not serving: ";
  if (t.icmp_code) return d + icmpText(t);
  if (t.reset_hop != Hop::Unknown)
    return d + "TCP port 53 reset at " + std::string(hopName(t.reset_hop));
  if (t.drop_reason == "NO_SOCKET")
    return d + "no socket on port 53 (kernel drop NO_SOCKET at " +
           std::string(hopName(t.drop_hop)) + ")";
  if (t.node_local_absent)
    return d +
           "its address is on no link of this node (the cache has not set it up), last seen "
           "at " +
           std::string(hopName(t.last_hop));
  return d + "no answer and no query upstream, last seen at " + std::string(hopName(t.last_hop));
}

}  // namespace

std::string verdictDetail(const QueryTrace& t) {
  const std::string rcode = t.rcode ? rcodeName(*t.rcode) : "error";
  switch (t.verdict) {
    case Verdict::Answered:
      return "answered";
    case Verdict::NotFound:
      return (t.rcode.value_or(0) == 0 ? "NODATA (no " + qtypeName(t.qtype) + " records)" : rcode) +
             " from " + t.original_daddr;
    case Verdict::ServerError:
      return rcode + " from " + t.original_daddr;
    case Verdict::Refused:
      return "REFUSED by " + t.original_daddr;
    case Verdict::Unreachable:
      return icmpText(t);
    case Verdict::ConnectionRefused:
      return "TCP connection to " + t.original_daddr + " port 53 reset at " +
             std::string(hopName(t.reset_hop));
    case Verdict::SlowFailover:
      return "answered by " + t.original_daddr + " after " + t.failover_server +
             " did not answer for " + seconds(t.failover_lost_ns);
    case Verdict::TruncatedTcpFailed:
      return "truncated over UDP, " + (t.tcp_failure.empty() ? "TCP retry failed" : t.tcp_failure);
    case Verdict::NodeLocalCacheDown:
      return cacheDownText(t);
    case Verdict::InFlight:
      return "in flight";
    default:
      return lostText(t);
  }
}

}  // namespace nodegate::dns
