// The correlation engine: turns per-hop DNS packet sightings into one trace per logical query and
// a verdict per trace. Pure (no clock, no I/O): time comes in with the observations and with
// expire(now), so tests replay synthetic sequences exactly.
//
// One logical query = (VMI, DNS id, question name, qtype, transport) within a window. Addresses
// and ports are not part of the key because both NATs (masquerade in the launcher netns, service
// DNAT on the host) rewrite them; the DNS header and question survive both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dns/hops.h"

namespace nodegate::dns {

// One packet seen at one hop, or one DNS packet the kernel freed with a drop reason.
struct Observation {
  std::uint64_t ts_ns = 0;
  Hop hop = Hop::Unknown;
  bool egress = false;
  bool response = false;   // QR bit
  bool truncated = false;  // TC bit
  bool tcp = false;
  bool ipv6 = false;
  bool drop = false;        // a kfree_skb record, not a tc sighting
  std::string drop_reason;  // decoded name ("NETFILTER_DROP"), drops only
  std::string vmi;          // "ns/name" of the launcher the hop belongs to; "" if unknown
  std::string saddr, daddr;
  std::uint16_t sport = 0, dport = 0;
  std::uint16_t id = 0;
  std::uint16_t qtype = 0;
  std::uint8_t rcode = 0;
  std::string qname;
};

struct Sighting {
  Hop hop = Hop::Unknown;
  std::uint64_t ts_ns = 0;
  std::string saddr, daddr;
  std::uint16_t sport = 0, dport = 0;
};

enum class Verdict {
  InFlight,
  Answered,                   // a response reached the first traced hop (any rcode but errors)
  ServerError,                // answered with SERVFAIL, REFUSED, FORMERR, NOTIMP...
  Unanswered,                 // no response before the timeout
  ServiceTranslationMissing,  // unanswered and seen leaving the host with the service IP still
                              // as destination (the Cilium socket-LB incident)
};
std::string_view verdictName(Verdict v);  // stable: metric "result" label and API

struct QueryTrace {
  std::uint64_t seq = 0;  // unique per engine, increasing
  std::string vmi;
  std::uint16_t id = 0;
  std::string qname;
  std::uint16_t qtype = 0;
  bool tcp = false;
  bool ipv6 = false;
  std::vector<Sighting> query_path;     // in arrival order
  std::vector<Sighting> response_path;  // in arrival order
  Verdict verdict = Verdict::InFlight;
  std::optional<std::uint8_t> rcode;
  bool truncated = false;          // the answer had the TC bit
  std::uint64_t retry_of = 0;      // seq of an earlier identical query (guest retry)
  std::uint64_t tcp_retry_of = 0;  // seq of the truncated UDP query this TCP one retries
  std::string drop_reason;         // kernel drop reason of one of its packets, if recorded
  Hop drop_hop = Hop::Unknown;
  bool drop_on_response = false;
  std::string drop_daddr;       // destination of the dropped packet (NAT evidence)
  Hop last_hop = Hop::Unknown;  // furthest hop reached (query or response direction)
  std::string original_daddr;   // destination as the guest sent it
  std::uint64_t first_ns = 0, last_ns = 0, done_ns = 0;

  // Round trip seen at a hop: response time minus query time there, if both were seen.
  std::optional<std::uint64_t> hopLatencyNs(Hop h) const;
  // The guest-visible latency: at the lowest hop that saw both directions.
  std::optional<std::uint64_t> latencyNs() const;
};

struct CorrelatorLimits {
  std::uint64_t timeout_ns = 5'000'000'000;          // unanswered after this long
  std::uint64_t tcp_link_window_ns = 5'000'000'000;  // TC answer -> TCP retry
  std::size_t max_in_flight = 4096;                  // oldest in-flight evicted beyond this
  std::size_t max_done = 1024;                       // finished traces kept for the API
};

struct CorrelatorStats {
  std::uint64_t observations = 0;
  std::uint64_t orphan_responses = 0;  // response with no query in flight
  std::uint64_t orphan_drops = 0;
  std::uint64_t evicted_in_flight = 0;  // in-flight cap reached
  std::uint64_t evicted_done = 0;       // finished traces rotated out
};

class Correlator {
 public:
  explicit Correlator(CorrelatorLimits limits = {}) : limits_(limits) {}

  void observe(const Observation& o);
  // Finishes every in-flight query older than the timeout; returns the traces finished by this
  // call and by observe() since the last call (the caller feeds metrics from them once).
  std::vector<QueryTrace> expire(std::uint64_t now_ns);

  // Finished traces, oldest first (bounded by max_done).
  const std::deque<QueryTrace>& done() const { return done_; }
  std::size_t inFlight() const { return in_flight_.size(); }
  const CorrelatorStats& stats() const { return stats_; }
  // Declares that a hop beyond the host veth (HostOut or Server) is traced for this VMI's path, so
  // "never seen translated" is evidence and not just absence of observation.
  void setBeyondHostTraced(bool traced) { beyond_host_traced_ = traced; }
  // The DNS servers' own addresses (CoreDNS endpoints from the API): a query sent straight to
  // one needs no service translation, so losing it is never "translation missing".
  void setServerAddresses(std::set<std::string> addrs) { server_addrs_ = std::move(addrs); }

 private:
  // The VMI is not part of the index key: hops shared by every VM (the DNS server's side, kernel
  // drops) report none, and match a query of any VM; hops that know theirs filter on it.
  struct Key {
    std::uint16_t id;
    std::string qname;
    std::uint16_t qtype;
    bool tcp;
    auto operator<=>(const Key&) const = default;
  };
  QueryTrace* findForQuery(const Observation& o, std::uint64_t* retry_of);
  QueryTrace* findForResponse(const Observation& o);
  QueryTrace* findForDrop(const Observation& o);
  QueryTrace& start(const Observation& o);
  void finish(std::uint64_t seq, Verdict v, std::uint64_t now_ns);
  void linkTcpRetry(QueryTrace& t) const;
  void classifyUnanswered(QueryTrace& t) const;
  static Key keyOf(const Observation& o);
  static Key keyOf(const QueryTrace& t);

  CorrelatorLimits limits_;
  CorrelatorStats stats_;
  bool beyond_host_traced_ = false;
  std::set<std::string> server_addrs_;
  std::uint64_t next_seq_ = 1;
  std::map<std::uint64_t, QueryTrace> in_flight_;     // by seq: oldest first, for eviction
  std::map<Key, std::vector<std::uint64_t>> by_key_;  // seqs in flight per key, oldest first
  std::deque<QueryTrace> done_;
  std::vector<QueryTrace> newly_done_;
};

// DNS names for the response codes and types nodegate shows ("SERVFAIL", "AAAA"); numbers else.
std::string rcodeName(unsigned rcode);
std::string qtypeName(unsigned qtype);
bool isErrorRcode(unsigned rcode);

}  // namespace nodegate::dns
