#include "dns/accounting.h"

#include <map>
#include <tuple>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

namespace nodegate::dns {
namespace {

GuestDnsState stateOf(Verdict v) {
  switch (v) {
    case Verdict::ServerError:
      return GuestDnsState::ServerError;
    case Verdict::Unanswered:
      return GuestDnsState::NoResponse;
    case Verdict::ServiceTranslationMissing:
      return GuestDnsState::ServiceTranslationMissing;
    default:
      return GuestDnsState::Ok;
  }
}

std::string detailOf(const QueryTrace& t) {
  std::string d = t.qname + " " + qtypeName(t.qtype) + ": ";
  if (t.verdict == Verdict::ServerError) return d + (t.rcode ? rcodeName(*t.rcode) : "error");
  if (t.verdict == Verdict::Answered) return d + "answered";
  d += "no answer, last seen at " + std::string(hopName(t.last_hop));
  if (t.verdict == Verdict::ServiceTranslationMissing)
    d += " with the service IP " + t.original_daddr + " untranslated";
  if (!t.drop_reason.empty())
    d += ", kernel drop " + t.drop_reason +
         (t.drop_hop == Hop::Unknown ? " beyond the traced hops"
                                     : " at " + std::string(hopName(t.drop_hop)));
  return d;
}

const prometheus::Histogram::BucketBoundaries kLatencyBuckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

}  // namespace

struct Accounting::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : queries(prometheus::BuildCounter()
                    .Name("nodegate_dns_queries_total")
                    .Help("Guest DNS queries by final result (answered, server_error, unanswered, "
                          "service_translation_missing)")
                    .Register(r)),
        latency(prometheus::BuildHistogram()
                    .Name("nodegate_dns_hop_latency_seconds")
                    .Help("Round trip of guest DNS queries as seen at each hop of the path")
                    .Register(r)),
        drops(prometheus::BuildCounter()
                  .Name("nodegate_dns_drops_total")
                  .Help("Guest DNS queries lost with a kernel drop of one of their packets, by hop "
                        "and reason")
                  .Register(r)),
        lost(prometheus::BuildCounter()
                 .Name("nodegate_bpf_events_lost_total")
                 .Help("BPF ring buffer records lost because the buffer was full")
                 .Register(r)
                 .Add({})),
        evictions(prometheus::BuildCounter()
                      .Name("nodegate_dns_trace_evictions_total")
                      .Help("Queries the correlation engine dropped to stay within its memory caps")
                      .Register(r)),
        attached(prometheus::BuildGauge()
                     .Name("nodegate_dns_hops_attached")
                     .Help("Network devices the DNS tracer is attached to")
                     .Register(r)
                     .Add({})) {}
  prometheus::Family<prometheus::Counter>& queries;
  prometheus::Family<prometheus::Histogram>& latency;
  prometheus::Family<prometheus::Counter>& drops;
  prometheus::Counter& lost;
  prometheus::Family<prometheus::Counter>& evictions;
  prometheus::Gauge& attached;

  // prometheus-cpp's Family::Add() builds a new metric on every call (a histogram with all its
  // buckets) and discards it when the labels exist; per finished query and hop that was the
  // largest part of accounting. These look each label set up once. Nothing here ever removes a
  // metric from its family, so the references stay valid.
  prometheus::Histogram& latencyAt(Hop hop) {
    auto& h = latency_by_hop_[hop];
    if (h == nullptr) h = &latency.Add({{"hop", std::string(hopName(hop))}}, kLatencyBuckets);
    return *h;
  }
  prometheus::Counter& queriesOf(const std::string& ns, const std::string& vmi, Verdict v) {
    auto& c = queries_by_key_[{ns, vmi, v}];
    if (c == nullptr)
      c = &queries.Add({{"namespace", ns}, {"vmi", vmi}, {"result", std::string(verdictName(v))}});
    return *c;
  }

 private:
  std::map<Hop, prometheus::Histogram*> latency_by_hop_;
  std::map<std::tuple<std::string, std::string, Verdict>, prometheus::Counter*> queries_by_key_;
};

