// The correlation engine: turns per-hop DNS packet sightings into one trace per logical query and
// a verdict per trace. Pure (no clock, no I/O): time comes in with the observations and with
// expire(now), so tests replay synthetic sequences exactly.
//
// One logical query = (VMI, DNS id, question name, qtype, transport) within a window. Addresses
// and ports are not part of the key because both NATs (masquerade in the launcher netns, service
// DNAT on the host) rewrite them; the DNS header and question survive both.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dns/hops.h"
#include "dns/ring.h"

namespace nodegate::dns {

// One packet seen at one hop, or one DNS packet the kernel freed with a drop reason. Besides DNS
// messages: an ICMP unreachable quoting a query (icmp: addresses and ports are the quoted query's,
// except saddr, the ICMP's sender; id and qname only when the quote held the DNS header), and the
// segments that open or refuse a TCP connection to port 53 (syn/rst: no DNS fields at all).
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
  bool no_answers = false;  // response with no answer records (NODATA when NOERROR)
  bool icmp = false;
  std::uint8_t icmp_code = 0;
  bool syn = false, rst = false, ack = false;
  // syn/rst, icmp about TCP: the sequence number, or with ack the acknowledgement number
  std::uint32_t tcp_seq = 0;
};

struct Sighting {
  Hop hop = Hop::Unknown;
  std::uint64_t ts_ns = 0;
  std::string saddr, daddr;
  std::uint16_t sport = 0, dport = 0;
};

// Each failure belongs to a layer (verdictHint() names it), so each is a verdict of its own.
enum class Verdict : std::uint8_t {
  InFlight,
  Answered,                   // a response with answer records reached the first traced hop
  ServerError,                // answered with SERVFAIL, FORMERR, NOTIMP or another error rcode
  Unanswered,                 // no response before the timeout
  ServiceTranslationMissing,  // unanswered and seen leaving the host with the service IP still
                              // as destination (the Cilium socket-LB incident)
  NotFound,                   // NXDOMAIN, or NOERROR without answer records (NODATA)
  Refused,                    // answered REFUSED (policy)
  Unreachable,                // an ICMP destination unreachable came back for the query
  ConnectionRefused,          // TCP: the server side reset the connection (RST from port 53)
  SlowFailover,               // answered by another server after the one the guest asked first had
                              // not answered: the lookup waited the guest's timeout
  TruncatedTcpFailed,         // a truncated UDP answer whose TCP retry failed or never came
  NodeLocalCacheDown,         // sent to a node-local DNS cache (NodeLocal DNSCache) that is not
                              // there: nothing listens on its address (a kernel NO_SOCKET drop,
                              // an ICMP unreachable, a TCP reset), or it stayed silent and sent no
                              // query upstream for it
};
std::string_view verdictName(Verdict v);  // stable: metric "result" label and API
// Every verdict a finished trace can have, in enum order (docs, tests, label sets).
const std::vector<Verdict>& finishedVerdicts();
// The verdict of a DNS answer by its rcode and whether it carried answer records.
Verdict answerVerdict(std::uint8_t rcode, bool no_answers);
// True for the verdicts of a query the server answered without an error of its own (the guest got
// an answer it can use, though maybe late or negative).
bool serverAnswered(Verdict v);

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
  bool no_answers = false;  // the answer had no answer records
  // An ICMP unreachable for the query: its code, sender and the hop it was seen at.
  std::optional<std::uint8_t> icmp_code;
  std::string icmp_from;
  Hop icmp_hop = Hop::Unknown;
  Hop reset_hop = Hop::Unknown;  // a TCP RST from port 53 was seen here (Unknown: none)
  // A TCP connection attempt seen only as segments without a message (SYN, RST): qname is empty,
  // or the name of the truncated query it retries. The ISN names it across the NATs.
  bool connect_only = false;
  bool connected = false;  // connect_only: the server's SYN+ACK was seen
  std::uint32_t isn = 0;
  // Slow failover: the unanswered attempt to another server this query followed, that server (as
  // the guest addressed it) and the time the lookup lost waiting for it.
  std::uint64_t failover_of = 0;
  std::string failover_server;
  std::uint64_t failover_lost_ns = 0;
  // A truncated answer: the TCP trace that retried it (0: none) and, for TruncatedTcpFailed, how
  // the retry ended ("no TCP retry" or the TCP trace's verdict).
  std::uint64_t tcp_retried_by = 0;
  std::string tcp_failure;
  // Sent to a node-local cache (Correlator::setNodeLocalAddresses): whether the cache was seen
  // asking upstream for the same question while the query was pending, and where it asked.
  bool node_local = false;
  bool node_local_absent = false;  // the address was on no link of the node when it was asked
  bool upstream_seen = false;
  std::string upstream_server;
  // The question is a name of the cluster's own zones (clusterName() with the engine's cluster
  // domains): NXDOMAIN for it means the guest asked a server that cannot see them.
  bool cluster_name = false;

  // Round trip seen at a hop: response time minus query time there, if both were seen.
  std::optional<std::uint64_t> hopLatencyNs(Hop h) const;
  // The guest-visible latency: at the lowest hop that saw both directions.
  std::optional<std::uint64_t> latencyNs() const;
};

