// The DNS service's accounting: what finished traces leave behind once the correlation engine
// (correlator.h) is done with them. Prometheus series (the families below), the per-VMI window
// the dns-path probe judges from, and the summary published for it (probes/dns_path.h).
//
// Metrics (DESIGN.md; label sets bounded: VMIs by max_vmis, hops by the hop table, reasons by the
// kernel's skb_drop_reason enum):
//   nodegate_dns_queries_total{namespace,vmi,result}  result = verdictName()
//   nodegate_dns_hop_latency_seconds{hop}             round trip seen at each hop (histogram)
//   nodegate_dns_drops_total{hop,reason}              queries lost with a kernel drop (hop
//                                                     "unknown": dropped beyond the traced devices)
//   nodegate_bpf_events_lost_total                    ring buffer reserve failures
//   nodegate_dns_trace_evictions_total{kind}          in_flight | done: engine caps reached
//   nodegate_dns_hops_attached                        devices being traced
//
// Thread-safe: the worker feeds it, tests and the service read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/registry.h>

#include "dns/correlator.h"
#include "dns_path.h"

namespace nodegate::dns {

struct AccountingLimits {
  std::chrono::seconds window{300};  // what the probe's summary covers
  std::size_t max_vmis = 256;        // metric label cap; beyond: vmi="_other"
  std::size_t per_vmi = 512;         // finished queries kept per VMI in the window
};

class Accounting {
 public:
  Accounting(prometheus::Registry& registry, AccountingLimits limits);
  ~Accounting();

  // Counts traces the engine finished (metrics, window); `engine` is its counters after that.
  void account(std::vector<QueryTrace> finished, const CorrelatorStats& engine);
  // The tracer's total of ring records lost so far; the counter follows it.
  void eventsLost(std::uint64_t total);
  void hopsAttached(std::size_t n);
  // VMIs discovery found on the node now: label bookkeeping of those gone is dropped.
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
  std::string vmiLabel(const std::string& vmi);

  AccountingLimits limits_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex mu_;  // everything below
  std::map<std::string, std::deque<std::pair<std::chrono::system_clock::time_point, QueryTrace>>>
      per_vmi_;  // finished traces in the window, per VMI
  std::map<std::string, GuestDnsState> last_states_;
  std::set<std::string> metric_vmis_;
  std::uint64_t lost_seen_ = 0, evicted_in_flight_seen_ = 0, evicted_done_seen_ = 0;
};

}  // namespace nodegate::dns