Accounting::Accounting(prometheus::Registry& registry, AccountingLimits limits)
    : limits_(limits), metrics_(std::make_unique<Metrics>(registry)) {}

Accounting::~Accounting() = default;

std::string Accounting::vmiLabel(const std::string& vmi) {
  if (metric_vmis_.count(vmi) || metric_vmis_.size() < limits_.max_vmis) {
    metric_vmis_.insert(vmi);
    return vmi;
  }
  return "_other/_other";
}

void Accounting::account(std::vector<QueryTrace> finished, const CorrelatorStats& engine) {
  auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mu_);
  for (auto& t : finished) {
    std::string label = vmiLabel(t.vmi);
    auto slash = label.find('/');
    std::string ns = slash == std::string::npos ? "" : label.substr(0, slash);
    std::string name = slash == std::string::npos ? label : label.substr(slash + 1);
    metrics_->queriesOf(ns, name, t.verdict).Increment();
    for (const auto& s : t.query_path)
      if (auto l = t.hopLatencyNs(s.hop))
        metrics_->latencyAt(s.hop).Observe(static_cast<double>(*l) / 1e9);
    if (!t.drop_reason.empty())
      metrics_->drops.Add({{"hop", std::string(hopName(t.drop_hop))}, {"reason", t.drop_reason}})
          .Increment();
    auto& q = per_vmi_[t.vmi];
    q.emplace_back(now, std::move(t));
    while (q.size() > limits_.per_vmi) q.pop_front();
  }
  if (engine.evicted_in_flight > evicted_in_flight_seen_) {
    metrics_->evictions.Add({{"kind", "in_flight"}})
        .Increment(static_cast<double>(engine.evicted_in_flight - evicted_in_flight_seen_));
    evicted_in_flight_seen_ = engine.evicted_in_flight;
  }
  if (engine.evicted_done > evicted_done_seen_) {
    metrics_->evictions.Add({{"kind", "done"}})
        .Increment(static_cast<double>(engine.evicted_done - evicted_done_seen_));
    evicted_done_seen_ = engine.evicted_done;
  }
}

void Accounting::eventsLost(std::uint64_t total) {
  std::lock_guard lock(mu_);
  if (total <= lost_seen_) return;
  metrics_->lost.Increment(static_cast<double>(total - lost_seen_));
  lost_seen_ = total;
}

void Accounting::hopsAttached(std::size_t n) {
  metrics_->attached.Set(static_cast<double>(n));
}

void Accounting::present(const std::set<std::string>& vmis) {
  std::lock_guard lock(mu_);
  // Series of VMIs that left the node go with them, keeping the label set bounded over time.
  for (auto it = metric_vmis_.begin(); it != metric_vmis_.end();) {
    if (vmis.count(*it) || per_vmi_.count(*it)) {
      ++it;
      continue;
    }
    it = metric_vmis_.erase(it);
  }
}

Accounting::Summary Accounting::summarize(std::chrono::system_clock::time_point now,
                                          std::size_t guests, std::size_t attached_hops) {
  std::lock_guard lock(mu_);
  Summary out;
  DnsPathSummary& s = out.summary;
  s.updated = now;
  s.guests = guests;
  s.attached_hops = attached_hops;
  std::map<std::string, GuestDnsState> states;
  for (auto it = per_vmi_.begin(); it != per_vmi_.end();) {
    auto& q = it->second;
    while (!q.empty() && now - q.front().first > limits_.window) q.pop_front();
    if (q.empty()) {
      it = per_vmi_.erase(it);
      continue;
    }
    GuestDnsStatus g;
    g.vmi = it->first;
    // The newest verdict is the guest's state: an answer after a failure means it recovered.
    const QueryTrace& newest = q.back().second;
    g.state = stateOf(newest.verdict);
    g.detail = detailOf(newest);
    for (const auto& [when, t] : q) (t.verdict == Verdict::Answered ? g.answered : g.failed)++;
    s.queries_in_window += g.answered + g.failed;
    states[g.vmi] = g.state;
    s.vms.push_back(std::move(g));
    ++it;
  }
  out.changed = states != last_states_;
  last_states_ = std::move(states);
  return out;
}

}  // namespace nodegate::dns
