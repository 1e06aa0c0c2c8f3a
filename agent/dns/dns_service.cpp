#include "dns/dns_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "dns/rescan_schedule.h"
#include "dns/trace_view.h"
#include "dns_tracer.h"
#include "nodegate/log.h"
#include "nodegate/probe.h"
#include "triggers/kernel_events.h"
#include "triggers/netns_watch.h"
#include "triggers/proc_events.h"

namespace nodegate::dns {
namespace {

std::uint64_t monoNowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

using DeviceKey =
    std::pair<std::uint32_t, int>;  // (netns inode as the BPF side carries it, ifindex)

GuestDnsState stateOf(Verdict v) {
  switch (v) {
    case Verdict::ServerError:
    case Verdict::Refused:
    case Verdict::SlowFailover:  // answered, but every lookup waits for the silent server first
      return GuestDnsState::ServerError;
    case Verdict::Unanswered:
    case Verdict::Unreachable:
    case Verdict::ConnectionRefused:
    case Verdict::TruncatedTcpFailed:
      return GuestDnsState::NoResponse;
    case Verdict::ServiceTranslationMissing:
      return GuestDnsState::ServiceTranslationMissing;
    default:
      return GuestDnsState::Ok;
  }
}

std::string detailOf(const QueryTrace& t) {
  return t.qname + " " + qtypeName(t.qtype) + ": " + verdictDetail(t);
}

struct Metrics {
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
  prometheus::Histogram& latencyAt(Hop hop);
  prometheus::Counter& queriesOf(const std::string& ns, const std::string& vmi, Verdict v);

 private:
  std::map<Hop, prometheus::Histogram*> latency_by_hop_;
  std::map<std::tuple<std::string, std::string, Verdict>, prometheus::Counter*> queries_by_key_;
};

const prometheus::Histogram::BucketBoundaries kLatencyBuckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

prometheus::Histogram& Metrics::latencyAt(Hop hop) {
  auto& h = latency_by_hop_[hop];
  if (h == nullptr) h = &latency.Add({{"hop", std::string(hopName(hop))}}, kLatencyBuckets);
  return *h;
}

prometheus::Counter& Metrics::queriesOf(const std::string& ns, const std::string& vmi, Verdict v) {
  auto& c = queries_by_key_[{ns, vmi, v}];
  if (c == nullptr)
    c = &queries.Add({{"namespace", ns}, {"vmi", vmi}, {"result", std::string(verdictName(v))}});
  return *c;
}

}  // namespace

struct DnsService::Impl {
  HostRoot host;
  DnsServiceConfig cfg;
  Metrics metrics;
  std::unique_ptr<DnsTracer> tracer;

  mutable std::mutex mu;  // everything below
  Correlator corr;
  std::map<DeviceKey, HopDevice> devices;
  std::size_t launchers = 0;
  std::map<std::string, std::deque<std::pair<std::chrono::system_clock::time_point, QueryTrace>>>
      per_vmi;  // finished traces in the window, per VMI
  std::map<std::string, GuestDnsState> last_states;
  std::set<std::string> metric_vmis;
  std::uint64_t lost_seen = 0, evicted_in_flight_seen = 0, evicted_done_seen = 0;
  std::map<std::pair<std::string, std::string>, std::uint64_t>
      drops_seen;                        // (hop, reason) -> count
  std::set<std::uint64_t> dropped_seqs;  // drops already counted (per trace)
  std::vector<std::string> discovery_errors;
  // One open fd per traced netns: the tracer enters the netns through /proc/self/fd/N, which stays
  // valid after the virt-launcher whose /proc/PID/ns/net we found it by has exited, so detaching
  // still reaches the devices. Only the worker thread touches it.
  std::map<std::uint64_t, int> netns_fds;

  std::mutex wake_mu;  // the three below
  std::condition_variable wake;
  bool stopping = false;
  RescanSchedule schedule;
  std::thread worker;

  // Event sources. launcher_pids: the launchers the last pass found, whose exit means a VM
  // stopped (read on the proc connector's thread).
  int kernel_listener = 0;
  std::unique_ptr<NetnsLinkWatch> netns_watch;  // links inside the traced netns (k6t-*, tap*)
  std::unique_ptr<ProcessEvents> proc_events;
  std::string proc_events_off;
  std::mutex pids_mu;
  std::set<int> launcher_pids;
  std::atomic<std::uint64_t> rescans{0}, event_rescans{0};

