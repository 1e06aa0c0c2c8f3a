// The DNS service's accounting: what finished traces leave behind once the correlation engine
// (correlator.h) is done with them. Prometheus series (the families below), the per-VMI window
// the dns-path probe judges from, and the summary published for it (probes/dns_path.h).
//
// Metrics (DESIGN.md, docs/metrics.md). Every label set is bounded, and what a cap keeps out is
// counted in nodegate_dns_series_limited_total and logged once per overflow:
//   nodegate_dns_queries_total{namespace,vmi,result}  result = verdictName(); at most max_vmis
//                                                     VMIs (beyond: namespace/vmi "_other"); a
//                                                     VMI's series go when it leaves the node
//   nodegate_dns_hop_latency_seconds{hop}             round trip seen at each hop (histogram);
//                                                     bounded by the hop table
//   nodegate_dns_drops_total{hop,reason}              queries lost with a kernel drop (hop
//                                                     "unknown": dropped beyond the traced
//                                                     devices); at most max_drop_series pairs
//                                                     (beyond: reason "_other")
//   nodegate_bpf_events_lost_total                    ring buffer reserve failures
//   nodegate_dns_trace_evictions_total{kind}          in_flight | done | unaccounted: engine caps
//                                                     reached (unaccounted: finished queries
//                                                     dropped before a tick took them, so missing
//                                                     from every other family here)
//   nodegate_dns_hops_attached                        devices being traced
//   nodegate_dns_series_limited_total{family,reason}  queries a family gave no series of their
//                                                     own: reason "cap" (counted under the
//                                                     "_other" series) or "vmi_gone" (a query of
//                                                     a VMI that had left the node finished late;
//                                                     not counted per VMI)
//
// The window holds, per VMI on the node, its finished queries (time, seq, verdict, the state it
// stands for, the detail of a failed one) and the seqs of the silent attempts its resolver failed
// over from: all the probe's summary reads. A VMI's state is the worst of its queries since its
// newest clean answer (by seq: when the queries started, not when they finished), so an answer
// after a failure means it recovered, and a slow failover (the silent attempt at A, then B's
// answer) stays SlowFailover in whichever order the two finish. Queries of no VMI (seen only at
// the shared server side) are counted in the metrics but judge no guest.
//
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/registry.h>

#include "dns/correlator.h"
#include "dns/ring.h"
#include "dns_path.h"

namespace nodegate::dns {

struct AccountingLimits {
  std::chrono::seconds window{300};  // what the probe's summary covers
  std::size_t max_vmis = 256;        // VMIs with series of their own; beyond: vmi="_other"
  std::size_t max_drop_series = 64;  // (hop, reason) pairs; beyond: reason="_other"
  std::size_t per_vmi = 512;         // finished queries kept per VMI in the window
};

class Accounting {
 public:
  Accounting(prometheus::Registry& registry, AccountingLimits limits);
  ~Accounting();

  // Counts queries the engine finished (metrics, window); `engine` is its counters after that.
  void account(std::vector<Outcome> finished, const CorrelatorStats& engine);
  // The tracer's total of ring records lost so far; the counter follows it.
  void eventsLost(std::uint64_t total);
  void hopsAttached(std::size_t n);
  // The VMIs discovery found on the node now ("" = the shared side). A VMI no longer among them
  // leaves the window (the probe stops judging it) and its series leave /metrics; a query of it
  // that finishes later is counted as vmi_gone only. Call before the first account().
  void present(const std::set<std::string>& vmis);

  // The probe's view at `now`, the window trimmed to it; `changed`: some guest's state differs
  // from the previous summary's.
  struct Summary {
    DnsPathSummary summary;
    bool changed = false;
  };
  Summary summarize(std::chrono::system_clock::time_point now, std::size_t guests,
                    std::size_t attached_hops);

