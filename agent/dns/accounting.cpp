#include "dns/accounting.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "nodegate/log.h"

namespace nodegate::dns {
namespace {

// What one query says of its guest's DNS. NXDOMAIN/NODATA is an answer, unless the name is one
// only the cluster's DNS can answer (the guest asked the wrong server, or its forward target
// cannot see the cluster's zones).
GuestDnsState stateOf(const Outcome& t) {
  switch (t.verdict) {
    case Verdict::SlowFailover:
      return GuestDnsState::SlowFailover;
    case Verdict::TruncatedTcpFailed:
      return GuestDnsState::TruncatedTcpFailed;
    case Verdict::Refused:
      return GuestDnsState::Refused;
    case Verdict::ServerError:
      return GuestDnsState::ServerError;
    case Verdict::NotFound:
      return t.cluster_name ? GuestDnsState::ClusterNameNotFound : GuestDnsState::Ok;
    case Verdict::Unreachable:
    case Verdict::ConnectionRefused:
      return GuestDnsState::Unreachable;
    case Verdict::Unanswered:
      return GuestDnsState::NoResponse;
    case Verdict::ServiceTranslationMissing:
      return GuestDnsState::ServiceTranslationMissing;
    case Verdict::NodeLocalCacheDown:
      return GuestDnsState::NodeLocalCacheDown;
    default:
      return GuestDnsState::Ok;
  }
}

// No answer came back: the attempt a resolver fails over from when it stays like this.
bool silent(Verdict v) {
  return v == Verdict::Unanswered || v == Verdict::ServiceTranslationMissing ||
         v == Verdict::Unreachable || v == Verdict::ConnectionRefused;
}

// A query's state that says its server's path failed (failingServers()).
bool pathFailure(GuestDnsState st) {
  return st == GuestDnsState::NodeLocalCacheDown ||
         st == GuestDnsState::ServiceTranslationMissing || st == GuestDnsState::NoResponse ||
         st == GuestDnsState::Unreachable || st == GuestDnsState::SlowFailover;
}

const prometheus::Histogram::BucketBoundaries kLatencyBuckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

}  // namespace

struct Accounting::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : queries(prometheus::BuildCounter()
                    .Name("nodegate_dns_queries_total")
                    .Help("Guest DNS queries by final result (the tracer's verdict names, "
                          "docs/metrics.md)")
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
                     .Add({})),
        limited(prometheus::BuildCounter()
                    .Name("nodegate_dns_series_limited_total")
                    .Help("Guest DNS queries a metric family gave no series of their own: its "
                          "cap was reached (cap) or their VMI had left the node (vmi_gone)")
                    .Register(r)),
        queries_capped(limited.Add({{"family", "nodegate_dns_queries_total"}, {"reason", "cap"}})),
        queries_gone(
            limited.Add({{"family", "nodegate_dns_queries_total"}, {"reason", "vmi_gone"}})),
        drops_capped(limited.Add({{"family", "nodegate_dns_drops_total"}, {"reason", "cap"}})) {}
  prometheus::Family<prometheus::Counter>& queries;
  prometheus::Family<prometheus::Histogram>& latency;
  prometheus::Family<prometheus::Counter>& drops;
  prometheus::Counter& lost;
  prometheus::Family<prometheus::Counter>& evictions;
  prometheus::Gauge& attached;
  prometheus::Family<prometheus::Counter>& limited;
  prometheus::Counter& queries_capped;
  prometheus::Counter& queries_gone;
  prometheus::Counter& drops_capped;

  // prometheus-cpp's Family::Add() builds a new metric on every call (a histogram with all its
  // buckets) and discards it when the labels exist; per finished query and hop that was the
  // largest part of accounting. These look each label set up once; removeVmi() drops a VMI's
  // series and their entries together, so the references held stay valid.
  prometheus::Histogram& latencyAt(Hop hop) {
    auto& h = latency_by_hop_[hop];
    if (h == nullptr) h = &latency.Add({{"hop", std::string(hopName(hop))}}, kLatencyBuckets);
    return *h;
  }
  prometheus::Counter& queriesOf(const std::string& ns, const std::string& name, Verdict v) {
    auto& c = queries_by_key_[{ns, name, v}];
    if (c == nullptr)
      c = &queries.Add({{"namespace", ns}, {"vmi", name}, {"result", std::string(verdictName(v))}});
    return *c;
  }
  void removeVmi(const std::string& ns, const std::string& name) {
    auto it = queries_by_key_.lower_bound({ns, name, Verdict::InFlight});
    while (it != queries_by_key_.end() && std::get<0>(it->first) == ns &&
           std::get<1>(it->first) == name) {
      queries.Remove(it->second);
      it = queries_by_key_.erase(it);
    }
  }
  // nullptr: the pair is new and the cap is reached.
  prometheus::Counter* dropsOf(const std::string& hop, const std::string& reason, std::size_t cap) {
    auto it = drops_by_key_.find({hop, reason});
    if (it != drops_by_key_.end()) return it->second;
    if (drops_by_key_.size() >= cap) return nullptr;
    auto* c = &drops.Add({{"hop", hop}, {"reason", reason}});
    drops_by_key_.emplace(std::make_pair(hop, reason), c);
    return c;
  }
  prometheus::Counter& dropsOverflow(const std::string& hop) {
    auto& c = drops_other_[hop];
    if (c == nullptr) c = &drops.Add({{"hop", hop}, {"reason", "_other"}});
    return *c;
  }

