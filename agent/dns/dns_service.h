// DnsService: the agent's guest DNS tracer. Discovers the hops of every guest's DNS path
// (discovery.h), attaches the BPF tracer (bpf/dns_tracer.h) there and follows VMs as they come
// and go, correlates events into per-query traces (correlator.h), and publishes them: metrics,
// /api/v1/dns/traces, the status page's DNS section, and the summary the dns-path probe reads
// (probes/dns_path.h). One worker thread; the tracer's poll thread only feeds the engine.
//
// Metrics (DESIGN.md; label sets bounded: VMIs by max_vmis, hops by the hop table, reasons by the
// kernel's skb_drop_reason enum):
//   nodegate_dns_queries_total{namespace,vmi,result}  result = verdictName()
//   nodegate_dns_hop_latency_seconds{hop}             round trip seen at each hop (histogram)
//   nodegate_dns_drops_total{hop,reason}              queries lost with a kernel drop (hop
//   "unknown":
//                                                     dropped beyond the traced devices)
//   nodegate_bpf_events_lost_total                    ring buffer reserve failures
//   nodegate_dns_trace_evictions_total{kind}          in_flight | done: engine caps reached
//   nodegate_dns_hops_attached                        devices being traced
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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

namespace nodegate::dns {

class DnsTracer;

struct DnsServiceConfig {
  std::vector<std::string> extra_netns;    // --dns-netns
  std::chrono::milliseconds tick{100};     // expiry and summary cadence
  std::chrono::milliseconds rescan{2000};  // hop discovery cadence
  std::chrono::seconds window{300};        // what the probe's summary covers
  CorrelatorLimits limits;
  std::size_t max_vmis = 256;                  // metric label cap; beyond: vmi="_other"
  std::shared_ptr<DnsVerdictBoard> board;      // where the probe reads from
  std::function<void(std::uint32_t)> trigger;  // re-run probes (kTriggerDns)
};

class DnsService final : public Extension {
 public:
  // Starts discovery, attachments and the worker; the tracer is already open().
  static Result<std::unique_ptr<DnsService>> start(const HostRoot& host, DnsServiceConfig cfg,
                                                   prometheus::Registry& registry,
                                                   std::unique_ptr<DnsTracer> tracer);
  ~DnsService() override;  // stops the worker, detaches everything, clears the board

  // GET /api/v1/dns/traces: vmi filters ("ns/name"), after returns traces with seq > after
  // (what --follow polls with), limit caps the newest returned. Shape: {tracer, in_flight, stats,
  // vmis: [{vmi, hops: [{hop, number, device, netns, netns_ino}]}] (vmi "(shared)" holds the DNS
  // server's side every guest uses), traces: [traceJson()...] oldest first}.
  nlohmann::json tracesJson(const std::string& vmi, std::uint64_t after, std::size_t limit) const;
  std::string pageSection() const;
  // Runs one discovery + attach pass now (tests; the worker does it every cfg.rescan).
  void rescanNow();

  struct Impl;

 private:
  explicit DnsService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The agent extension (agent/extensions.cpp): --dns-trace on|auto|off. Registers
// /api/v1/dns/traces and the page section in every case, so a disabled tracer explains itself.
Result<std::unique_ptr<Extension>> startDnsTracer(AgentServices& services);

}  // namespace nodegate::dns
