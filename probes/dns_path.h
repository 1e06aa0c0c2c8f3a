// dns-path: do guest DNS queries make it through the masquerade NAT and the CNI's service
// translation and back? Decided from the DNS tracer's recent verdicts (agent/dns) when the agent
// runs one, and from a static configuration check that predicts the Cilium socket-LB incident
// (docs/dns-path.md, "Where it breaks"): kube-proxy replacement with socket LB not restricted to
// the host namespace never translates a guest's ClusterIP query.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cilium_config.h"
#include "corefile.h"
#include "nodegate/board.h"
#include "nodegate/probe.h"
#include "nodegate/result.h"

namespace nodegate {

// --- the tracer's view, handed over through a seam -----------------------------------------

// A guest's DNS as the tracer judges it over the window (agent/dns/accounting.h): the worst of
// its queries since its last clean answer. Ordered worst last; each is the dns-path check's reason
// of that name (guestDnsReason()): FAIL from ClusterNameNotFound up, WARN below it.
enum class GuestDnsState : std::uint8_t {
  Ok,
  SlowFailover,               // answered, after the first nameserver stayed silent (WARN)
  TruncatedTcpFailed,         // an answer too big for UDP, and DNS over TCP failed (WARN)
  Refused,                    // REFUSED (WARN)
  ServerError,                // SERVFAIL and other error rcodes (WARN)
  ClusterNameNotFound,        // NXDOMAIN/NODATA for a name of the cluster's zones (FAIL)
  Unreachable,                // ICMP unreachable or TCP RST: the server side not listening (FAIL)
  NoResponse,                 // no answer before the timeout (FAIL)
  ServiceTranslationMissing,  // left the host with the service IP untranslated (FAIL)
  NodeLocalCacheDown,  // the node-local DNS cache the guests are pointed at is not serving (FAIL)
};
std::string_view guestDnsReason(GuestDnsState s);  // "SlowFailover": the check's reason

struct GuestDnsStatus {
  std::string vmi;
  GuestDnsState state = GuestDnsState::Ok;
  std::string detail;  // the newest query in that state: "example.com A: ICMP port-unreachable..."
  std::uint64_t answered = 0, failed = 0;  // in the window
  // The server the state is about, as the guest addressed it (slow failover: the silent one), and
  // for SlowFailover the lookups that waited for it since the last clean answer and the time lost.
  std::string server;
  std::uint64_t failovers = 0, failover_lost_ns = 0;
};

struct DnsPathSummary {
  std::chrono::system_clock::time_point updated;
  std::size_t guests = 0;              // virt-launcher netns being traced
  std::size_t launcher_processes = 0;  // virt-launcher processes the tracer's discovery found
  std::size_t attached_hops = 0;       // devices with the classifier attached
  std::size_t queries_in_window = 0;
  std::vector<GuestDnsStatus> vms;  // one per VMI that sent queries in the window
  // Servers (as guests addressed them) whose path the window has seen failing since their newest
  // clean answer: lost, unreachable, untranslated, or the silent first server of a slow failover.
  struct FailingServer {
    std::string server;
    GuestDnsState state = GuestDnsState::NoResponse;  // the worst seen
    std::string vmi;                                  // whose query showed it (the newest)
    std::string detail;
  };
  std::vector<FailingServer> failing_servers;  // sorted by server
};

// What the agent's DNS service publishes and the probe reads. nullopt = no tracer running.
class DnsVerdictSource {
 public:
  virtual ~DnsVerdictSource() = default;
  virtual std::optional<DnsPathSummary> summary() const = 0;
};

// The in-process implementation: the DNS service publish()es, the probe reads; thread-safe. The
// composition root builds one and hands it to both (AgentServices, Seams).
class DnsVerdictBoard final : public DnsVerdictSource {
 public:
  void publish(DnsPathSummary s) { board_.publish(std::move(s)); }
  void clear() { board_.clear(); }  // tracer stopped
  std::optional<DnsPathSummary> summary() const override;