  Impl(const HostRoot& h, DnsServiceConfig c, prometheus::Registry& reg,
       std::unique_ptr<DnsTracer> t)
      : host(h),
        cfg(std::move(c)),
        metrics(reg),
        tracer(std::move(t)),
        corr(cfg.limits),
        schedule(cfg.debounce, cfg.rescan_min_gap, cfg.rescan, std::chrono::steady_clock::now()) {}

  // Something changed: rescan soon (debounced).
  void poke() {
    {
      std::lock_guard lk(wake_mu);
      schedule.event(std::chrono::steady_clock::now());
    }
    wake.notify_all();
  }

  void onProcessEvent(const ProcessEvent& ev) {
    bool launcher = false;
    switch (ev.kind) {
      case ProcessEvent::Kind::Exec:
        launcher =
            readValue(host.proc(std::to_string(ev.pid) + "/comm")).valueOr("") == "virt-launcher";
        break;
      case ProcessEvent::Kind::Comm: {
        std::lock_guard lk(pids_mu);
        launcher = ev.comm == "virt-launcher" || launcher_pids.count(ev.pid);
        break;
      }
      case ProcessEvent::Kind::Exit: {
        std::lock_guard lk(pids_mu);
        launcher = launcher_pids.count(ev.pid) != 0;
        break;
      }
      case ProcessEvent::Kind::Lost:
        launcher = true;  // one of the lost events may have been a launcher's
        break;
    }
    if (launcher) poke();
  }

  // Subscribes to link/netns and process events and picks the periodic cadence they allow.
  void startEvents() {
    bool links = cfg.kernel_events && cfg.kernel_events->watchesLinks();
    if (links)
      kernel_listener = cfg.kernel_events->addListener([this](std::uint32_t bits) {
        if (bits & kTriggerNetLink) poke();
      });
    if (auto w = NetnsLinkWatch::start([this] { poke(); }))
      netns_watch = std::move(w).value();
    else
      log::warn("dns hop discovery: no link events inside launcher netns",
                {{"error", w.error().message}});
    if (!cfg.process_events) {
      proc_events_off = "disabled";
    } else if (auto pe =
                   ProcessEvents::start([this](const ProcessEvent& ev) { onProcessEvent(ev); })) {
      proc_events = std::move(pe).value();
    } else {
      proc_events_off = pe.error().message;
    }
    auto periodic = links && proc_events && netns_watch ? cfg.rescan_with_events : cfg.rescan;
    {
      std::lock_guard lk(wake_mu);
      schedule.setPeriodic(periodic, std::chrono::steady_clock::now());
    }
    log::info("dns hop discovery",
              {{"link_events", links ? "rtnetlink" : "off"},
               {"netns_link_events", netns_watch ? "rtnetlink per traced netns" : "off"},
               {"process_events", proc_events ? "proc connector" : "off: " + proc_events_off},
               {"periodic_rescan_ms", std::to_string(periodic.count())}});
  }

  void stopEvents() {
    if (kernel_listener) cfg.kernel_events->removeListener(kernel_listener);
    kernel_listener = 0;
    proc_events.reset();
    netns_watch.reset();
  }

