// `nodegate agent` — the daemon: wires the loop (loop/runner.h), kernel event sources
// (triggers/kernel_events.h), publishers (publish/metrics.h; the Kubernetes side, kube_wiring.h,
// or its dry run), extensions (extension.h) and the HTTP listeners (publish/routes.h), then
// waits for signals: SIGTERM/SIGINT stop everything within a second, SIGHUP reloads --config.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "device_probe_client.h"
#include "dns_path.h"
#include "extension.h"
#include "kube_wiring.h"
#include "loop/runner.h"
#include "nodegate/log.h"
#include "nodegate/registry.h"
#include "nodegate/version.h"
#include "publish/metrics.h"
#include "publish/page.h"
#include "publish/routes.h"
#include "triggers/kernel_events.h"

namespace nodegate {
namespace {

// The helper's client, once the helper answers hello or kHelperStartWait has passed: both
// containers of the pod start together, and a first cycle run before the helper's socket exists
// would publish the device checks UNKNOWN until the next resync. The log says which it was.
std::shared_ptr<const devprobe::Client> deviceProbeClient(const std::string& socket) {
  constexpr auto kHelperStartWait = std::chrono::seconds(10);
  auto client = std::make_shared<devprobe::Client>(socket);
  const auto t0 = std::chrono::steady_clock::now();
  const auto give_up = t0 + kHelperStartWait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    auto hello =
        client->call(devprobe::Request{devprobe::Op::Hello, std::nullopt},
                     std::clamp(left, devprobe::kMinDeadline, devprobe::kDeviceCheckDeadline));
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    if (hello) {
      log::info("device-probe helper answers", {{"socket", socket},
                                                {"version", hello->value("version", "")},
                                                {"host_root", hello->value("host_root", "")},
                                                {"waited_ms", std::to_string(waited.count())}});
      return client;
    }
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(200) >= give_up) {
      log::warn("device-probe helper does not answer: device checks fall back to this container",
                {{"socket", socket}, {"error", hello.error().message}});
      return client;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// glibc's defaults suit a short program with busy threads; the agent is the opposite (many idle
// threads, a start-up peak). Figures: docs/benchmarks/agent.md ("two arenas", M_MMAP_THRESHOLD).
void tuneMalloc() {
  // One arena for all threads: they allocate little, and per-thread arenas are resident memory.
  ::mallopt(M_ARENA_MAX, 1);
  // A fixed threshold: left to glibc it follows the largest buffer freed so far (the kernel's BTF
  // at tracer load), after which large buffers come from a heap that stays grown.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

// Extensions may take seconds to start (loading BPF programs): they start on a thread of their
// own so /healthz, /metrics and signals are served meanwhile; routes they add appear when ready.
class ExtensionStarter {
 public:
  explicit ExtensionStarter(AgentServices& services)
      : thread_([this, &services] { startAll(services); }) {}

  // Stops the started extensions. Returns false when a start is still running (a slow BPF
  // load): it is abandoned, and the caller must not run destructors under it.
  bool stop() {
    if (!done_) {
      log::warn("extension still starting at shutdown: abandoned");
      thread_.detach();
      return false;
    }
    thread_.join();
    std::lock_guard l(mu_);
    extensions_.clear();
    return true;
  }

 private:
  void startAll(AgentServices& services) {
    for (auto& f : agentExtensions()) {
      auto ext = f.start(services);
      std::lock_guard l(mu_);
      if (ext)
        extensions_.push_back(std::move(ext).value());
      else
        log::warn("extension not started", {{"extension", f.name}, {"error", ext.error().message}});
    }
    // Start-up is the agent's peak (the kernel's BTF parsed for the tracer, first probe runs,
    // the registry filled): hand the free pages it left inside the heaps back to the kernel.
    ::malloc_trim(0);
    done_ = true;
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<Extension>> extensions_;
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: it starts in the constructor, after the members it uses
};

// kubevirt-node's facts (none without an API connection): a change of them re-runs the check
// (trigger `kube`), and the first cycle waits for the API's first look at the Node and its pods
// (normally well under a second; at most 10 s), so that a restart re-publishes the same verdict
// instead of NodeNotRead and then the verdict again (two writes and two Events for nothing).
void wireKubeVirtFacts(kube::KubeVirtFactsBoard* board, const std::shared_ptr<Runner>& runner) {
  if (!board) return;
  // Weak: the runner holds the board (through the probe); a strong capture would be a cycle.
  board->onChange([weak = std::weak_ptr<Runner>(runner)] {
    if (auto r = weak.lock()) r->trigger(kTriggerKube);
  });
  constexpr auto kKubeFirstLookWait = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  const bool seen = board->waitUntilSeen(kKubeFirstLookWait);
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  log::info(seen ? "kubevirt-node: the Node and its pods are seen"
                 : "kubevirt-node: the Node or its pods not seen yet: first run without them",
            {{"waited_ms", std::to_string(waited.count())}});
}

// dns-path's facts from the API re-run it when they change, not at the next resync: new cluster
// DNS facts (the Service's address a ClusterFirst VMI asks first, the node-local cache's), and the
// launcher pods' DNS configuration (published on every change of the pod view, on the pod
// source's thread; the source outlives its listeners). pods: null without a pod watch.
void wireDnsPathFacts(ClusterDnsBoard& cluster_dns, const std::shared_ptr<VmiDnsBoard>& vmi_dns,
                      kube::PodSource* pods, const std::shared_ptr<Runner>& runner) {
  // Weak, as for the KubeVirt facts: the runner holds the board (through the probe).
  cluster_dns.onChange([weak = std::weak_ptr<Runner>(runner)] {
    if (auto r = weak.lock()) r->trigger(kTriggerDns);
  });
  if (!pods) return;
  pods->subscribe([pods, vmi_dns, runner] {
    VmiDnsConfigs now = pods->vmiDns();
    const auto before = vmi_dns->configs();
    const bool changed = !before || before->complete != now.complete || before->vmis != now.vmis;
    vmi_dns->publish(std::move(now));
    if (changed) runner->trigger(kTriggerDns);
  });
  // After subscribing: a change in between is not lost (both publish the current view).
  vmi_dns->publish(pods->vmiDns());
}

// Takes signals until SIGTERM or SIGINT; SIGHUP reloads --config (a bad one keeps the old).
void serveSignals(const sigset_t& sigs, const Options& opts, Runner& runner) {
  for (;;) {
    siginfo_t info{};
    int sig = sigwaitinfo(&sigs, &info);
    if (sig < 0) continue;  // EINTR from a stop/cont
    if (sig != SIGHUP) {
      log::info("agent stopping", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      return;
    }
    if (opts.config_path.empty()) {
      log::info("SIGHUP: no --config to reload");
      continue;
    }
    auto fresh = buildConfig(opts);
    if (!fresh) {
      log::error("failed to reload config: keeping the previous one",
                 {{"path", opts.config_path}, {"error", fresh.error().message}});
      continue;
    }
    log::info("config reloaded", {{"path", opts.config_path}});
    runner.reload(std::move(fresh).value());
  }
}

}  // namespace

int runAgent(const Options& opts) {
  tuneMalloc();
  auto loaded = buildConfig(opts);
  if (!loaded) {
    std::cerr << "nodegate: " << loaded.error().message << "\n";
    return 2;
  }
  const Config initial_config = std::move(loaded).value();

  // Signals are taken synchronously by this thread; every thread started below inherits the mask.
  sigset_t sigs = blockDaemonSignals();

  log::info("agent starting", {{"version", kVersion},
                               {"node", opts.node_name},
                               {"host_root", opts.host_root},
                               {"kube", opts.kube}});
  HostRoot host = opts.hostRoot();
  auto registry = std::make_shared<prometheus::Registry>();

  // The Kubernetes side: one connection for the publisher, local-pv's PV reader and the
  // cluster-DNS reader. The cluster-DNS facts it writes are read by the dns-path probe and the
  // DNS service.
  auto cluster_dns = std::make_shared<ClusterDnsBoard>();
  // What the gate holds back for running pods: written by the publisher, shown by the API/page.
  auto holds = std::make_shared<kube::GateHoldBoard>(*registry);
  // The guests' DNS verdicts: the DNS tracer extension writes them, the dns-path probe reads them.
  auto dns_verdicts = std::make_shared<DnsVerdictBoard>();
  // The VMIs' DNS configuration: the pod source writes it, the dns-path probe reads it.
  auto vmi_dns = std::make_shared<VmiDnsBoard>();
  auto kube =
      startKubeSide(opts, kubeSettings(opts, initial_config), *registry, cluster_dns, holds);
  if (!kube) {
    log::error("failed to start kubernetes publisher", {{"error", kube.error().message}});
    return 1;
  }

  RunnerOptions ro;
  ro.resync = std::chrono::duration<double>(opts.resync_seconds);
  ro.registry = registry;
  auto seams = productionSeams();
  seams.api_pvs = kube->api_pvs;
  seams.cluster_dns = cluster_dns;
  seams.dns_verdicts = dns_verdicts;
  seams.kubevirt = kube->kubevirt;
  seams.vmi_dns = vmi_dns;
  if (!opts.device_probe.empty()) seams.device_probe = deviceProbeClient(opts.device_probe);
  auto runner = std::make_shared<Runner>(makeProbes(seams), host, initial_config, ro);
  runner->addPublisher(std::make_shared<MetricsPublisher>(registry));
  runner->addPublisher(kube->publisher);
  wireKubeVirtFacts(kube->kubevirt.get(), runner);
  ProcessMetrics process(*registry, HostRoot("/"));

  PageSections sections;
  AgentEndpoints ep;
  ep.runner = runner;
  ep.registry = registry;
  ep.process = &process;
  ep.sections = &sections;
  ep.holds = holds;
  ep.page_info = PageInfo{opts.node_name, kVersion, 10, opts.runbook_base_url};
  AgentRouters routers = makeAgentRouters(ep);

  runner->start();
  wireDnsPathFacts(*cluster_dns, vmi_dns, kube->pods.get(), runner);
  auto events = KernelEvents::start(
      host, [runner](std::uint32_t bits) { runner->trigger(bits); }, registry, seams);
  if (!events)
    log::warn("kernel events off: only the resync timer re-runs probes",
              {{"error", events.error().message}});

  int rc = 0;
  std::vector<std::unique_ptr<HttpServer>> servers;
  if (auto started =
          startAgentListeners({opts.listen, opts.health_listen, opts.debug_listen}, routers)) {
    servers = std::move(started).value();
  } else {
    log::error("failed to start http listener", {{"error", started.error().message}});
    rc = 1;
  }

  AgentServices services{opts,
                         host,
                         initial_config,
                         registry,
                         *routers.debug,
                         sections,
                         [runner](std::uint32_t bits) { runner->trigger(bits); },
                         [runner] { return runner->snapshot(); },
                         events ? events.value().get() : nullptr,
                         cluster_dns,
                         dns_verdicts};
  std::optional<ExtensionStarter> starter;
  if (rc == 0) {
    starter.emplace(services);
    serveSignals(sigs, opts, *runner);
  }

  servers.clear();
  const bool starter_stuck = starter && !starter->stop();
  if (events) events.value().reset();
  int abandoned = runner->stop();
  // A probe abandoned at its deadline may still wait for a command (lvm): kill its process group
  // so nothing the agent started outlives it.
  seams.exec->shutdown();
  log::info("agent stopped", {{"abandoned_probes", std::to_string(abandoned)}});
  if (abandoned > 0 || starter_stuck) {
    // A stuck probe thread still runs: leave without running destructors under it.
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return rc;
}

}  // namespace nodegate