 private:
  Board<DnsPathSummary> board_;
};

// --- the cluster's view, read from the API by the agent (agent/kube/cluster_dns.h) ----------

enum class ApiRead { Ok, NotFound, Forbidden, Failed };

struct DnsEndpoint {
  std::string address;  // a CoreDNS pod IP, in inet_ntop() form
  std::string node;     // nodeName, "" when the slice does not say
  bool ready = true;
};

struct ClusterDnsFacts {
  std::chrono::system_clock::time_point updated;
  ApiRead cilium_read = ApiRead::Failed;  // NotFound: the cluster runs no Cilium
  CiliumSocketLb cilium;                  // when Ok
  std::string cilium_detail;              // what was read, or why it was not
  ApiRead endpoints_read = ApiRead::Failed;
  std::vector<DnsEndpoint> dns_endpoints;  // the kube-dns Service's, when Ok
  std::string endpoints_detail;
  // CoreDNS's Corefile (evidence only: a forward target and the zones guests can ask for).
  ApiRead corefile_read = ApiRead::Failed;
  CorefileFacts corefile;  // when Ok
  std::string corefile_detail;
  // NodeLocal DNSCache's ConfigMap: the cache's link-local addresses (linkLocalBinds()), which a
  // guest may be pointed at before the cache is up on this node. NotFound: no such cache.
  ApiRead nodelocal_read = ApiRead::Failed;
  std::vector<std::string> nodelocal_addresses;  // when Ok
  std::string nodelocal_detail;
  // The kube-dns Service's cluster IPs: a ClusterFirst guest's first nameserver.
  ApiRead service_read = ApiRead::Failed;
  std::vector<std::string> service_ips;  // inet_ntop() form, when Ok (none: headless)
  std::string service_detail;
};

// Built by the composition root, written by the agent's cluster-DNS reader
// (agent/kube/cluster_dns.h), read by the dns-path probe (through Seams) and the DNS service
// (through AgentServices); nullopt until the first read (and always without an API connection).
// Thread-safe.
class ClusterDnsBoard final : public Board<ClusterDnsFacts> {
 public:
  std::optional<ClusterDnsFacts> facts() const { return get(); }
  // The reader calls changed() after a publish that says something new (the Service's address,
  // the node-local cache's, a ConfigMap read or refused), on its own thread; the agent re-runs
  // dns-path then instead of at the next resync. fn must be short and must not block.
  void onChange(std::function<void()> fn) {
    std::lock_guard lock(listener_mu_);
    listener_ = std::move(fn);
  }
  void changed() const {
    std::lock_guard lock(listener_mu_);
    if (listener_) listener_();
  }

