#include "dns/dns_service.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "dns/accounting.h"
#include "dns/attachments.h"
#include "dns/observation.h"
#include "dns/rescan_schedule.h"
#include "dns/views.h"
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

// The zones whose names only the cluster's DNS answers: the configured domain and the forward
// zones the Corefile's kubernetes plugin serves (its reverse zones hold no names a guest looks
// up by mistake, and "." would make every name the cluster's).
std::vector<std::string> clusterDomains(const std::string& configured,
                                        const std::optional<ClusterDnsFacts>& facts) {
  std::vector<std::string> out;
  if (!configured.empty()) out.push_back(configured);
  if (!facts || facts->corefile_read != ApiRead::Ok) return out;
  for (const auto& server : facts->corefile.servers)
    for (std::string z : server.kubernetes_zones) {
      while (!z.empty() && z.back() == '.') z.pop_back();
      const bool arpa = z == "arpa" || (z.size() > 5 && z.compare(z.size() - 5, 5, ".arpa") == 0);
      if (!z.empty() && !arpa && std::find(out.begin(), out.end(), z) == out.end())
        out.push_back(z);
    }
  return out;
}

}  // namespace

struct DnsService::Impl {
  HostRoot host;
  DnsServiceConfig cfg;
  std::unique_ptr<DnsTracer> tracer;
  Accounting accounting;
  Attachments attachments;

  mutable std::mutex engine_mu;  // the engine: fed by the poll thread, read by the views
  Correlator engine;

  // The worker's: the last pass's findings (launcher netns, virt-launcher processes).
  std::atomic<std::size_t> launchers{0}, launcher_processes{0};
  std::pair<std::size_t, std::size_t> published_counts;  // publish()'s alone
  // tick()'s alone: the engine's observation count at the last malloc_trim.
  std::uint64_t trimmed_at_observations = 0;
  static constexpr std::uint64_t kTrimAfterObservations = 100'000;
  std::vector<std::string> discovery_errors;
  mutable std::mutex vmis_mu;
  std::set<std::string> vmis;  // on the node at the last pass ("ns/name"; "" = the shared side)

  std::mutex wake_mu;  // the three below
  std::condition_variable wake;
  bool stopping = false;
  RescanSchedule schedule;
  std::thread worker;

  // Event sources. launcher_pids: the processes whose exit means a VM stopped (read on the proc
  // connector's thread).
  int kernel_listener = 0;
  std::unique_ptr<NetnsLinkWatch> netns_watch;  // links inside the traced netns (k6t-*, tap*)
  std::unique_ptr<ProcessEvents> proc_events;
  std::string proc_events_off;
  std::mutex pids_mu;
  // Launchers the passes found and pids that exec'd as one; a pid leaves with its exit, so an exit
  // that comes before the pass that would have found the process is not missed.
  std::set<int> launcher_pids;
  // What asked for passes (events, not passes: a pass covers every event since the one before).
  struct Asked {
    std::atomic<std::uint64_t> process{0}, netns_links{0}, host_links{0}, lost{0}, servers{0};
  } asked;
  std::atomic<std::uint64_t> rescans{0}, event_rescans{0}, full_rescans{0}, netns_listed{0};
  // Wall time of the passes, from the pass's start to its attachments and accounting done:
  // what a pass costs apart from whoever polls the API meanwhile (docs/benchmarks/density.md).
  std::atomic<std::uint64_t> pass_ns{0};
  // The kept views: a pass re-reads what its events named. The worker's (and rescanNow()'s).
  std::mutex pass_mu;
  HopDiscovery discovery;
  // A node-local cache's addresses: the links discovery last found holding them, and all the
  // engine was given (those and the cache's ConfigMap's). pass_mu's.
  std::set<std::string> node_local_links, host_addresses, node_local, node_local_absent;