  void onEvent(const ng_dns_event& ev) {
    // Port 53 but not DNS: nothing to correlate (an ICMP error's quote may be cut mid-question: it
    // is still matched by its ports).
    if ((ev.flags & NG_F_PARSE_ERR) && !(ev.flags & NG_F_ICMP)) return;
    Observation o;
    o.ts_ns = ev.ts_ns;
    o.egress = ev.dir == NG_DIR_EGRESS;
    o.response = ev.flags & NG_F_QR;
    o.truncated = ev.flags & NG_F_TC;
    o.tcp = ev.flags & NG_F_TCP;
    o.ipv6 = ev.flags & NG_F_IPV6;
    o.drop = ev.kind == NG_EV_DROP;
    o.saddr = formatAddress(ev, true);
    o.daddr = formatAddress(ev, false);
    o.sport = ev.sport;
    o.dport = ev.dport;
    o.id = ev.dns_id;
    o.qtype = ev.qtype;
    o.rcode = ev.rcode;
    o.qname.assign(ev.qname, strnlen(ev.qname, sizeof ev.qname));
    o.no_answers = ev.flags & NG_F_NOANS;
    o.icmp = ev.flags & NG_F_ICMP;
    o.icmp_code = o.icmp ? ev.rcode : 0;
    o.syn = ev.flags & NG_F_SYN;
    o.rst = ev.flags & NG_F_RST;
    o.ack = ev.flags & NG_F_ACK;
    o.tcp_seq = ev.tcp_seq;
    if (o.drop) o.drop_reason = tracer->dropReasonName(ev.drop_reason);
    o.hop = hopFromNumber(ev.hop);
    std::lock_guard lock(mu);
    auto it = devices.find({ev.netns_ino, static_cast<int>(ev.ifindex)});
    if (it != devices.end()) {
      o.vmi = it->second.vmi;
      if (o.hop == Hop::Unknown) o.hop = it->second.hop;
    } else if (!o.drop) {
      return;  // a device we detached a moment ago: its events belong to no path any more
    }
    corr.observe(o);
  }

  std::string vmiLabel(const std::string& vmi) {
    if (metric_vmis.count(vmi) || metric_vmis.size() < cfg.max_vmis) {
      metric_vmis.insert(vmi);
      return vmi;
    }
    return "_other/_other";
  }

  // Called with mu held.
  void account(std::vector<QueryTrace> finished) {
    auto now = std::chrono::system_clock::now();
    for (auto& t : finished) {
      std::string label = vmiLabel(t.vmi);
      auto slash = label.find('/');
      std::string ns = slash == std::string::npos ? "" : label.substr(0, slash);
      std::string name = slash == std::string::npos ? label : label.substr(slash + 1);
      metrics.queriesOf(ns, name, t.verdict).Increment();
      for (const auto& s : t.query_path)
        if (auto l = t.hopLatencyNs(s.hop))
          metrics.latencyAt(s.hop).Observe(static_cast<double>(*l) / 1e9);
      if (!t.drop_reason.empty())
        metrics.drops.Add({{"hop", std::string(hopName(t.drop_hop))}, {"reason", t.drop_reason}})
            .Increment();
      auto& q = per_vmi[t.vmi];
      q.emplace_back(now, std::move(t));
      while (q.size() > 512) q.pop_front();
    }
    const auto& st = corr.stats();
    if (st.evicted_in_flight > evicted_in_flight_seen) {
      metrics.evictions.Add({{"kind", "in_flight"}})
          .Increment(static_cast<double>(st.evicted_in_flight - evicted_in_flight_seen));
      evicted_in_flight_seen = st.evicted_in_flight;
    }
    if (st.evicted_done > evicted_done_seen) {
      metrics.evictions.Add({{"kind", "done"}})
          .Increment(static_cast<double>(st.evicted_done - evicted_done_seen));
      evicted_done_seen = st.evicted_done;
    }
  }

  // Called with mu held. Returns true when some guest's state changed.
  bool publish() {
    auto now = std::chrono::system_clock::now();
    DnsPathSummary s;
    s.updated = now;
    s.guests = launchers;
    s.attached_hops = devices.size();
    std::map<std::string, GuestDnsState> states;
    for (auto it = per_vmi.begin(); it != per_vmi.end();) {
      auto& q = it->second;
      while (!q.empty() && now - q.front().first > cfg.window) q.pop_front();
      if (q.empty()) {
        it = per_vmi.erase(it);
        continue;
      }
      GuestDnsStatus g;
      g.vmi = it->first;
      // The newest verdict is the guest's state: an answer after a failure means it recovered.
      const QueryTrace& newest = q.back().second;
      g.state = stateOf(newest.verdict);
      g.detail = detailOf(newest);
      for (const auto& [when, t] : q) (serverAnswered(t.verdict) ? g.answered : g.failed)++;
      s.queries_in_window += g.answered + g.failed;
      states[g.vmi] = g.state;
      s.vms.push_back(std::move(g));
      ++it;
    }
    if (cfg.board) cfg.board->publish(std::move(s));
    bool changed = states != last_states;
    last_states = std::move(states);
    return changed;
  }