// What a finished query leaves for the accounting (accounting.h): made once when the engine
// finishes it, a few hundred bytes where the whole trace with its sightings is ~2 KiB. expire()
// hands these over once a tick, so a tick's worth of them waits in memory (2 500 at 25k queries/s,
// up to max_unaccounted when ticks are late). Implicit from a trace, which is all it is made of.
struct Outcome {
  Outcome(const QueryTrace& t);  // NOLINT(google-explicit-constructor): see above
  std::uint64_t seq = 0;
  std::string vmi;
  Verdict verdict = Verdict::InFlight;
  bool cluster_name = false;  // QueryTrace::cluster_name
  bool nodata = false;        // NOT FOUND as NOERROR without records: the name exists
  std::uint32_t name = 0;     // a hash of the question's name (its case as asked)
  std::string server;         // as the guest addressed it; a slow failover's silent one
  std::uint64_t failover_of = 0, failover_lost_ns = 0;
  std::string detail;  // "NAME TYPE: what happened" (verdictDetail()), for all but Answered
  std::string drop_reason;
  Hop drop_hop = Hop::Unknown;
  // The round trip at each hop that saw both directions (QueryTrace::hopLatencyNs()), by hop
  // number; `timed` has bit n set for hop n.
  std::uint8_t timed = 0;
  std::array<std::uint64_t, 8> hop_latency_ns{};
};

struct CorrelatorLimits {
  std::uint64_t timeout_ns = 5'000'000'000;          // unanswered after this long
  std::uint64_t tcp_link_window_ns = 5'000'000'000;  // TC answer -> TCP retry
  std::size_t max_in_flight = 4096;                  // oldest in-flight evicted beyond this
  std::size_t max_done = 1024;                       // finished traces kept for the API
  // Finished queries the caller has not taken with expire() yet (the accounting's input), oldest
  // dropped beyond. Not max_done: the agent takes them every tick (100 ms), and at 25k queries/s
  // 2 500 finish per tick; capped at 1 024 the metrics missed the rest. 16 384 holds 50k
  // queries/s for over 300 ms.
  std::size_t max_unaccounted = 16384;
};

struct CorrelatorStats {
  std::uint64_t observations = 0;
  std::uint64_t orphan_responses = 0;  // response with no query in flight
  std::uint64_t orphan_drops = 0;
  std::uint64_t orphan_errors = 0;        // ICMP unreachable or TCP RST matching no query
  std::uint64_t evicted_in_flight = 0;    // in-flight cap reached
  std::uint64_t evicted_done = 0;         // finished traces rotated out
  std::uint64_t unaccounted_dropped = 0;  // finished, dropped before expire() took them
};

class Correlator {
 public:
  explicit Correlator(CorrelatorLimits limits = {}) : limits_(limits), done_(limits.max_done) {}

  void observe(const Observation& o);
  // Finishes every in-flight query older than the timeout; returns what the queries finished by
  // this call and by observe() since the last call left (the caller feeds metrics from them
  // once), in the order they finished: the newest of done() are the same queries, whole.
  std::vector<Outcome> expire(std::uint64_t now_ns);

  // Finished traces, oldest first (bounded by max_done).
  const Ring<QueryTrace>& done() const { return done_; }
  std::size_t inFlight() const { return in_flight_.size(); }
  const CorrelatorStats& stats() const { return stats_; }
  // Declares that a hop beyond the host veth (HostOut or Server) is traced for this VMI's path, so
  // "never seen translated" is evidence and not just absence of observation.
  void setBeyondHostTraced(bool traced) { beyond_host_traced_ = traced; }
  // The DNS servers' own addresses (CoreDNS endpoints from the API): a query sent straight to
  // one needs no service translation, so losing it is never "translation missing".
  void setServerAddresses(std::set<std::string> addrs) { server_addrs_ = std::move(addrs); }
  // The addresses of a node-local DNS cache on this node (NodeLocal DNSCache's 169.254.20.10 and
  // whatever else it binds): a query to one is answered by a socket on the node itself, so it
  // needs no service translation and ends at the host veth; the cache's own query upstream is
  // another query, from the node, that is not merged into the guest's trace. Applies to queries
  // that start after the call. `absent`: those of them no link of the node holds (named by the
  // cache's configuration, not set up here yet: the cache has not started on this node).
  void setNodeLocalAddresses(std::set<std::string> addrs, std::set<std::string> absent = {}) {
    node_local_addrs_ = std::move(addrs);
    node_local_absent_ = std::move(absent);
  }
  // The cluster's DNS domains (dns-path.cluster_domain, the Corefile's kubernetes zones), which
  // decide QueryTrace::cluster_name; "cluster.local" until told.
  void setClusterDomains(std::vector<std::string> domains);
  // Truncated answers waiting for the outcome of their TCP retry.
  std::size_t awaitingTcp() const { return awaiting_tcp_.size(); }