  Impl(const HostRoot& h, DnsServiceConfig c, prometheus::Registry& reg,
       std::unique_ptr<DnsTracer> t)
      : host(h),
        cfg(std::move(c)),
        tracer(std::move(t)),
        accounting(reg, {cfg.window, cfg.max_vmis}),
        attachments(*tracer),
        engine(cfg.limits),
        schedule(cfg.debounce, cfg.rescan_min_gap, cfg.rescan, std::chrono::steady_clock::now()),
        discovery(host, cfg.extra_netns, makeSysNetlink()) {}

  void poke(const DiscoveryWork& work, std::atomic<std::uint64_t>& cause);
  void onProcessEvent(const ProcessEvent& ev);
  void startEvents();
  void stopEvents();
  void onEvent(const ng_dns_event& ev);
  DnsServerHints serverHints() const;
  void rescan(const DiscoveryWork& work);
  void tick();
  void serversChanged();
  void nodeLocalChanged(std::optional<std::set<std::string>> found);
  bool publish();
  void run();
  TracerFacts facts() const;
};

// Something changed: a pass soon (debounced) does `work`.
void DnsService::Impl::poke(const DiscoveryWork& work, std::atomic<std::uint64_t>& cause) {
  ++cause;
  {
    std::lock_guard lk(wake_mu);
    schedule.event(std::chrono::steady_clock::now(), work);
  }
  wake.notify_all();
}

// A launcher's exec, rename or exit names its pid: the pass looks at that process alone. The pid
// is remembered at once, so an exit that comes before the pass is not missed. A DNS server
// process's exec names its pid too (discovery answers it with a full pass: endpoints).
void DnsService::Impl::onProcessEvent(const ProcessEvent& ev) {
  DiscoveryWork w;
  if (ev.kind == ProcessEvent::Kind::Lost) {
    w.full = true;  // one of the lost events may have been a launcher's
    poke(w, asked.lost);
    return;
  }
  bool launcher = false;
  if (ev.kind == ProcessEvent::Kind::Exec) {
    auto comm = readValue(host.proc(std::to_string(ev.pid) + "/comm")).valueOr("");
    launcher = comm == "virt-launcher";
    if (!launcher && cfg.server_processes.count(comm)) {
      w.pids[ev.pid] = false;
      poke(w, asked.process);
      return;
    }
  } else if (ev.kind == ProcessEvent::Kind::Comm) {
    launcher = ev.comm == "virt-launcher";
  }
  {
    std::lock_guard lk(pids_mu);
    bool known = launcher_pids.count(ev.pid) != 0;
    if (!launcher && !known) return;
    if (ev.kind == ProcessEvent::Kind::Exit)
      launcher_pids.erase(ev.pid);
    else
      launcher_pids.insert(ev.pid);
  }
  w.pids[ev.pid] = ev.kind == ProcessEvent::Kind::Exit;
  poke(w, asked.process);
}