 private:
  std::map<Hop, prometheus::Histogram*> latency_by_hop_;
  std::map<std::tuple<std::string, std::string, Verdict>, prometheus::Counter*> queries_by_key_;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> drops_by_key_;
  std::map<std::string, prometheus::Counter*> drops_other_;
};

namespace {

std::pair<std::string, std::string> splitVmi(const std::string& vmi) {
  auto slash = vmi.find('/');
  if (slash == std::string::npos) return {"", vmi};
  return {vmi.substr(0, slash), vmi.substr(slash + 1)};
}

}  // namespace

Accounting::Accounting(prometheus::Registry& registry, AccountingLimits limits)
    : limits_(limits), metrics_(std::make_unique<Metrics>(registry)) {}

Accounting::~Accounting() = default;

prometheus::Counter& Accounting::queriesCounter(const std::string& vmi, Verdict v) {
  auto it = metric_vmis_.find(vmi);
  if (it == metric_vmis_.end() && metric_vmis_.size() < limits_.max_vmis)
    it = metric_vmis_.emplace(vmi, std::array<prometheus::Counter*, kVerdicts>{}).first;
  if (it != metric_vmis_.end()) {
    const auto i = static_cast<std::size_t>(v);
    if (i >= kVerdicts) {  // a verdict added after NodeLocalCacheDown: right, only not cached
      auto [ns, name] = splitVmi(vmi);
      return metrics_->queriesOf(ns, name, v);
    }
    // forget() drops the entry with the VMI's series: a handle here is never stale.
    auto& c = it->second[i];
    if (c == nullptr) {
      auto [ns, name] = splitVmi(vmi);
      c = &metrics_->queriesOf(ns, name, v);
    }
    return *c;
  }
  metrics_->queries_capped.Increment();
  if (!vmi_cap_logged_) {
    log::warn("dns metrics: VMI cap reached, further VMIs are counted as _other/_other",
              {{"cap", std::to_string(limits_.max_vmis)}, {"vmi", vmi}});
    vmi_cap_logged_ = true;
  }
  return metrics_->queriesOf("_other", "_other", v);
}

