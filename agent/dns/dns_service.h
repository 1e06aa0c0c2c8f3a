// DnsService: the agent's guest DNS tracer. Discovers the hops of every guest's DNS path
// (discovery.h), attaches the BPF tracer (bpf/dns_tracer.h) there and follows VMs as they come
// and go (a debounced pass on link events from the agent's rtnetlink source and from inside every
// traced netns, and on virt-launcher exec/exit from the proc connector, re-reading only what the
// events name; a periodic full pass as the safety net, slow when those events work, fast when
// they do not), correlates events into per-query traces
// (correlator.h), and publishes them: metrics, /api/v1/dns/traces, the status page's DNS section,
// and the summary the dns-path probe reads (probes/dns_path.h) on the board the composition root
// hands it. One worker thread; the tracer's poll thread only feeds the engine.
//
// Its parts: the tracer's attachments (attachments.h: attach/detach, netns fds), the accounting
// (accounting.h: metrics, the window, the probe's summary; the metric families are listed there),
// the views (views.h: the JSON route, the page section), and the worker here, which only
// orchestrates them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <prometheus/registry.h>
#include <nlohmann/json.hpp>

#include "dns/correlator.h"
#include "dns/discovery.h"
#include "dns_path.h"
#include "extension.h"
#include "nodegate/host_root.h"
#include "nodegate/result.h"

namespace nodegate {
class KernelEvents;
}

namespace nodegate::dns {

class DnsTracer;

struct DnsServiceConfig {
  std::vector<std::string> extra_netns;                            // --dns-netns
  std::set<std::string, std::less<>> server_processes{"coredns"};  // dns-path.server_processes
  std::string node_name;  // --node-name: which kube-dns endpoints are expected on this node
  // dns-path.cluster_domain; with the Corefile's kubernetes zones, what names are the cluster's.
  std::string cluster_domain = "cluster.local";
  std::chrono::milliseconds tick{100};     // expiry and summary cadence
  std::chrono::milliseconds rescan{2000};  // hop discovery cadence when events do not work
  std::chrono::milliseconds rescan_with_events{30000};  // the safety net's cadence when they do
  std::chrono::milliseconds debounce{50};               // first event of a burst -> rescan
  std::chrono::milliseconds rescan_min_gap{250};        // bounds the rescan rate under event storms
  KernelEvents* kernel_events =
      nullptr;                 // link/netns events (agent/triggers/kernel_events.h); null: none
  bool process_events = true;  // listen to the proc connector when it works
  std::chrono::seconds window{300};  // what the probe's summary covers
  CorrelatorLimits limits;
  std::size_t max_vmis = 256;                      // metric label cap; beyond: vmi="_other"
  std::shared_ptr<DnsVerdictBoard> board;          // where the probe reads from; null: nowhere
  std::shared_ptr<const ClusterDnsBoard> cluster;  // CoreDNS endpoints from the API; null: none
  std::function<void(std::uint32_t)> trigger;      // re-run probes (kTriggerDns)
};

class DnsService final : public Extension {
 public:
  // Starts discovery, attachments and the worker; the tracer is already open().
  static Result<std::unique_ptr<DnsService>> start(const HostRoot& host, DnsServiceConfig cfg,
                                                   prometheus::Registry& registry,
                                                   std::unique_ptr<DnsTracer> tracer);
  ~DnsService() override;  // stops the worker, detaches everything, clears the board

  // GET /api/v1/dns/traces: vmi filters ("ns/name"; 404 when no launcher on this node serves
  // it), after returns traces with seq > after (what --follow polls with), limit caps the newest
  // returned. Shape: {tracer, in_flight, stats,
  // vmis: [{vmi, hops: [{hop, number, device, netns, netns_ino}]}] (vmi "(shared)" holds the DNS
  // server's side every guest uses), traces: [traceJson()...] oldest first}.
  nlohmann::json tracesJson(const std::string& vmi, std::uint64_t after, std::size_t limit) const;
  std::string pageSection() const;
  // Runs one discovery + attach pass now (tests; the worker does it on events and periodically).
  void rescanNow();

  struct DiscoveryStats {
    bool link_events = false;               // listening to the agent's rtnetlink link/netns events
    bool process_events = false;            // listening to the proc connector
    std::string process_events_off;         // why not, when not
    std::chrono::milliseconds periodic{0};  // the periodic rescan's cadence in effect
    std::uint64_t rescans = 0;              // passes run, all causes
    std::uint64_t event_rescans = 0;        // passes an event asked for
    std::uint64_t full_rescans = 0;         // passes that scanned processes and listed every netns
    std::uint64_t netns_listed = 0;         // netns whose links were listed, over all passes
  };
  DiscoveryStats discoveryStats() const;
  std::vector<HopDevice> hops() const;  // devices traced now
  // The last discovery pass found a launcher serving `vmi` ("ns/name") on this node.
  bool onNode(const std::string& vmi) const;

  struct Impl;

 private:
  explicit DnsService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The agent extension (agent/extensions.cpp): --dns-trace on|auto|off. Registers
// /api/v1/dns/traces and the page section in every case, so a disabled tracer explains itself.
Result<std::unique_ptr<Extension>> startDnsTracer(AgentServices& services);

}  // namespace nodegate::dns
