// Cilium's settings that decide whether a guest's DNS query to the kube-dns ClusterIP is
// translated: read from the cilium-config ConfigMap, by the agent's cluster-DNS reader
// (agent/kube/cluster_dns.h) from the API and by the dns-path probe from an exported file.
#pragma once

#include <string>
#include <string_view>

#include "nodegate/result.h"

namespace nodegate {

struct CiliumSocketLb {
  bool known = false;  // a cilium-config was read
  bool kube_proxy_replacement = false;
  bool socket_lb = false;  // socket-level load balancing on
  bool host_namespace_only = false;
  std::string kpr_value, sock_value, hostns_value;  // raw values, for evidence
  // bpf-lb-external-clusterip: ClusterIPs reachable from outside the cluster. Without it Cilium
  // drops ("Is a ClusterIP") service traffic entering a node by a path that is no endpoint's,
  // which a guest's traffic can take when a VM's interface bypasses the pod network.
  std::string external_clusterip_value;
  // The incident: socket LB translating in every namespace, so a guest's packets (which never
  // pass a socket hook in the pod) go out with the ClusterIP untouched.
  bool predictsIncident() const { return known && socket_lb && !host_namespace_only; }
};

// Accepts the ConfigMap object as the API returns it ({"data": {...}}) or the bare data map.
Result<CiliumSocketLb> parseCiliumConfig(std::string_view json_text);

}  // namespace nodegate