 private:
  mutable std::mutex listener_mu_;
  std::function<void()> listener_;
};

// --- each VMI's DNS configuration, from its virt-launcher pod (agent/kube/pod_source.h) -----
// KubeVirt copies spec.dnsPolicy and spec.dnsConfig from the VMI to its launcher pod, and its DHCP
// hands the guest the pod's nameservers, so the pod says where the guest asks first.

struct VmiDnsConfig {
  std::string vmi;                       // "ns/name"
  std::string dns_policy;                // as the pod has it ("": ClusterFirst, the default)
  std::vector<std::string> nameservers;  // spec.dnsConfig.nameservers
  bool operator==(const VmiDnsConfig&) const = default;
};

struct VmiDnsConfigs {
  bool complete = false;           // the pod view is listed and watched (pods RBAC granted)
  std::string why;                 // why not
  std::vector<VmiDnsConfig> vmis;  // sorted by vmi
};

// Written by a listener on the agent's pod source (agent/agent.cpp), read by the dns-path probe;
// nullopt without a pod source (no API connection, kube.pod_watch false).
class VmiDnsBoard final : public Board<VmiDnsConfigs> {
 public:
  std::optional<VmiDnsConfigs> configs() const { return get(); }
};

// The first nameserver the guest asks: dnsConfig.nameservers[0] under dnsPolicy None, the cluster
// DNS Service's address under ClusterFirst (kubelet puts its clusterDNS first; dnsConfig's
// nameservers follow it); "" when unknown (the Service's address not read, dnsPolicy Default: the
// node's resolv.conf). `how` says which.
std::string firstNameserver(const VmiDnsConfig& c, const std::vector<std::string>& service_ips,
                            std::string* how);

struct DnsPathInputs {
  std::optional<DnsPathSummary> tracer;  // nullopt: tracer not running
  CiliumSocketLb cilium;
  std::string cilium_error;       // configured file unreadable or malformed
  std::string cilium_note;        // how the Cilium settings were found (or that there is no Cilium)
  bool cilium_forbidden = false;  // the API refused to show cilium-config (RBAC)
  std::vector<std::string> corefile;  // describeCorefile(), or why it was not read (evidence)
  std::string nodelocal;              // the node-local cache's addresses, or why not known
  std::size_t launchers = 0;  // virt-launcher processes: the tracer's count, or a procfs scan
  bool launchers_readable = true;
  // The VMIs' DNS configuration (nullopt: no pod view) and the cluster DNS Service's addresses
  // (service_read: whether they were read), for the prediction of VMIs whose first nameserver the
  // tracer has seen failing.
  std::optional<VmiDnsConfigs> vmi_dns;
  std::vector<std::string> service_ips;
  bool service_read = false;
  std::string service_detail;
};

CheckResult evaluateDnsPath(const DnsPathInputs& in);

inline constexpr char kDnsPathCheck[] = "dns-path";
inline const SettingSpec kDnsPathCiliumFileSetting =
    textSetting(kDnsPathCheck, "cilium_config_file", "",
                "an exported cilium-config ConfigMap (JSON) to read instead of the API's");
inline const SettingSpec kDnsPathCiliumNamespaceSetting = textSetting(
    kDnsPathCheck, "cilium_namespace", "kube-system", "namespace of Cilium's ConfigMap", {}, 63);
inline const SettingSpec kDnsPathCiliumConfigMapSetting = textSetting(
    kDnsPathCheck, "cilium_configmap", "cilium-config", "name of Cilium's ConfigMap", {}, 253);
inline const SettingSpec kDnsPathDnsNamespaceSetting =
    textSetting(kDnsPathCheck, "dns_service_namespace", "kube-system",
                "namespace of the cluster DNS Service", {}, 63);
inline const SettingSpec kDnsPathDnsServiceSetting = textSetting(
    kDnsPathCheck, "dns_service", "kube-dns", "name of the cluster DNS Service", {}, 63);
inline const SettingSpec kDnsPathCorefileConfigMapSetting = textSetting(
    kDnsPathCheck, "coredns_configmap", "coredns",
    "ConfigMap (in dns_service_namespace) with CoreDNS's Corefile; \"\": not read", {}, 253);
inline const SettingSpec kDnsPathNodeLocalConfigMapSetting = textSetting(
    kDnsPathCheck, "nodelocal_configmap", "node-local-dns",
    "ConfigMap (in dns_service_namespace) with NodeLocal DNSCache's Corefile, for the cache's "
    "addresses; \"\": not read",
    {}, 253);
inline const SettingSpec kDnsPathClusterDomainSetting = textSetting(
    kDnsPathCheck, "cluster_domain", "cluster.local",
    "the cluster's DNS domain (kubelet clusterDomain): NXDOMAIN/NODATA for a name under it, or "
    "under a zone of the Corefile's kubernetes plugin, fails the check (ClusterNameNotFound)",
    {}, 253);
inline const SettingSpec kDnsPathServerProcessesSetting =
    listSetting(kDnsPathCheck, "server_processes", {"coredns"},
                "process names (comm) of the DNS servers the Service points at", {}, 32);
inline const SettingSpec kDnsPathQueryTimeoutSetting =
    numberSetting(kDnsPathCheck, "query_timeout_seconds", 5, 0.1, 60,
                  "a query unanswered this long is lost, seconds");
inline const SettingSpec kDnsPathWindowSetting = integerSetting(
    kDnsPathCheck, "window_seconds", 300, 10, 86400, "verdicts look back this far, seconds");
inline const SettingSpec kDnsPathRescanSetting =
    numberSetting(kDnsPathCheck, "rescan_seconds", 2, 0.1, 3600,
                  "hop discovery rescans this often without kernel events, seconds");
inline const SettingSpec kDnsPathRescanWithEventsSetting =
    numberSetting(kDnsPathCheck, "rescan_with_events_seconds", 30, 0.1, 86400,
                  "hop discovery rescans this often with kernel events, seconds");
inline const ProbeSpec kDnsPathSpec{
    .name = kDnsPathCheck,
    .summary =
        "guest DNS answered end to end (eBPF trace), static CNI configuration that "
        "predicts failure",
    .triggers = kTriggerTimer | kTriggerDns,
    .condition = "GuestDNSHealthy",
    .default_required = false,
    .settings = {&kDnsPathCiliumFileSetting, &kDnsPathCiliumNamespaceSetting,
                 &kDnsPathCiliumConfigMapSetting, &kDnsPathDnsNamespaceSetting,
                 &kDnsPathCorefileConfigMapSetting, &kDnsPathNodeLocalConfigMapSetting,
                 &kDnsPathDnsServiceSetting, &kDnsPathClusterDomainSetting,
                 &kDnsPathServerProcessesSetting, &kDnsPathQueryTimeoutSetting,
                 &kDnsPathWindowSetting, &kDnsPathRescanSetting, &kDnsPathRescanWithEventsSetting},
};

class DnsPathProbe final : public Probe {
 public:
  // cluster: Cilium settings from the API (null: none); the file in
  // checks.dns-path.cilium_config_file wins.
  // vmi_dns: the launcher pods' DNS configuration (null: no pod view).
  DnsPathProbe(std::shared_ptr<const DnsVerdictSource> source,
               std::shared_ptr<const ClusterDnsBoard> cluster,
               std::shared_ptr<const VmiDnsBoard> vmi_dns = nullptr)
      : source_(std::move(source)), cluster_(std::move(cluster)), vmi_dns_(std::move(vmi_dns)) {}
  const ProbeSpec& spec() const override { return kDnsPathSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<const DnsVerdictSource> source_;
  std::shared_ptr<const ClusterDnsBoard> cluster_;
  std::shared_ptr<const VmiDnsBoard> vmi_dns_;
};

}  // namespace nodegate
