// Hop discovery: which devices in which network namespaces carry a guest's DNS path, and which
// hop each one is (agent/dns/hops.h). The kernel-facing part lists links inside a netns over
// rtnetlink (libnl) from a short-lived thread that setns()es, so the agent's own threads never
// change namespace; the assignment of hops is pure and tested on literal link tables.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dns/hops.h"
#include "dns/rescan_schedule.h"
#include "nodegate/host_root.h"
#include "nodegate/result.h"
#include "nodegate/seams.h"
#include "processes.h"

namespace nodegate::dns {

// One link as rtnetlink lists it (the Netlink seam's type, nodegate/seams.h).
using LinkInfo = nodegate::LinkInfo;

// Lists the links of the netns at netns_path ("" = the caller's own), with their addresses when
// with_addresses (one more rtnetlink dump: only DNS server candidates need them).
Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path, bool with_addresses = false);
// st_ino of a netns file: what the tracer stamps on events (ng_dns_event::netns_ino).
Result<std::uint64_t> netnsInode(const std::string& netns_path);

enum class NetnsRole {
  Self,       // the agent's own netns (the node's, under hostNetwork)
  Launcher,   // a virt-launcher pod's netns (found from a process)
  Extra,      // --dns-netns: a launcher (has k6t-*), the host side, or a DNS server's netns
  DnsServer,  // a DNS server process's netns (CoreDNS), found by process name
};

struct NetnsView {
  std::string path;  // "" for Self
  std::uint64_t ino = 0;
  NetnsRole role = NetnsRole::Extra;
  std::string vmi;  // launchers: "ns/name"; "" when unknown
  std::vector<LinkInfo> links;
};

struct HopDevice {
  std::string netns_path;
  std::uint64_t netns_ino = 0;
  int ifindex = 0;
  std::string ifname;
  Hop hop = Hop::Unknown;
  std::string vmi;  // "" on devices every guest shares (the DNS server's side)

  bool operator==(const HopDevice&) const = default;
};

// Assigns hops: in a launcher netns (a k6t-* bridge), tap* and other ports of the bridge are Tap,
// the bridge is Bridge, eth0 is LauncherEth0; the veth whose peer is that eth0, in any other
// netns, is HostVeth. A non-launcher extra netns with an eth0 veth that is nobody's host side is a
// DNS server's: its eth0 is Server and its peer is HostOut. A launcher without a known VMI is
// named after its netns file ("netns/<basename>") so its queries are still kept apart.
std::vector<HopDevice> assignHops(const std::vector<NetnsView>& views);

// The addresses of a node-local DNS cache among the links of a host netns: every address of a
// dummy link that holds an IPv4 link-local one (169.254.0.0/16). NodeLocal DNSCache puts
// 169.254.20.10 on its `nodelocaldns` dummy, and in iptables mode the kube-dns ClusterIP beside
// it, both served by its hostNetwork pod; IPVS's kube-ipvs0 dummy holds ClusterIPs but no
// link-local address and is not taken. The link alone decides, not a listener on port 53: a cache
// that crashed leaves its link behind, and that is when its address matters most.
std::set<std::string> nodeLocalAddresses(const std::vector<LinkInfo>& links);

// Where the cluster's DNS servers run on this node. Their pods' netns are found through their
// processes (hostPID; comm in `process_names`, default "coredns"). With an API connection a
// netns counts only when one of its links holds an address of the kube-dns Service's endpoints
// (`endpoints`, from the EndpointSlices): a process name alone is a guess, the endpoint is what
// the Service really sends queries to. Without the API (nullopt) the name is all there is.
// Addresses are compared as text in inet_ntop() form, the form kube::readDnsEndpoints() gives.
// `expected_here` are the endpoints the slices place on this node: one no netns holds is
// reported, since its queries then go untraced past the host.
struct DnsServerHints {
  std::set<std::string, std::less<>> process_names{"coredns"};
  std::optional<std::set<std::string>> endpoints;
  std::set<std::string> expected_here;

  bool operator==(const DnsServerHints&) const = default;
};

// Everything discovery reads from the host: virt-launcher and DNS server processes (via
// HostRoot) and extra netns paths, each listed with listLinks(). Netns that cannot be read are
// skipped and reported.
struct DiscoveryResult {
  std::vector<HopDevice> devices;
  std::size_t launchers = 0;         // launcher netns found (processes + extras with a k6t bridge)
  std::vector<int> launcher_pids;    // virt-launcher processes found: their exit stops a VM
  std::size_t dns_servers = 0;       // DNS server netns taken (Server and HostOut hops)
  std::set<std::string> node_local;  // a node-local DNS cache's addresses (nodeLocalAddresses())
  // Every address on a link of the node's own netns and of the extra netns that are no launcher's:
  // whether an address the cache's configuration names is set up on this node yet.
  std::set<std::string> host_addresses;
  std::vector<std::string> errors;
};

// Discovery that keeps what it read: one view per netns (by inode) and the launcher processes in
// each, so a pass re-reads only what an event named (DiscoveryWork): a launcher's exec lists its
// netns alone, its exit drops that netns's view, a link event in a netns re-lists that netns, one
// in the node's own netns re-lists that one. The hops are assigned again from the kept views every
// time (pure, in memory). A full pass (start, the safety net, lost events, a change it cannot
// place, new DNS server hints) scans every process and lists every netns, as discoverHops() does.
// One thread at a time.
class HopDiscovery {
 public:
  HopDiscovery(HostRoot host, std::vector<std::string> extra_netns,
               std::shared_ptr<Netlink> netlink);

  DiscoveryResult update(const DiscoveryWork& work, const DnsServerHints& servers);
  DiscoveryResult full(const DnsServerHints& servers);

  std::uint64_t listed() const { return listed_; }  // netns listed so far (listLinks calls)
  std::uint64_t fullPasses() const { return full_passes_; }
  const DnsServerHints& hints() const { return hints_; }  // those of the last full pass

 private:
  NetnsView* view(std::uint64_t ino);
  std::optional<std::uint64_t> inodeOf(const std::string& path, NetnsRole role);
  bool wantsAddresses(NetnsRole role) const;
  NetnsView* addView(std::string path, std::uint64_t ino, NetnsRole role, std::string vmi);
  NetnsView* take(std::string path, NetnsRole role, std::string vmi);  // stat, dedupe, list
  void relist(std::uint64_t ino);  // drops a view that can no longer be read
  // False when the launcher's netns is already known in another role (a full pass decides).
  bool launcherStarted(const LauncherProcess& p);
  void launcherGone(int pid);
  bool hostSideKnown(std::uint64_t launcher_ino);
  DiscoveryResult result() const;

  HostRoot host_;
  std::vector<std::string> extra_;
  std::shared_ptr<Netlink> netlink_;
  DnsServerHints hints_;                            // the last full pass's
  std::vector<NetnsView> views_;                    // the agent's own first, in the order found
  std::map<int, std::uint64_t> pid_netns_;          // virt-launcher pid -> the inode of its netns
  std::map<std::string, std::string> list_errors_;  // netns path -> why it could not be read
  std::vector<std::string> scan_errors_;            // the last full pass's (kube-dns endpoints)
  std::uint64_t listed_ = 0, full_passes_ = 0;
};

// A full pass of a fresh HopDiscovery on the production netlink (tests, one-shot callers).
DiscoveryResult discoverHops(const HostRoot& host, const std::vector<std::string>& extra_netns,
                             const DnsServerHints& servers = {});

}  // namespace nodegate::dns