  // The path the tracer should use for a netns: our own fd of it, opened on first use.
  std::string stablePath(const HopDevice& d) {
    if (d.netns_path.empty()) return "";
    auto it = netns_fds.find(d.netns_ino);
    if (it == netns_fds.end()) {
      int fd = ::open(d.netns_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return d.netns_path;
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_ino) != d.netns_ino) {
        ::close(fd);  // the process changed netns or exited and its pid was reused
        return d.netns_path;
      }
      it = netns_fds.emplace(d.netns_ino, fd).first;
      if (netns_watch)
        if (auto r = netns_watch->add(d.netns_ino, fd); !r)
          log::debug("dns hop discovery: netns link events", {{"error", r.error().message}});
    }
    return HostRoot("/").proc("self/fd/" + std::to_string(it->second));
  }

  void releaseUnusedNetns() {
    std::set<std::uint64_t> used;
    {
      std::lock_guard lock(mu);
      for (const auto& [k, d] : devices) used.insert(d.netns_ino);
    }
    for (auto it = netns_fds.begin(); it != netns_fds.end();) {
      if (used.count(it->first)) {
        ++it;
        continue;
      }
      if (netns_watch) netns_watch->remove(it->first);
      ::close(it->second);
      it = netns_fds.erase(it);
    }
  }

  DnsServerHints serverHints() const {
    DnsServerHints h;
    h.process_names = cfg.server_processes;
    auto f = cfg.cluster ? cfg.cluster->facts() : std::nullopt;
    if (!f || f->endpoints_read != ApiRead::Ok) return h;
    h.endpoints.emplace();
    for (const auto& e : f->dns_endpoints) {
      h.endpoints->insert(e.address);
      if (!cfg.node_name.empty() && e.node == cfg.node_name) h.expected_here.insert(e.address);
    }
    return h;
  }

  void rescan() {
    ++rescans;
    DiscoveryResult found = discoverHops(host, cfg.extra_netns, serverHints());
    {
      std::lock_guard lk(pids_mu);
      launcher_pids = {found.launcher_pids.begin(), found.launcher_pids.end()};
    }
    std::map<DeviceKey, HopDevice> want;
    for (auto& d : found.devices) want[{static_cast<std::uint32_t>(d.netns_ino), d.ifindex}] = d;
    std::map<DeviceKey, HopDevice> have;
    {
      std::lock_guard lock(mu);
      have = devices;
    }
    for (const auto& [k, d] : have) {
      auto w = want.find(k);
      if (w != want.end() && w->second.hop == d.hop && w->second.vmi == d.vmi) continue;
      if (auto r = tracer->detach(d.netns_ino, d.ifindex); !r)
        log::debug("dns tracer detach", {{"device", d.ifname}, {"error", r.error().message}});
      std::lock_guard lock(mu);
      devices.erase(k);
      log::info("dns hop gone",
                {{"vmi", d.vmi}, {"hop", std::string(hopName(d.hop))}, {"device", d.ifname}});
    }
    for (const auto& [k, d] : want) {
      {
        std::lock_guard lock(mu);
        if (devices.count(k)) continue;
      }
      auto r = tracer->attach({stablePath(d), d.ifindex, static_cast<std::uint8_t>(d.hop)});
      if (!r) {
        // A launcher that exited between discovery and attach: it will not be wanted next time.
        log::warn("failed to attach dns tracer",
                  {{"vmi", d.vmi}, {"device", d.ifname}, {"error", r.error().message}});
        continue;
      }
      std::lock_guard lock(mu);
      devices[k] = d;
      log::info("dns hop traced", {{"vmi", d.vmi.empty() ? "(shared)" : d.vmi},
                                   {"hop", std::string(hopName(d.hop))},
                                   {"device", d.ifname},
                                   {"netns", d.netns_path.empty() ? "self" : d.netns_path}});
    }
    releaseUnusedNetns();
    std::lock_guard lock(mu);
    launchers = found.launchers;
    bool beyond = false;
    for (const auto& [k, d] : devices) beyond |= d.hop >= Hop::HostOut;
    corr.setBeyondHostTraced(beyond);
    if (auto f = cfg.cluster ? cfg.cluster->facts() : std::nullopt) {
      std::set<std::string> servers;
      for (const auto& e : f->dns_endpoints) servers.insert(e.address);
      corr.setServerAddresses(std::move(servers));
    }
    metrics.attached.Set(static_cast<double>(devices.size()));
    if (found.errors != discovery_errors) {
      for (const auto& e : found.errors) log::warn("dns hop discovery", {{"error", e}});
      discovery_errors = found.errors;
    }
    // Series of VMIs that left the node go with them, keeping the label set bounded over time.
    std::set<std::string> present;
    for (const auto& d : found.devices) present.insert(d.vmi);
    for (auto it = metric_vmis.begin(); it != metric_vmis.end();) {
      if (present.count(*it) || per_vmi.count(*it)) {
        ++it;
        continue;
      }
      it = metric_vmis.erase(it);
    }
  }

