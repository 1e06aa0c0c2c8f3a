// What the DNS side needs from the cluster, read (never written) through the publisher's API
// connection: Cilium's settings from its ConfigMap, which predict the guest DNS incident
// (probes/dns_path.h), and the kube-dns Service's EndpointSlices, the CoreDNS pods the DNS
// tracer's verdicts must know about (agent/dns/correlator.h). The publisher's own thread reads
// both every `refresh` and puts the result on a ClusterDnsBoard; the parsing is pure and tested
// on literal responses.
#pragma once

#include <chrono>
#include <string>

#include "dns_path.h"
#include "kube/client.h"

namespace nodegate::kube {

struct ClusterDnsOptions {
  std::string cilium_namespace = "kube-system";    // dns-path.cilium_namespace
  std::string cilium_configmap = "cilium-config";  // dns-path.cilium_configmap
  std::string dns_namespace = "kube-system";       // dns-path.dns_service_namespace
  std::string dns_service = "kube-dns";            // dns-path.dns_service
  std::chrono::seconds refresh{
      300};  // kube.cluster_dns_refresh_seconds (at least --resync), jittered
};

std::string ciliumConfigPath(const ClusterDnsOptions& o);
std::string dnsEndpointSlicesPath(const ClusterDnsOptions& o);

// A GET of the ConfigMap: 200 parsed, 404 "no Cilium" (not an error), 403 Forbidden (RBAC),
// anything else Failed with the reason.
void readCiliumConfig(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);
// A LIST of EndpointSlices: every address of every endpoint, with its readiness.
void readDnsEndpoints(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out);

// Both reads, one request each.
ClusterDnsFacts fetchClusterDns(HttpClient& http, const ClusterDnsOptions& o);

}  // namespace nodegate::kube
