// What CoreDNS does with a guest's query, from its Corefile (the `Corefile` key of the
// kube-system/coredns ConfigMap, read by the agent's cluster-DNS reader): which server blocks
// answer on port 53, which zones the `kubernetes` plugin answers there, and where the rest is
// forwarded. The dns-path check shows it as evidence beside its verdicts: a guest whose cluster
// names come back NXDOMAIN asked a server that does not hold them, and a forward target is where
// external names fail.
//
// The Corefile is Caddyfile syntax: server blocks `ZONE[:PORT] ... {`, one directive per line,
// `#` comments, nested `{ }` blocks for a directive's options. `import` and templating are not
// expanded: what they would add is not seen (and said so).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

struct CorefileServer {
  std::vector<std::string> zones;  // as written, without the port: ".", "cluster.local"
  int port = 53;
  std::vector<std::string> kubernetes_zones;  // the kubernetes plugin's zones (empty: none)
  bool has_kubernetes = false;
  std::string forward_from;             // the forward plugin's FROM zone ("" when none)
  std::vector<std::string> forward_to;  // its targets: addresses, "/etc/resolv.conf", tls://...
  std::vector<std::string> binds;       // the bind plugin's addresses (node-local caches)
  bool imports = false;                 // an `import` nodegate does not expand
};

struct CorefileFacts {
  std::vector<CorefileServer> servers;
  bool imports = false;  // a top-level `import`
};

// At most 1 MiB and 4096 server blocks; errors name the line (unbalanced braces, a block
// without zones).
Result<CorefileFacts> parseCorefile(std::string_view text);

// The ConfigMap as the API returns it ({"data": {"Corefile": ...}}).
Result<CorefileFacts> parseCorefileConfigMap(std::string_view json_text);

// The link-local IPv4 addresses (169.254.0.0/16) port-53 server blocks `bind` to: a node-local
// cache's own addresses (NodeLocal DNSCache: `bind 169.254.20.10 <kube-dns ClusterIP>`). The
// ClusterIP it binds beside is left out: on a node where the cache is not set up, that address
// is the Service's, served by CoreDNS.
std::vector<std::string> linkLocalBinds(const CorefileFacts& f);

// One line per port-53 server block: "., cluster.local:53 answers cluster.local in-addr.arpa
// (kubernetes), forwards . to /etc/resolv.conf".
std::vector<std::string> describeCorefile(const CorefileFacts& f);

}  // namespace nodegate