  void tick() {
    bool changed = false;
    {
      std::lock_guard lock(mu);
      account(corr.expire(monoNowNs()));
      auto st = tracer->stats();
      if (st.events_lost > lost_seen) {
        metrics.lost.Increment(static_cast<double>(st.events_lost - lost_seen));
        lost_seen = st.events_lost;
      }
      changed = publish();
    }
    if (changed && cfg.trigger) cfg.trigger(kTriggerDns);
  }

  void run() {
    using Clock = std::chrono::steady_clock;
    auto next_tick = Clock::now() + cfg.tick;
    std::unique_lock lk(wake_mu);
    while (!stopping) {
      auto now = Clock::now();
      if (schedule.due(now)) {
        if (schedule.eventDue(now)) ++event_rescans;
        schedule.begin(now);
        lk.unlock();
        rescan();
        lk.lock();
      } else if (now >= next_tick) {
        next_tick = now + cfg.tick;
        lk.unlock();
        tick();
        lk.lock();
      } else {
        // An event's poke() wakes us early and the deadlines are recomputed.
        wake.wait_until(lk, std::min(next_tick, schedule.next()));
      }
    }
  }
};

DnsService::DnsService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<DnsService>> DnsService::start(const HostRoot& host, DnsServiceConfig cfg,
                                                      prometheus::Registry& registry,
                                                      std::unique_ptr<DnsTracer> tracer) {
  if (!tracer) return Error{0, "failed to start dns service: no tracer"};
  auto impl = std::make_unique<Impl>(host, std::move(cfg), registry, std::move(tracer));
  Impl* p = impl.get();
  if (auto r = p->tracer->start([p](const ng_dns_event& ev) { p->onEvent(ev); }); !r)
    return r.error();
  // Listening first, so a VM that starts during the first pass is not missed until the next.
  p->startEvents();
  p->rescan();
  {
    std::lock_guard lock(p->mu);
    p->publish();
  }
  p->worker = std::thread([p] { p->run(); });
  return std::unique_ptr<DnsService>(new DnsService(std::move(impl)));
}

