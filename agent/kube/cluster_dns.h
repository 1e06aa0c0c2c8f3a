// What the DNS side needs from the cluster, read (never written) through the process's API
// connection: Cilium's settings from its ConfigMap, which predict the guest DNS incident
// (probes/dns_path.h), CoreDNS's Corefile (its forward targets and cluster zones, evidence), the
// kube-dns Service's cluster IPs (a ClusterFirst guest's first nameserver), and
// the kube-dns Service's EndpointSlices, the CoreDNS pods the DNS
// tracer's verdicts must know about (agent/dns/correlator.h). A ClusterDnsSource thread reads
// both every `refresh` and puts the result on the ClusterDnsBoard the composition root hands to
// it and to the readers (the dns-path probe, the DNS service); the parsing is pure and tested on
// literal responses.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "dns_path.h"
#include "kube/connection.h"

namespace nodegate::kube {

struct ClusterDnsOptions {
  std::string cilium_namespace = "kube-system";    // dns-path.cilium_namespace
  std::string cilium_configmap = "cilium-config";  // dns-path.cilium_configmap
  std::string dns_namespace = "kube-system";       // dns-path.dns_service_namespace
  std::string dns_service = "kube-dns";            // dns-path.dns_service
  std::string corefile_configmap = "coredns";      // dns-path.coredns_configmap ("": not read)
  // dns-path.nodelocal_configmap ("": not read), in dns_namespace
  std::string nodelocal_configmap = "node-local-dns";
  // kube.cluster_dns_refresh_seconds (at least --resync), jittered by +-10%
  std::chrono::seconds refresh{300};
  double startup_jitter_s = 2;  // kube.startup_jitter_seconds: spreads a fleet restart
  std::uint64_t seed = 0;       // 0: random
};

std::string ciliumConfigPath(const ClusterDnsOptions& o);
std::string dnsEndpointSlicesPath(const ClusterDnsOptions& o);
std::string corefilePath(const ClusterDnsOptions& o);
std::string nodeLocalConfigPath(const ClusterDnsOptions& o);
std::string dnsServicePath(const ClusterDnsOptions& o);

// A GET of the ConfigMap: 200 parsed, 404 "no Cilium" (not an error), 403 Forbidden (RBAC),
// anything else Failed with the reason.
void readCiliumConfig(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);
// A LIST of EndpointSlices: every address of every endpoint, with its readiness.
void readDnsEndpoints(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);

// A GET of CoreDNS's ConfigMap: 200 parsed (a Corefile that does not parse is Failed with the
// line), 404/403/other as for cilium-config; evidence only, so no verdict rests on it.
void readCorefile(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);

// A GET of NodeLocal DNSCache's ConfigMap: 200 parsed into the cache's link-local addresses
// (a Corefile that does not parse is Failed), 404 "no node-local cache" (not an error), 403
// Forbidden with the chart value that grants it: the addresses are then not known from the API
// (hop discovery may still find the cache's link on the node), never a verdict of their own.
void readNodeLocalConfig(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);

// A GET of the kube-dns Service: its spec.clusterIPs (spec.clusterIP on old servers; "None" is a
// headless Service, no address); 404/403/other as for cilium-config.
void readDnsService(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);

// The reads, one request each (the Corefile's and the node-local cache's only when their
// ConfigMap is named).
ClusterDnsFacts fetchClusterDns(ApiClient& api, const ClusterDnsOptions& o);

// The reader: a thread of its own on the shared connection, publishing to `board` after every
// read (a failed read is published as such: the dns-path check says what it could not see) and
// logging when what it read changes. Destroying it stops the thread.
class ClusterDnsSource {
 public:
  ClusterDnsSource(std::shared_ptr<Connection> connection, ClusterDnsOptions options,
                   std::shared_ptr<ClusterDnsBoard> board);
  ~ClusterDnsSource();
  ClusterDnsSource(const ClusterDnsSource&) = delete;
  ClusterDnsSource& operator=(const ClusterDnsSource&) = delete;

 private:
  void loop();

  std::shared_ptr<Connection> conn_;
  ClusterDnsOptions o_;
  std::shared_ptr<ClusterDnsBoard> board_;
  Stopper stop_;
  ApiClient api_;
  std::thread thread_;
};

}  // namespace nodegate::kube
