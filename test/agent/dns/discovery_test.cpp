// Hop discovery: the pure assignment of hops on literal link tables.
#include "dns/discovery.h"

#include <string>

#include <gtest/gtest.h>

namespace nodegate::dns {
namespace {

LinkInfo link(int idx, std::string name, std::string kind = "veth", int peer = 0, int master = 0) {
  return {idx, std::move(name), std::move(kind), peer, master, {}};
}

const HopDevice* find(const std::vector<HopDevice>& d, Hop h, const std::string& vmi = "*") {
  for (const auto& x : d)
    if (x.hop == h && (vmi == "*" || x.vmi == vmi)) return &x;
  return nullptr;
}

// A node with two VMs and a local CoreDNS, laid out as KubeVirt + a CNI would.
std::vector<NetnsView> twoVmNode() {
  NetnsView host{"",
                 1,
                 NetnsRole::Self,
                 "",
                 {link(1, "lo", ""), link(2, "ens3", ""), link(10, "lxc1a", "veth", 3),
                  link(11, "lxc2b", "veth", 3), link(12, "lxcdns", "veth", 2)}};
  NetnsView vm1{"/proc/100/ns/net",
                100,
                NetnsRole::Launcher,
                "ns1/vm1",
                {link(1, "lo", ""), link(3, "eth0", "veth", 10), link(4, "k6t-eth0", "bridge"),
                 link(5, "tap0", "tun", 0, 4)}};
  // Same ifindexes inside another launcher (normal: ifindexes are per netns).
  NetnsView vm2{"/proc/200/ns/net",
                200,
                NetnsRole::Launcher,
                "ns2/vm2",
                {link(1, "lo", ""), link(3, "eth0", "veth", 11), link(4, "k6t-eth0", "bridge"),
                 link(5, "tap0", "tun", 0, 4), link(6, "tap1a2b3c", "tun", 0, 0)}};
  NetnsView dns{"/run/netns/coredns",
                300,
                NetnsRole::Extra,
                "",
                {link(1, "lo", ""), link(2, "eth0", "veth", 12)}};
  return {host, vm1, vm2, dns};
}

TEST(NodeLocalAddresses, TheCachesDummyLinkWithALinkLocalAddress) {
  LinkInfo cache = link(20, "nodelocaldns", "dummy");
  cache.addresses = {"169.254.20.10", "10.96.0.10"};  // iptables mode binds the ClusterIP too
  LinkInfo ipvs = link(21, "kube-ipvs0", "dummy");
  ipvs.addresses = {"10.96.0.1", "10.96.0.10"};  // ClusterIPs alone: not a cache
  LinkInfo uplink = link(2, "ens3", "");
  uplink.addresses = {"169.254.0.2", "192.168.1.5"};  // link-local, but not a dummy
  auto a = nodeLocalAddresses({link(1, "lo", ""), uplink, ipvs, cache});
  EXPECT_EQ(a, (std::set<std::string>{"10.96.0.10", "169.254.20.10"}));
  EXPECT_TRUE(nodeLocalAddresses({uplink, ipvs}).empty());
}

TEST(AssignHops, KubeVirtLayout) {
  auto d = assignHops(twoVmNode());
  const HopDevice* tap = find(d, Hop::Tap, "ns1/vm1");
  ASSERT_TRUE(tap);
  EXPECT_EQ(tap->ifname, "tap0");
  EXPECT_EQ(tap->netns_ino, 100u);
  ASSERT_TRUE(find(d, Hop::Bridge, "ns1/vm1"));
  EXPECT_EQ(find(d, Hop::LauncherEth0, "ns2/vm2")->netns_path, "/proc/200/ns/net");
  const HopDevice* hv1 = find(d, Hop::HostVeth, "ns1/vm1");
  const HopDevice* hv2 = find(d, Hop::HostVeth, "ns2/vm2");
  ASSERT_TRUE(hv1 && hv2);
  EXPECT_EQ(hv1->ifname, "lxc1a");  // peer 10 <-> eth0 3 in vm1, not vm2's
  EXPECT_EQ(hv2->ifname, "lxc2b");
  EXPECT_EQ(hv1->netns_path, "");
  const HopDevice* out = find(d, Hop::HostOut);
  const HopDevice* srv = find(d, Hop::Server);
  ASSERT_TRUE(out && srv);
  EXPECT_EQ(out->ifname, "lxcdns");
  EXPECT_EQ(out->vmi, "");
  EXPECT_EQ(srv->netns_ino, 300u);
  // A Multus secondary tap not enslaved to the bridge is still a tap hop.
  int taps = 0;
  for (const auto& x : d) taps += x.hop == Hop::Tap && x.vmi == "ns2/vm2";
  EXPECT_EQ(taps, 2);
  EXPECT_EQ(d.size(), 11u);  // 4 + 5 (two taps) + 2; lo and ens3 never appear
}

TEST(AssignHops, ExtraNetnsWithBridgeIsALauncherNamedAfterItsFile) {
  NetnsView host{"/run/netns/ngdns-host", 7, NetnsRole::Extra, "", {link(20, "veth-l", "veth", 2)}};
  NetnsView launcher{
      "/run/netns/ngdns-launcher",
      8,
      NetnsRole::Extra,
      "",
      {link(2, "eth0", "veth", 20), link(3, "k6t-eth0", "bridge"), link(4, "tap0", "veth", 9, 3)}};
  auto d = assignHops(
      {NetnsView{"", 1, NetnsRole::Self, "", {link(2, "eth0", "veth", 20)}}, host, launcher});
  ASSERT_TRUE(find(d, Hop::Tap, "netns/ngdns-launcher"));
  const HopDevice* hv = find(d, Hop::HostVeth);
  ASSERT_TRUE(hv);
  EXPECT_EQ(hv->netns_path, "/run/netns/ngdns-host");
  // The host side of a launcher is never mistaken for a DNS server's netns.
  EXPECT_FALSE(find(d, Hop::Server));
  EXPECT_EQ(hv->ifindex, 20);
}

TEST(AssignHops, DnsServerProcessNetnsIsTheServerHop) {
  auto views = twoVmNode();
  views[3].role = NetnsRole::DnsServer;
  views[3].path = "/proc/300/ns/net";
  auto d = assignHops(views);
  const HopDevice* out = find(d, Hop::HostOut);
  const HopDevice* srv = find(d, Hop::Server);
  ASSERT_TRUE(out && srv);
  EXPECT_EQ(out->ifname, "lxcdns");
  EXPECT_EQ(srv->netns_path, "/proc/300/ns/net");
  EXPECT_EQ(srv->vmi, "");
  // A DNS server netns whose eth0 is not paired with a netns we know gives no hop at all.
  views[3].links = {link(1, "lo", ""), link(2, "eth0", "veth", 99)};
  d = assignHops(views);
  EXPECT_FALSE(find(d, Hop::Server));
  EXPECT_FALSE(find(d, Hop::HostOut));
}

TEST(AssignHops, NothingToTraceWithoutLaunchers) {
  NetnsView host{"", 1, NetnsRole::Self, "", {link(1, "lo", ""), link(2, "eth0", "veth", 9)}};
  EXPECT_TRUE(assignHops({host}).empty());
}

}  // namespace
}  // namespace nodegate::dns