 private:
  struct Metrics;
  // One finished query in a VMI's window: 32 bytes. A window keeps up to per_vmi of them (512) for
  // each VMI, so after a burst over 100 VMs they are most of what the agent holds
  // (docs/benchmarks/density.md: 6.5 MiB at 112 bytes an entry). What only a query that failed
  // its guest needs is out of line, and the server is an index into the window's own names.
  struct Failure {
    std::string detail;
    std::uint64_t lost_ns = 0;  // slow failover: the time lost to the server
    bool nodata = false;        // NOERROR without records: the name exists (another type may not)
  };
  static constexpr std::uint16_t kNoServer = 0xffff;
  struct Entry {
    std::chrono::system_clock::time_point when;
    std::uint64_t seq = 0;
    std::unique_ptr<Failure> failure;  // set when `state` is not Ok
    std::uint32_t name = 0;            // hash of the question's name
    std::uint16_t server = kNoServer;  // VmiWindow::server_names (slow failover: the silent one)
    Verdict verdict = Verdict::InFlight;
    GuestDnsState state = GuestDnsState::Ok;  // what this query alone says
  };
  // What one window says of each server its entries name: the newest clean answer to it, and the
  // path failures (failingServers()) after that answer. Pointers into VmiWindow::entries.
  struct ServerMarks {
    std::uint64_t clean = 0;
    std::vector<const Entry*> failures;
  };
  struct VmiWindow {
    explicit VmiWindow(std::size_t per_vmi) : entries(per_vmi) {}
    Ring<Entry> entries;  // in arrival order, at most limits_.per_vmi
    // The servers its entries name, each once (the guest's few nameservers). intern() drops the
    // names no entry uses any more once they outnumber the entries, so a guest asking ever new
    // addresses cannot grow it past twice the window.
    std::vector<std::string> server_names;
    std::uint16_t intern(const std::string& server);
    const std::string& serverName(const Entry& e) const;
    // failover_of of answers whose silent attempt has not finished yet (bounded by per_vmi).
    std::set<std::uint64_t> failed_over;
    // summarize()'s verdict of this window, valid while `judged`: every change to entries clears
    // it. A summary re-judges only the windows that changed, so a tick after a burst costs the
    // VMIs, not the queries they keep (at 100 VMIs, 512 each, judging every window every tick was
    // ~9 % of a core with no DNS at all: docs/benchmarks/density.md).
    bool judged = false;
    GuestDnsStatus status;
    std::map<std::string, ServerMarks> servers;
  };
  void judge(const std::string& vmi, VmiWindow& w) const;  // fills status and servers
  static void markServers(VmiWindow& w);
  static constexpr std::size_t kMaxFailingServers = 64;  // in the summary, the first by address
  std::vector<DnsPathSummary::FailingServer> failingServers() const;
  // The nodegate_dns_queries_total series of a VMI's queries with verdict v ("_other" beyond the
  // cap, counted there), looked up once per VMI and verdict: per query that was a split of the
  // name, two string-keyed maps and a set.
  prometheus::Counter& queriesCounter(const std::string& vmi, Verdict v);
  void forget(const std::string& vmi);

  AccountingLimits limits_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex mu_;  // everything below
  std::set<std::string> present_;
  std::map<std::string, VmiWindow> per_vmi_;  // VMIs with finished queries in the window
  std::map<std::string, GuestDnsState> last_states_;
  std::map<std::string, GuestDnsState> last_failing_;  // failing servers, the previous summary's
  // failingServers() as of the last summary; computed again when some window was judged or left.
  std::vector<DnsPathSummary::FailingServer> failing_;
  bool failing_stale_ = true;
  // VMIs with series of their own, and the series found so far, by verdict.
  static constexpr std::size_t kVerdicts =
      static_cast<std::size_t>(Verdict::NodeLocalCacheDown) + 1;
  std::map<std::string, std::array<prometheus::Counter*, kVerdicts>> metric_vmis_;
  bool vmi_cap_logged_ = false, drop_cap_logged_ = false;
  std::uint64_t lost_seen_ = 0, evicted_in_flight_seen_ = 0, evicted_done_seen_ = 0;
  std::uint64_t unaccounted_seen_ = 0;
};

}  // namespace nodegate::dns