void Accounting::account(std::vector<Outcome> finished, const CorrelatorStats& engine) {
  auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mu_);
  for (auto& t : finished) {
    for (unsigned n = 0; n < t.hop_latency_ns.size(); ++n)
      if (t.timed & (1u << n))
        metrics_->latencyAt(static_cast<Hop>(n))
            .Observe(static_cast<double>(t.hop_latency_ns[n]) / 1e9);
    if (!t.drop_reason.empty()) {
      const std::string hop(hopName(t.drop_hop));
      if (auto* c = metrics_->dropsOf(hop, t.drop_reason, limits_.max_drop_series)) {
        c->Increment();
      } else {
        metrics_->dropsOverflow(hop).Increment();
        metrics_->drops_capped.Increment();
        if (!drop_cap_logged_)
          log::warn("dns metrics: drop series cap reached, further reasons are counted as _other",
                    {{"cap", std::to_string(limits_.max_drop_series)},
                     {"hop", hop},
                     {"reason", t.drop_reason}});
        drop_cap_logged_ = true;
      }
    }
    if (!t.vmi.empty() && !present_.count(t.vmi)) {
      // In flight when its VM left (an unanswered query finishes at the timeout): the VM's
      // series and window are gone and must not come back for it.
      metrics_->queries_gone.Increment();
      continue;
    }
    queriesCounter(t.vmi, t.verdict).Increment();
    // No VM's hop saw it (the node's own queries at the server's side): no guest to judge.
    if (t.vmi.empty()) continue;
    auto& w = per_vmi_.try_emplace(t.vmi, limits_.per_vmi).first->second;
    Entry e;
    e.when = now;
    e.seq = t.seq;
    e.verdict = t.verdict;
    e.state = stateOf(t);
    e.name = t.name;
    if (e.state != GuestDnsState::Ok) {
      e.failure = std::make_unique<Failure>();
      e.failure->detail = std::move(t.detail);
      e.failure->nodata = t.nodata;
    }
    e.server = w.intern(t.server);
    if (t.failover_of) {
      if (e.failure) e.failure->lost_ns = t.failover_lost_ns;  // SlowFailover is never Ok
      // The silent attempt this answer followed: finished already, or to come.
      bool found = false;
      for (auto it = w.entries.rbegin(); it != w.entries.rend() && !found; ++it)
        if (it->seq == t.failover_of) {
          found = true;
          if (silent(it->verdict)) it->state = GuestDnsState::SlowFailover;
        }
      if (!found) {
        w.failed_over.insert(t.failover_of);
        if (w.failed_over.size() > limits_.per_vmi) w.failed_over.erase(w.failed_over.begin());
      }
    }
    if (silent(t.verdict) && w.failed_over.erase(t.seq)) e.state = GuestDnsState::SlowFailover;
    if (w.entries.full()) w.entries.pop_front();
    w.entries.push_back(std::move(e));
    w.judged = false;
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
  if (engine.unaccounted_dropped > unaccounted_seen_) {
    metrics_->evictions.Add({{"kind", "unaccounted"}})
        .Increment(static_cast<double>(engine.unaccounted_dropped - unaccounted_seen_));
    unaccounted_seen_ = engine.unaccounted_dropped;
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

// Called with mu_ held.
void Accounting::forget(const std::string& vmi) {
  if (per_vmi_.erase(vmi)) failing_stale_ = true;
  if (metric_vmis_.erase(vmi)) {
    auto [ns, name] = splitVmi(vmi);
    metrics_->removeVmi(ns, name);
    if (metric_vmis_.size() < limits_.max_vmis) vmi_cap_logged_ = false;  // room again
  }
}

void Accounting::present(const std::set<std::string>& vmis) {
  std::lock_guard lock(mu_);
  present_ = vmis;
  present_.insert("");  // queries no VM's hop saw (the node's own, at the server side) stay
  std::vector<std::string> gone;
  for (const auto& [v, series] : metric_vmis_)
    if (!present_.count(v)) gone.push_back(v);
  for (const auto& [v, w] : per_vmi_)
    if (!present_.count(v)) gone.push_back(v);
  for (const auto& v : gone) forget(v);
}

// Called with mu_ held, on a window trimmed to the present.
void Accounting::judge(const std::string& vmi, VmiWindow& w) const {
  GuestDnsStatus g;
  g.vmi = vmi;
  std::uint64_t clean = 0;  // seq of the newest clean answer
  for (const auto& e : w.entries) {
    (serverAnswered(e.verdict) ? g.answered : g.failed)++;
    if (e.verdict == Verdict::Answered) clean = std::max(clean, e.seq);
  }
  markServers(w);
  w.judged = true;
  // NODATA for a name answered with another type (an IPv4-only Service's AAAA) is no failure.
  std::optional<std::unordered_set<std::uint32_t>> answered_names;  // built when first needed
  auto answered_name = [&](std::uint32_t name) {
    if (!answered_names) {
      answered_names.emplace();
      for (const auto& e : w.entries)
        if (e.verdict == Verdict::Answered) answered_names->insert(e.name);
    }
    return answered_names->count(name) != 0;
  };
  const Entry* worst = nullptr;
  for (const auto& e : w.entries) {
    if (e.seq <= clean || e.state == GuestDnsState::Ok) continue;
    if (e.state == GuestDnsState::ClusterNameNotFound && e.failure->nodata && answered_name(e.name))
      continue;
    if (!worst || e.state > worst->state || (e.state == worst->state && e.seq > worst->seq))
      worst = &e;
  }
  if (worst) {
    g.state = worst->state;
    g.detail = worst->failure->detail;
    g.server = w.serverName(*worst);
    if (g.state == GuestDnsState::SlowFailover)
      for (const auto& e : w.entries)
        if (e.seq > clean && e.verdict == Verdict::SlowFailover && e.server == worst->server) {
          ++g.failovers;
          g.failover_lost_ns += e.failure->lost_ns;
        }
  }
  w.status = std::move(g);
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
    auto& q = it->second.entries;
    while (!q.empty() && now - q.front().when > limits_.window) {
      q.pop_front();
      it->second.judged = false;
    }
    if (q.empty()) {
      it = per_vmi_.erase(it);
      failing_stale_ = true;
      continue;
    }
    if (!it->second.judged) {
      judge(it->first, it->second);
      failing_stale_ = true;
    }
    const GuestDnsStatus& g = it->second.status;
    s.queries_in_window += g.answered + g.failed;
    states[g.vmi] = g.state;
    s.vms.push_back(g);
    ++it;
  }
  if (failing_stale_) {
    failing_ = failingServers();
    failing_stale_ = false;
  }
  s.failing_servers = failing_;
  std::map<std::string, GuestDnsState> failing;
  for (const auto& f : s.failing_servers) failing[f.server] = f.state;
  out.changed = states != last_states_ || failing != last_failing_;
  last_states_ = std::move(states);
  last_failing_ = std::move(failing);
  return out;
}

// Called with mu_ held, from judge(). A failure at or before this window's own newest clean answer
// to its server is at or before the newest of all windows too: only the others are kept.
void Accounting::markServers(VmiWindow& w) {
  w.servers.clear();
  // Consecutive entries mostly name the same server: the last one found is tried first.
  std::map<std::string, ServerMarks>::iterator last = w.servers.end();
  auto marksOf = [&](const std::string& server) -> ServerMarks& {
    if (last == w.servers.end() || last->first != server)
      last = w.servers.try_emplace(server).first;
    return last->second;
  };
  for (const auto& e : w.entries)
    if (e.server != kNoServer && e.verdict == Verdict::Answered) {
      auto& m = marksOf(w.serverName(e));
      m.clean = std::max(m.clean, e.seq);
    }
  for (const auto& e : w.entries)
    if (e.server != kNoServer && pathFailure(e.state)) {
      auto& m = marksOf(w.serverName(e));
      if (e.seq > m.clean) m.failures.push_back(&e);
    }
}

std::uint16_t Accounting::VmiWindow::intern(const std::string& server) {
  if (server.empty()) return kNoServer;
  for (std::size_t i = server_names.size(); i-- > 0;)
    if (server_names[i] == server) return static_cast<std::uint16_t>(i);
  if (server_names.size() > 2 * entries.size() + 16) {
    std::vector<std::uint16_t> renumbered(server_names.size(), kNoServer);
    std::vector<std::string> kept;
    for (auto& e : entries) {
      if (e.server == kNoServer) continue;
      auto& to = renumbered[e.server];
      if (to == kNoServer) {
        to = static_cast<std::uint16_t>(kept.size());
        kept.push_back(std::move(server_names[e.server]));
      }
      e.server = to;
    }
    server_names = std::move(kept);
  }
  if (server_names.size() >= kNoServer) return kNoServer;  // more than an entry's index holds
  server_names.push_back(server);
  return static_cast<std::uint16_t>(server_names.size() - 1);
}

const std::string& Accounting::VmiWindow::serverName(const Entry& e) const {
  static const std::string none;
  return e.server == kNoServer ? none : server_names[e.server];
}

// Called with mu_ held, on windows trimmed to the present and judged. A server is failing when a
// query to it was lost, unreachable or untranslated, a node-local cache that is down, or it was
// the silent first server of a slow failover, after its newest clean answer (by seq: the engine
// numbers every VM's queries in one sequence).
std::vector<DnsPathSummary::FailingServer> Accounting::failingServers() const {
  std::map<std::string_view, std::uint64_t> clean;
  for (const auto& [vmi, w] : per_vmi_)
    for (const auto& [server, m] : w.servers) {
      auto& c = clean[server];
      c = std::max(c, m.clean);
    }
  std::map<std::string_view, std::pair<const Entry*, const std::string*>> worst;
  for (const auto& [vmi, w] : per_vmi_)
    for (const auto& [server, m] : w.servers)
      for (const Entry* e : m.failures) {
        if (e->seq <= clean[server]) continue;
        auto& [we, wv] = worst[server];
        if (!we || e->state > we->state || (e->state == we->state && e->seq > we->seq)) {
          we = e;
          wv = &vmi;
        }
      }
  std::vector<DnsPathSummary::FailingServer> out;
  for (const auto& [server, ev] : worst) {
    if (out.size() >= kMaxFailingServers) break;
    out.push_back({std::string(server), ev.first->state, *ev.second, ev.first->failure->detail});
  }
  return out;
}

}  // namespace nodegate::dns