DnsService::~DnsService() {
  {
    std::lock_guard lk(impl_->wake_mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
  // After the worker (a pass adds to the netns watch); event threads only poke() the schedule.
  impl_->stopEvents();
  impl_->tracer->stop();
  impl_->tracer->detachAll();
  for (const auto& [ino, fd] : impl_->netns_fds) ::close(fd);
  if (impl_->cfg.board) impl_->cfg.board->clear();
}

void DnsService::rescanNow() {
  impl_->rescan();
}

DnsService::DiscoveryStats DnsService::discoveryStats() const {
  DiscoveryStats s;
  s.link_events = impl_->kernel_listener != 0;
  s.process_events = impl_->proc_events != nullptr;
  s.process_events_off = impl_->proc_events_off;
  {
    std::lock_guard lk(impl_->wake_mu);
    s.periodic = impl_->schedule.periodic();
  }
  s.rescans = impl_->rescans;
  s.event_rescans = impl_->event_rescans;
  return s;
}

std::vector<HopDevice> DnsService::hops() const {
  std::lock_guard lock(impl_->mu);
  std::vector<HopDevice> out;
  for (const auto& [k, d] : impl_->devices) out.push_back(d);
  return out;
}

nlohmann::json DnsService::tracesJson(const std::string& vmi, std::uint64_t after,
                                      std::size_t limit) const {
  TimeBase base = TimeBase::now();
  std::lock_guard lock(impl_->mu);
  nlohmann::json j;
  j["tracer"] = "running";
  j["in_flight"] = impl_->corr.inFlight();
  const auto& cs = impl_->corr.stats();
  auto ts = impl_->tracer->stats();
  j["stats"] = {{"observations", cs.observations},
                {"orphan_responses", cs.orphan_responses},
                {"orphan_drops", cs.orphan_drops},
                {"evicted_in_flight", cs.evicted_in_flight},
                {"evicted_done", cs.evicted_done},
                {"events", ts.events},
                {"events_lost", ts.events_lost},
                {"drops_available", impl_->tracer->dropsAvailable()},
                {"not_dns", ts.not_dns},
                {"short_packets", ts.short_packets},
                {"frags_skipped", ts.frags_skipped},
                {"ext_skipped", ts.ext_skipped},
                {"tcp_prefix_segments", ts.tcp_prefix_segments},
                {"paged_skipped", ts.paged_skipped}};
  j["discovery"] = {{"link_events", impl_->kernel_listener != 0},
                    {"process_events", impl_->proc_events != nullptr},
                    {"rescans", impl_->rescans.load()},
                    {"event_rescans", impl_->event_rescans.load()}};
  std::map<std::string, nlohmann::json> paths;
  for (const auto& [k, d] : impl_->devices) {
    std::string key = d.vmi.empty() ? "" : d.vmi;
    paths[key].push_back({{"hop", std::string(hopName(d.hop))},
                          {"number", static_cast<int>(d.hop)},
                          {"device", d.ifname},
                          {"netns", d.netns_path.empty() ? "self" : d.netns_path},
                          {"netns_ino", d.netns_ino}});
  }
  nlohmann::json vmis = nlohmann::json::array();
  for (auto& [name, hops] : paths) {
    if (!vmi.empty() && name != vmi && !name.empty()) continue;
    vmis.push_back({{"vmi", name.empty() ? "(shared)" : name}, {"hops", hops}});
  }
  j["vmis"] = std::move(vmis);
  std::vector<const QueryTrace*> picked;
  for (const auto& t : impl_->corr.done())
    if (t.seq > after && (vmi.empty() || t.vmi == vmi)) picked.push_back(&t);
  if (picked.size() > limit) picked.erase(picked.begin(), picked.end() - static_cast<long>(limit));
  nlohmann::json traces = nlohmann::json::array();
  for (const auto* t : picked) traces.push_back(traceJson(*t, base));
  j["traces"] = std::move(traces);
  return j;
}

std::string DnsService::pageSection() const {
  TimeBase base = TimeBase::now();
  std::lock_guard lock(impl_->mu);
  std::map<std::string, VmiPath> paths;
  std::set<Hop> shared;
  for (const auto& [k, d] : impl_->devices) {
    if (d.vmi.empty()) {
      shared.insert(d.hop);
      continue;
    }
    auto& p = paths[d.vmi];
    p.vmi = d.vmi;
    if (std::find(p.hops.begin(), p.hops.end(), d.hop) == p.hops.end()) p.hops.push_back(d.hop);
  }
  for (const auto& t : impl_->corr.done()) {
    auto it = paths.find(t.vmi);
    if (it == paths.end()) continue;  // a VM that is gone
    it->second.recent.push_back(t);
    if (it->second.recent.size() > 20) it->second.recent.erase(it->second.recent.begin());
  }
  std::vector<VmiPath> out;
  for (auto& [name, p] : paths) {
    for (Hop h : shared) p.hops.push_back(h);
    std::sort(p.hops.begin(), p.hops.end());
    out.push_back(std::move(p));
  }
  std::string note = std::to_string(impl_->devices.size()) + " devices traced; " +
                     std::to_string(impl_->corr.inFlight()) + " queries in flight";
  return renderDnsSection(out, base, true, note);
}

namespace {

// The tracer-less stand-in: routes and page still answer, saying why there is nothing.
class DisabledDns final : public Extension {};

void registerEndpoints(AgentServices& s,
                       std::function<nlohmann::json(const HttpRequest&, int*)> api,
                       std::function<std::string()> section) {
  s.debug_routes.handle("/api/v1/dns/traces", [api](const HttpRequest& req) {
    int status = 200;
    nlohmann::json j = api(req, &status);
    return HttpResponse::json(
        status, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  });
  s.page.add("dns", "Guest DNS", [section](const Snapshot&) { return section(); });
}

}  // namespace

Result<std::unique_ptr<Extension>> startDnsTracer(AgentServices& s) {
  const std::string mode = s.options.dns_trace;
  std::string why;
  std::unique_ptr<DnsTracer> tracer;
  if (mode == "off") {
    why = "disabled by --dns-trace=off";
  } else if (mode == "auto" && ::geteuid() != 0) {
    why = "--dns-trace=auto and not running as root";
  } else {
    TracerOptions to;
    to.procfs = HostRoot("/").proc();  // the tracer's own netns, not --host-root's
    auto t = DnsTracer::open(to);
    if (t)
      tracer = std::move(t).value();
    else
      why = t.error().message;
  }
  if (!tracer) {
    if (mode == "on")
      log::error("dns tracer not started", {{"reason", why}});
    else
      log::info("dns tracer off", {{"reason", why}});
    processDnsVerdicts()->clear();
    registerEndpoints(
        s,
        [why](const HttpRequest&, int* status) {
          *status = 503;
          return nlohmann::json{
              {"tracer", "off"}, {"reason", why}, {"traces", nlohmann::json::array()}};
        },
        [why] { return renderDnsSection({}, {}, false, why); });
    std::unique_ptr<Extension> off = std::make_unique<DisabledDns>();
    return off;
  }

  DnsServiceConfig cfg;
  cfg.extra_netns = s.options.dns_netns;
  cfg.node_name = s.options.node_name;
  // CoreDNS by default; other servers the Service points at (a renamed build) by their comm.
  cfg.server_processes.clear();
  for (auto& name : s.config.list(kDnsPathServerProcessesSetting))
    cfg.server_processes.insert(std::move(name));
  cfg.limits.timeout_ns =
      static_cast<std::uint64_t>(s.config.number(kDnsPathQueryTimeoutSetting) * 1e9);
  cfg.window = std::chrono::seconds(static_cast<long>(s.config.number(kDnsPathWindowSetting)));
  cfg.rescan =
      std::chrono::milliseconds(static_cast<long>(s.config.number(kDnsPathRescanSetting) * 1000));
  cfg.rescan_with_events = std::chrono::milliseconds(
      static_cast<long>(s.config.number(kDnsPathRescanWithEventsSetting) * 1000));
  cfg.kernel_events = s.kernel_events;
  cfg.board = processDnsVerdicts();
  cfg.cluster = s.cluster_dns;
  cfg.trigger = s.trigger;
  auto svc = DnsService::start(s.host, std::move(cfg), *s.registry, std::move(tracer));
  if (!svc) return svc.error();
  DnsService* p = svc.value().get();
  registerEndpoints(
      s,
      [p](const HttpRequest& req, int* status) {
        auto q = parseQuery(req.query);
        std::uint64_t after = 0;
        std::size_t limit = 200;
        try {
          if (q.count("after")) after = std::stoull(q["after"]);
          if (q.count("limit")) limit = std::min<std::size_t>(std::stoul(q["limit"]), 1000);
        } catch (const std::exception&) {
          *status = 400;
          return nlohmann::json{{"error", "after and limit must be non-negative integers"}};
        }
        std::string vmi = q.count("vmi") ? q["vmi"] : "";
        if (!vmi.empty() && vmi.find('/') == std::string::npos) {
          *status = 400;
          return nlohmann::json{{"error", "vmi must be NAMESPACE/NAME"}};
        }
        return p->tracesJson(vmi, after, limit);
      },
      [p] { return p->pageSection(); });
  log::info("dns tracer started", {{"extra_netns", std::to_string(s.options.dns_netns.size())}});
  std::unique_ptr<Extension> ext = std::move(svc).value();
  return ext;
}

}  // namespace nodegate::dns
