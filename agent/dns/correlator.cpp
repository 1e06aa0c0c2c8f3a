#include "dns/correlator.h"

#include <algorithm>
#include <cctype>

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
  }
  return "unknown";
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

// Resolvers may randomise the case of names (0x20 encoding); the key must not.
std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

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

Correlator::Key Correlator::keyOf(const Observation& o) {
  return {o.id, lower(o.qname), o.qtype, o.tcp};
}

Correlator::Key Correlator::keyOf(const QueryTrace& t) {
  return {t.id, t.qname, t.qtype, t.tcp};
}

void Correlator::observe(const Observation& o) {
  ++stats_.observations;
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
  if (!o.response) {
    std::uint64_t retry_of = 0;
    QueryTrace* t = findForQuery(o, &retry_of);
    if (!t) {
      t = &start(o);
      t->retry_of = retry_of;
    }
    t->query_path.push_back(toSighting(o));
    t->last_ns = std::max(t->last_ns, o.ts_ns);
    return;
  }
  QueryTrace* t = findForResponse(o);
  if (!t) {
    ++stats_.orphan_responses;
    return;
  }
  t->response_path.push_back(toSighting(o));
  t->last_ns = std::max(t->last_ns, o.ts_ns);
  t->rcode = o.rcode;
  t->truncated = t->truncated || o.truncated;
  // The answer reached the first hop the query was seen at: nothing further will happen to it.
  if (o.hop <= lowestHop(t->query_path))
    finish(t->seq, isErrorRcode(o.rcode) ? Verdict::ServerError : Verdict::Answered, o.ts_ns);
}

QueryTrace& Correlator::start(const Observation& o) {
  if (in_flight_.size() >= limits_.max_in_flight && !in_flight_.empty()) {
    // Evicting is counted rather than reported as "unanswered": the engine, not the network,
    // lost track of it.
    auto oldest = in_flight_.begin();
    auto& seqs = by_key_[keyOf(oldest->second)];
    seqs.erase(std::remove(seqs.begin(), seqs.end(), oldest->first), seqs.end());
    if (seqs.empty()) by_key_.erase(keyOf(oldest->second));
    in_flight_.erase(oldest);
    ++stats_.evicted_in_flight;
  }
  QueryTrace t;
  t.seq = next_seq_++;
  t.vmi = o.vmi;
  t.id = o.id;
  t.qname = lower(o.qname);
  t.qtype = o.qtype;
  t.tcp = o.tcp;
  t.ipv6 = o.ipv6;
  t.original_daddr = o.daddr;
  t.first_ns = o.ts_ns;
  t.last_ns = o.ts_ns;
  if (t.tcp) linkTcpRetry(t);
  by_key_[keyOf(t)].push_back(t.seq);
  return in_flight_.emplace(t.seq, std::move(t)).first->second;
}

QueryTrace* Correlator::findForQuery(const Observation& o, std::uint64_t* retry_of) {
  auto it = by_key_.find(keyOf(o));
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
  auto it = by_key_.find(keyOf(o));
  if (it == by_key_.end()) return nullptr;
  // An answer on its way back belongs to the attempt whose answer was already seen further out,
  // else to one whose query got at least this far; oldest first, since with a retry in flight the
  // server answers both in order. An attempt lost on the way out cannot be answered.
  QueryTrace* reached = nullptr;
  QueryTrace* any = nullptr;
  for (std::uint64_t seq : it->second) {
    QueryTrace& t = in_flight_.at(seq);
    if (!sameVmi(o, t) || sightingAt(t.response_path, o.hop)) continue;
    if (!t.response_path.empty()) return &t;
    if (!reached && highestHop(t.query_path) >= o.hop) reached = &t;
    if (!any) any = &t;
  }
  return reached ? reached : any;
}

QueryTrace* Correlator::findForDrop(const Observation& o) {
  // The newest attempt: a drop is reported right after the packet was seen.
  auto it = by_key_.find(keyOf(o));
  if (it == by_key_.end()) return nullptr;
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
    QueryTrace& t = in_flight_.at(*r);
    if (sameVmi(o, t)) return &t;
  }
  return nullptr;
}

void Correlator::linkTcpRetry(QueryTrace& t) const {
  // A resolver that gets a truncated UDP answer asks again over TCP, often with a new id; the
  // question and the guest are what tie the two together.
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

void Correlator::classifyUnanswered(QueryTrace& t) const {
  if (!t.response_path.empty()) {
    // The answer got part of the way back (the first hop missed it): still an answer.
    t.verdict = t.rcode && isErrorRcode(*t.rcode) ? Verdict::ServerError : Verdict::Answered;
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
  if (server_addrs_.count(t.original_daddr)) untranslated_evidence = false;
  t.verdict = reached_host && !translated && untranslated_evidence
                  ? Verdict::ServiceTranslationMissing
                  : Verdict::Unanswered;
}

void Correlator::finish(std::uint64_t seq, Verdict v, std::uint64_t now_ns) {
  auto node = in_flight_.extract(seq);
  if (node.empty()) return;
  QueryTrace t = std::move(node.mapped());
  const Key key = keyOf(t);
  auto& seqs = by_key_[key];
  seqs.erase(std::remove(seqs.begin(), seqs.end(), seq), seqs.end());
  if (seqs.empty()) by_key_.erase(key);

  t.done_ns = now_ns;
  if (v == Verdict::InFlight)
    classifyUnanswered(t);
  else
    t.verdict = v;
  t.last_hop = t.response_path.empty() ? highestHop(t.query_path) : lowestHop(t.response_path);

  newly_done_.push_back(t);
  if (newly_done_.size() > limits_.max_done) newly_done_.erase(newly_done_.begin());
  done_.push_back(std::move(t));
  while (done_.size() > limits_.max_done) {
    done_.pop_front();
    ++stats_.evicted_done;
  }
}

std::vector<QueryTrace> Correlator::expire(std::uint64_t now_ns) {
  std::vector<std::uint64_t> old;
  for (const auto& [seq, t] : in_flight_)
    if (now_ns >= t.first_ns + limits_.timeout_ns) old.push_back(seq);
  for (std::uint64_t seq : old) finish(seq, Verdict::InFlight, now_ns);
  std::vector<QueryTrace> out;
  out.swap(newly_done_);
  return out;
}

}  // namespace nodegate::dns