 private:
  // The VMI is not part of the index key: hops shared by every VM (the DNS server's side, kernel
  // drops) report none, and match a query of any VM; hops that know theirs filter on it. The name
  // comes first so that every id asked for one name is one range (slow failover).
  struct Key {
    std::string qname;
    std::uint16_t qtype;
    bool tcp;
    std::uint16_t id;
    auto operator<=>(const Key&) const = default;
  };
  QueryTrace* findForQuery(const Observation& o, std::uint64_t* retry_of);
  QueryTrace* findForResponse(const Observation& o);
  QueryTrace* findForDrop(const Observation& o);
  enum class TupleMatch { Same, Reversed, Quoted };
  QueryTrace* findByTuple(const Observation& o, TupleMatch how, bool connections);
  QueryTrace* findConnection(std::uint32_t isn, const Observation& o);
  QueryTrace& start(const Observation& o);
  void makeRoom();
  void observeResponse(const Observation& o);
  void observeIcmp(const Observation& o);
  void observeTcpControl(const Observation& o);
  void startConnection(const Observation& o);
  void connectionEstablished(const Observation& o);
  void finish(std::uint64_t seq, Verdict v, std::uint64_t now_ns);
  void unindex(const QueryTrace& t);
  void settleTruncated(const QueryTrace& tcp);
  void finishAwaiting(std::uint64_t now_ns);
  void retire(QueryTrace t);
  void linkTcpRetry(QueryTrace& t);
  void linkFailover(QueryTrace& t) const;
  void classifyUnanswered(QueryTrace& t) const;
  bool cacheDown(const QueryTrace& t) const;
  void noteUpstream(const QueryTrace& upstream);
  // The index key an observation looks up: filled into probe_, whose name keeps its capacity, so
  // a lookup allocates nothing (every event does one or two). Valid until the next call.
  const Key& lookupKey(const Observation& o);
  static Key keyOf(const QueryTrace& t);

  CorrelatorLimits limits_;
  CorrelatorStats stats_;
  bool beyond_host_traced_ = false;
  std::set<std::string> server_addrs_;
  std::set<std::string> node_local_addrs_, node_local_absent_;
  // When the node last opened a TCP connection to port 53 (a SYN first seen past the host veth):
  // a cache forwarding over TCP (NodeLocal DNSCache's force_tcp) whose upstream does not accept
  // shows nothing else, and the question is not in a SYN.
  std::optional<std::uint64_t> last_node_connect_ns_;
  std::vector<std::string> cluster_domains_{"cluster.local"};
  std::uint64_t next_seq_ = 1;
  std::map<std::uint64_t, QueryTrace> in_flight_;     // by seq: oldest first, for eviction
  std::map<Key, std::vector<std::uint64_t>> by_key_;  // seqs in flight per key, oldest first
  std::map<std::uint32_t, std::uint64_t> by_isn_;     // connect_only traces in flight by ISN
  Key probe_{"", 0, false, 0};                        // lookupKey()'s
  // Truncated UDP answers, finished but for the verdict their TCP retry decides (by seq).
  std::map<std::uint64_t, QueryTrace> awaiting_tcp_;
  // Each new trace is copied into the slot of the one it pushes out, whose strings and paths keep
  // their storage: the traces kept for the API stay where the first of them were allocated
  // instead of spreading over the pages a burst of DNS used (docs/benchmarks/density.md).
  Ring<QueryTrace> done_;
  std::deque<Outcome> newly_done_;  // for expire(): a deque, the oldest go first
};

// What happened, in a few words ("NXDOMAIN from 10.96.0.10", "ICMP port-unreachable from
// 10.244.0.3 at server"): the dns-path check's detail and the API's "detail".
std::string verdictDetail(const QueryTrace& t);
// DNS names for the response codes and types nodegate shows ("SERVFAIL", "AAAA"); numbers else.
std::string rcodeName(unsigned rcode);
std::string qtypeName(unsigned qtype);
bool isErrorRcode(unsigned rcode);
// "port-unreachable", "host-unreachable", "admin-prohibited"... for the code of an ICMP (ipv6:
// ICMPv6) destination unreachable; "code N" for others.
std::string icmpUnreachableName(bool ipv6, unsigned code);
// A name of the cluster's own zones, which only the cluster's DNS answers: at or under one of
// `domains` (case and a final dot do not matter), or Kubernetes-shaped under a domain nodegate
// was not told of (NAME.NAMESPACE.svc, a search-list form, and *.svc.*).
bool clusterName(std::string_view qname, const std::vector<std::string>& domains);

}  // namespace nodegate::dns