// Subscribes to link/netns and process events and picks the periodic cadence they allow.
void DnsService::Impl::startEvents() {
  bool links = cfg.kernel_events && cfg.kernel_events->watchesLinks();
  if (auto w = NetnsLinkWatch::start([this](std::uint64_t ino) {
        DiscoveryWork work;
        work.netns.insert(ino);
        poke(work, asked.netns_links);
      }))
    netns_watch = std::move(w).value();
  else
    log::warn("dns hop discovery: no link events inside launcher netns",
              {{"error", w.error().message}});
  attachments.setNetnsWatch(netns_watch.get());
  if (!cfg.process_events) {
    proc_events_off = "disabled";
  } else if (auto pe =
                 ProcessEvents::start([this](const ProcessEvent& ev) { onProcessEvent(ev); })) {
    proc_events = std::move(pe).value();
  } else {
    proc_events_off = pe.error().message;
  }
  // The node's own links: its host side. Without process events a launcher is found only by
  // scanning, and a link event on the node is then the sign to scan.
  if (links)
    kernel_listener = cfg.kernel_events->addListener([this](std::uint32_t bits) {
      if (!(bits & kTriggerNetLink)) return;
      DiscoveryWork work;
      work.host = true;
      work.full = proc_events == nullptr;
      poke(work, asked.host_links);
    });
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

void DnsService::Impl::stopEvents() {
  if (kernel_listener) cfg.kernel_events->removeListener(kernel_listener);
  kernel_listener = 0;
  proc_events.reset();
  attachments.setNetnsWatch(nullptr);
  netns_watch.reset();
}

// The tracer's poll thread: an event of a traced device (or a kernel drop anywhere) to the engine.
void DnsService::Impl::onEvent(const ng_dns_event& ev) {
  // Port 53 but not DNS: nothing to correlate (an ICMP error's quote may be cut mid-question: it
  // is still matched by its ports).
  if ((ev.flags & NG_F_PARSE_ERR) && !(ev.flags & NG_F_ICMP)) return;
  Observation o = observationOf(ev);
  if (o.drop) o.drop_reason = tracer->dropReasonName(ev.drop_reason);
  if (auto owner = attachments.owner(ev.netns_ino, static_cast<int>(ev.ifindex))) {
    o.vmi = std::move(owner->vmi);
    if (o.hop == Hop::Unknown) o.hop = owner->hop;
  } else if (!o.drop) {
    return;  // a device we detached a moment ago: its events belong to no path any more
  }
  std::lock_guard lock(engine_mu);
  engine.observe(o);
}

DnsServerHints DnsService::Impl::serverHints() const {
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

// One pass: discover what `work` names, make the attachments match, tell the engine and the
// accounting.
void DnsService::Impl::rescan(const DiscoveryWork& work) {
  std::lock_guard pass(pass_mu);
  const auto t0 = std::chrono::steady_clock::now();
  ++rescans;
  DiscoveryResult found = discovery.update(work, serverHints());
  full_rescans = discovery.fullPasses();
  netns_listed = discovery.listed();
  {
    std::lock_guard lk(pids_mu);
    launcher_pids.insert(found.launcher_pids.begin(), found.launcher_pids.end());
  }
  attachments.apply(found.devices);
  launchers = found.launchers;
  launcher_processes = found.launcher_pids.size();
  {
    std::lock_guard lock(engine_mu);
    engine.setBeyondHostTraced(attachments.beyondHostTraced());
    const auto f = cfg.cluster ? cfg.cluster->facts() : std::nullopt;
    if (f) {
      std::set<std::string> servers;
      for (const auto& e : f->dns_endpoints) servers.insert(e.address);
      engine.setServerAddresses(std::move(servers));
    }
    engine.setClusterDomains(clusterDomains(cfg.cluster_domain, f));
  }
  host_addresses = std::move(found.host_addresses);
  nodeLocalChanged(std::move(found.node_local));
  accounting.hopsAttached(attachments.size());
  if (found.errors != discovery_errors) {
    for (const auto& e : found.errors) log::warn("dns hop discovery", {{"error", e}});
    discovery_errors = found.errors;
  }
  std::set<std::string> present;
  for (const auto& d : found.devices) present.insert(d.vmi);
  accounting.present(present);
  {
    std::lock_guard lock(vmis_mu);
    vmis = std::move(present);
  }
  pass_ns += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

// Publishes the probe's summary; true when some guest's state or the number of guests changed
// (the probe takes its launcher count from here, so a VM arriving re-runs it).
bool DnsService::Impl::publish() {
  auto s = accounting.summarize(std::chrono::system_clock::now(), launchers, attachments.size());
  s.summary.launcher_processes = launcher_processes;
  const auto counts = std::make_pair(s.summary.guests, s.summary.launcher_processes);
  const bool changed = s.changed || counts != published_counts;
  published_counts = counts;
  if (cfg.board) cfg.board->publish(std::move(s.summary));
  return changed;
}

// Every cfg.tick: queries past their timeout finish, the accounting takes what finished.
void DnsService::Impl::tick() {
  std::vector<Outcome> finished;
  CorrelatorStats engine_stats;
  std::size_t in_flight = 0;
  {
    std::lock_guard lock(engine_mu);
    finished = engine.expire(monoNowNs());
    engine_stats = engine.stats();
    in_flight = engine.inFlight();
  }
  // A burst of DNS leaves the heap as large as its peak: the in-flight traces and the records
  // decoded from the ring were freed, but glibc keeps their pages (~10 MiB after 20k queries/s
  // over 100 VMs, docs/benchmarks/density.md: more than node_exporter's whole RSS beside it).
  // Once a burst is over (nothing in flight) and it was one (kTrimAfterObservations since the
  // last trim), hand the free pages back. Never during a burst: the heap would only grow again.
  if (in_flight == 0 &&
      engine_stats.observations - trimmed_at_observations >= kTrimAfterObservations) {
    trimmed_at_observations = engine_stats.observations;
    ::malloc_trim(0);
  }
  accounting.account(std::move(finished), engine_stats);
  accounting.eventsLost(tracer->stats().events_lost);
  if (publish() && cfg.trigger) cfg.trigger(kTriggerDns);
  serversChanged();
  // Skipped while a pass runs (it applies them itself).
  if (std::unique_lock pass(pass_mu, std::try_to_lock); pass.owns_lock())
    nodeLocalChanged(std::nullopt);
}

// A node-local cache's addresses, from the node's links (a pass: `found`) or named by the cache's
// configuration before its link exists (a new node whose cache is not up yet), which the API
// reader brings between passes; the engine and the log hear of a change. With pass_mu held.
void DnsService::Impl::nodeLocalChanged(std::optional<std::set<std::string>> found) {
  if (found) node_local_links = std::move(*found);
  std::set<std::string> all = node_local_links, absent;
  if (auto f = cfg.cluster ? cfg.cluster->facts() : std::nullopt)
    for (const auto& a : f->nodelocal_addresses) {
      all.insert(a);
      if (!host_addresses.count(a)) absent.insert(a);
    }
  if (all == node_local && absent == node_local_absent) return;
  node_local = all;
  node_local_absent = absent;
  auto joined = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& a : s) out += (out.empty() ? "" : " ") + a;
    return out.empty() ? std::string("none") : out;
  };
  log::info("dns node-local cache addresses",
            {{"addresses", joined(all)}, {"not_on_this_node", joined(absent)}});
  std::lock_guard lock(engine_mu);
  engine.setNodeLocalAddresses(std::move(all), std::move(absent));
}

// The kube-dns endpoints from the API decide which DNS server netns count, and they come (and
// change) without any kernel event: a full pass re-reads the servers when they differ from the
// last pass's. Skipped while a pass runs (rescanNow() from another thread); the next tick looks.
void DnsService::Impl::serversChanged() {
  std::unique_lock pass(pass_mu, std::try_to_lock);
  if (!pass.owns_lock() || serverHints() == discovery.hints()) return;
  pass.unlock();
  poke(DiscoveryWork::everything(), asked.servers);
}

void DnsService::Impl::run() {
  using Clock = std::chrono::steady_clock;
  auto next_tick = Clock::now() + cfg.tick;
  std::unique_lock lk(wake_mu);
  while (!stopping) {
    auto now = Clock::now();
    if (schedule.due(now)) {
      if (schedule.eventDue(now)) ++event_rescans;
      DiscoveryWork work = schedule.begin(now);
      lk.unlock();
      rescan(work);
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

TracerFacts DnsService::Impl::facts() const {
  TracerFacts f;
  f.tracer = tracer->stats();
  f.drops_available = tracer->dropsAvailable();
  f.link_events = kernel_listener != 0;
  f.process_events = proc_events != nullptr;
  f.rescans = rescans;
  f.event_rescans = event_rescans;
  f.full_rescans = full_rescans;
  f.netns_listed = netns_listed;
  f.pass_seconds = static_cast<double>(pass_ns.load()) / 1e9;
  f.asked_by = {{"process", asked.process},
                {"netns_links", asked.netns_links},
                {"host_links", asked.host_links},
                {"lost", asked.lost},
                {"dns_servers", asked.servers}};
  return f;
}

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
  p->rescan(DiscoveryWork::everything());
  p->publish();
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
  impl_->attachments.closeAll();
  if (impl_->cfg.board) impl_->cfg.board->clear();
}

void DnsService::rescanNow() {
  impl_->rescan(DiscoveryWork::everything());
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
  s.full_rescans = impl_->full_rescans;
  s.netns_listed = impl_->netns_listed;
  return s;
}

bool DnsService::onNode(const std::string& vmi) const {
  std::lock_guard lock(impl_->vmis_mu);
  return !vmi.empty() && impl_->vmis.count(vmi);
}

std::vector<HopDevice> DnsService::hops() const {
  return impl_->attachments.devices();
}

nlohmann::json DnsService::tracesJson(const std::string& vmi, std::uint64_t after,
                                      std::size_t limit) const {
  TimeBase base = TimeBase::now();
  auto devices = impl_->attachments.devices();
  auto facts = impl_->facts();
  std::lock_guard lock(impl_->engine_mu);
  return dns::tracesJson(impl_->engine, devices, facts, {vmi, after, limit}, base);
}

std::string DnsService::pageSection() const {
  TimeBase base = TimeBase::now();
  auto devices = impl_->attachments.devices();
  std::lock_guard lock(impl_->engine_mu);
  return dns::pageSection(impl_->engine, devices, base);
}

namespace {

// The tracer-less stand-in: routes and page still answer, saying why there is nothing.
class DisabledDns final : public Extension {};

// The tracer's settings: flags, and the dns-path check's section of the policy.
DnsServiceConfig serviceConfig(const AgentServices& s) {
  DnsServiceConfig cfg;
  cfg.extra_netns = s.options.dns_netns;
  cfg.node_name = s.options.node_name;
  cfg.cluster_domain = s.config.text(kDnsPathClusterDomainSetting);
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
  cfg.board = s.dns_verdicts;
  cfg.cluster = s.cluster_dns;
  cfg.trigger = s.trigger;
  return cfg;
}

// The tracer --dns-trace asks for, or why there is none.
std::unique_ptr<DnsTracer> openTracer(const std::string& mode, std::size_t ring_bytes,
                                      std::string* why) {
  if (mode == "off") {
    *why = "disabled by --dns-trace=off";
    return nullptr;
  }
  if (mode == "auto" && ::geteuid() != 0) {
    *why = "--dns-trace=auto and not running as root";
    return nullptr;
  }
  TracerOptions to;
  to.ring_bytes = ring_bytes;
  to.procfs = HostRoot("/").proc();  // the tracer's own netns, not --host-root's
  auto t = DnsTracer::open(to);
  if (t) return std::move(t).value();
  *why = t.error().message;
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<Extension>> startDnsTracer(AgentServices& s) {
  const std::string mode = s.options.dns_trace;
  std::string why;
  std::unique_ptr<DnsTracer> tracer = openTracer(mode, s.options.dns_ring_kib << 10, &why);
  if (!tracer) {
    if (mode == "on")
      log::error("dns tracer not started", {{"reason", why}});
    else
      log::info("dns tracer off", {{"reason", why}});
    if (s.dns_verdicts) s.dns_verdicts->clear();
    registerDnsEndpoints(
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

  auto svc = DnsService::start(s.host, serviceConfig(s), *s.registry, std::move(tracer));
  if (!svc) return svc.error();
  DnsService* p = svc.value().get();
  registerDnsEndpoints(
      s,
      [p](const HttpRequest& req, int* status) {
        auto q = parseTracesQuery(req.query);
        if (!q) {
          *status = 400;
          return nlohmann::json{{"error", q.error().message}};
        }
        if (!q->vmi.empty() && !p->onNode(q->vmi)) {
          // Not "no queries yet": nothing on this node serves that VMI, so none will come.
          *status = 404;
          return nlohmann::json{{"error", "no such VMI on this node: " + q->vmi}, {"vmi", q->vmi}};
        }
        return p->tracesJson(q->vmi, q->after, q->limit);
      },
      [p] { return p->pageSection(); });
  log::info("dns tracer started", {{"extra_netns", std::to_string(s.options.dns_netns.size())}});
  std::unique_ptr<Extension> ext = std::move(svc).value();
  return ext;
}

}  // namespace nodegate::dns
