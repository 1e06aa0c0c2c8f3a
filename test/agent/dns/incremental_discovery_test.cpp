// Incremental hop discovery (HopDiscovery, agent/dns/discovery.h) through the Netlink seam: a node
// laid out as the density benchmark's (a host netns and a DNS server's netns as --dns-netns, N
// launcher netns found by their virt-launcher processes in a procfs written by the test), with a
// fake rtnetlink that counts which netns each pass lists. What a pass lists is the cost that must
// not grow with the VM count.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dns/discovery.h"

namespace nodegate::dns {
namespace {

LinkInfo link(int idx, std::string name, std::string kind = "veth", int peer = 0, int master = 0) {
  return {idx, std::move(name), std::move(kind), peer, master, {}};
}

// Links by netns path; every listLinks() is recorded.
class CountingNetlink final : public Netlink {
 public:
  std::map<std::string, std::vector<LinkInfo>> links;
  std::vector<std::string> calls;
  Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path, bool) override {
    calls.push_back(netns_path);
    auto it = links.find(netns_path);
    if (it == links.end()) return Error{ENOENT, "failed to open netns " + netns_path + ": fake"};
    return it->second;
  }
  Result<std::unique_ptr<KernelEventSource>> linkEvents() override {
    return Error{ENOSYS, "no events: fake"};
  }
};

class Incremental : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ngn-incdisc.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/proc");
    std::filesystem::create_directories(root_ + "/netns");
    host_ns_ = root_ + "/netns/host";
    server_ns_ = root_ + "/netns/dns";
    std::ofstream(host_ns_) << "";
    std::ofstream(server_ns_) << "";
    nl_ = std::make_shared<CountingNetlink>();
    nl_->links[""] = {link(1, "lo", ""), link(2, "ens3", "")};
    nl_->links[server_ns_] = {link(1, "lo", ""), link(2, "eth0", "veth", 2)};
    host_links_ = {link(1, "lo", ""), link(2, "hd", "veth", 2)};
    nl_->links[host_ns_] = host_links_;
    for (int i = 1; i <= 5; ++i) addVm(i);
    disc_ = std::make_unique<HopDiscovery>(HostRoot(root_), std::vector{host_ns_, server_ns_}, nl_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static int pidOf(int vm) { return 1000 + vm; }
  std::string netnsOf(int vm) const {
    return root_ + "/proc/" + std::to_string(pidOf(vm)) + "/ns/net";
  }
  std::uint64_t inoOf(int vm) const { return *netnsInode(netnsOf(vm)); }
  std::uint64_t hostIno() const { return *netnsInode(host_ns_); }

  // VM i: its launcher process (comm, KubeVirt's arguments, its own netns file) and the links of
  // its netns and of its host-side veth hl<i> (ifindex 100 + i) in the host netns.
  void addVm(int i, int pid = 0) {
    if (pid == 0) pid = pidOf(i);
    const std::string dir = root_ + "/proc/" + std::to_string(pid);
    std::filesystem::create_directories(dir + "/ns");
    std::ofstream(dir + "/comm") << "virt-launcher\n";
    const std::string name = "vm" + std::to_string(i);
    std::ofstream(dir + "/cmdline") << std::string("virt-launcher\0--name\0", 21) << name
                                    << std::string("\0--namespace\0ns\0", 16);
    std::ofstream(dir + "/ns/net") << "";
    nl_->links[dir + "/ns/net"] = {link(1, "lo", ""), link(3, "eth0", "veth", 100 + i),
                                   link(4, "k6t-eth0", "bridge"), link(5, "tap0", "tun", 0, 4)};
    host_links_.push_back(link(100 + i, "hl" + std::to_string(i), "veth", 3));
    nl_->links[host_ns_] = host_links_;
  }
  void removeProcess(int pid) {
    std::filesystem::remove_all(root_ + "/proc/" + std::to_string(pid));
  }

  static std::set<Hop> hopsOf(const DiscoveryResult& r, const std::string& vmi) {
    std::set<Hop> out;
    for (const auto& d : r.devices)
      if (d.vmi == vmi) out.insert(d.hop);
    return out;
  }
  static bool allFour(const DiscoveryResult& r, int i) {
    return hopsOf(r, "ns/vm" + std::to_string(i)) ==
           std::set<Hop>{Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth};
  }
  // The devices of every VMI but `except`, as a comparable set.
  static std::set<std::tuple<std::string, int, Hop>> others(const DiscoveryResult& r,
                                                            const std::string& except) {
    std::set<std::tuple<std::string, int, Hop>> out;
    for (const auto& d : r.devices)
      if (d.vmi != except) out.insert({d.vmi, d.ifindex, d.hop});
    return out;
  }
  DiscoveryResult pass(const DiscoveryWork& w) {
    nl_->calls.clear();
    return disc_->update(w, hints_);
  }

  std::string root_, host_ns_, server_ns_;
  std::vector<LinkInfo> host_links_;
  std::shared_ptr<CountingNetlink> nl_;
  std::unique_ptr<HopDiscovery> disc_;
  DnsServerHints hints_;
};

TEST_F(Incremental, TheFirstPassIsFullAndListsEveryNetnsOnce) {
  auto r = pass({});  // nothing named, but nothing is known yet
  EXPECT_EQ(disc_->fullPasses(), 1u);
  EXPECT_EQ(nl_->calls.size(), 1u + 5u + 2u);  // the agent's own, 5 launchers, host and server
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(allFour(r, i)) << i;
  EXPECT_EQ(r.devices.size(), 5u * 4u + 2u);  // + HostOut and Server, shared
  EXPECT_EQ(r.launchers, 5u);
  EXPECT_EQ(r.launcher_pids.size(), 5u);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
}

// The node-local cache's link in the host netns: its addresses are the cache's, and a host link
// event brings a change of them (the cache setting its link up) without a full pass; a
// launcher's own addresses are never the host's.
TEST_F(Incremental, TheCachesDummyLinkNamesItsAddressesAndTheHostsAddressesExcludeLaunchers) {
  nl_->links[netnsOf(1)][1].addresses = {"10.244.1.7"};  // vm1's eth0
  auto r = pass({});
  EXPECT_TRUE(r.node_local.empty());
  EXPECT_FALSE(r.host_addresses.count("169.254.20.10"));
  LinkInfo cache = link(50, "nodelocaldns", "dummy");
  cache.addresses = {"169.254.20.10", "10.96.0.10"};
  host_links_.push_back(cache);
  nl_->links[host_ns_] = host_links_;
  DiscoveryWork w;
  w.netns.insert(hostIno());
  r = pass(w);
  EXPECT_EQ(disc_->fullPasses(), 1u);
  EXPECT_EQ(r.node_local, (std::set<std::string>{"10.96.0.10", "169.254.20.10"}));
  EXPECT_TRUE(r.host_addresses.count("169.254.20.10"));
  EXPECT_FALSE(r.host_addresses.count("10.244.1.7"));
  // The cache torn down: its link and addresses go with the next relist.
  host_links_.pop_back();
  nl_->links[host_ns_] = host_links_;
  r = pass(w);
  EXPECT_TRUE(r.node_local.empty());
  EXPECT_FALSE(r.host_addresses.count("169.254.20.10"));
}

TEST_F(Incremental, AnExecOfOneLauncherListsExactlyOneNetns) {
  pass(DiscoveryWork::everything());
  // The CNI's veth first: the host netns's link watch fires, the host netns alone is listed.
  addVm(6);
  DiscoveryWork host_event;
  host_event.netns.insert(hostIno());
  auto r = pass(host_event);
  EXPECT_EQ(nl_->calls, std::vector<std::string>{host_ns_});
  EXPECT_TRUE(hopsOf(r, "ns/vm6").empty());  // no launcher yet: its veth is nobody's
  // Then the launcher's exec: its netns is the one listed.
  DiscoveryWork exec;
  exec.pids[pidOf(6)] = false;
  r = pass(exec);
  EXPECT_EQ(nl_->calls, std::vector<std::string>{netnsOf(6)});
  EXPECT_TRUE(allFour(r, 6));
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(allFour(r, i)) << i;
  EXPECT_EQ(disc_->fullPasses(), 1u);
  EXPECT_EQ(r.launcher_pids.size(), 6u);
}

TEST_F(Incremental, AnExecBeforeItsHostSideWasReadListsTheHostSideToo) {
  pass(DiscoveryWork::everything());
  addVm(6);  // the host netns's event not read yet
  DiscoveryWork exec;
  exec.pids[pidOf(6)] = false;
  auto r = pass(exec);
  EXPECT_TRUE(allFour(r, 6));
  // Its own netns and those that may hold a host side, never another launcher's.
  EXPECT_EQ(std::count(nl_->calls.begin(), nl_->calls.end(), netnsOf(6)), 1);
  EXPECT_EQ(std::count(nl_->calls.begin(), nl_->calls.end(), host_ns_), 1);
  for (int i = 1; i <= 5; ++i)
    EXPECT_EQ(std::count(nl_->calls.begin(), nl_->calls.end(), netnsOf(i)), 0) << i;
  EXPECT_EQ(disc_->fullPasses(), 1u);
}

TEST_F(Incremental, ALinkEventInNetnsXRelistsOnlyX) {
  auto before = pass(DiscoveryWork::everything());
  // virt-handler takes vm3's tap away, inside vm3's netns.
  auto& l3 = nl_->links[netnsOf(3)];
  l3.erase(std::remove_if(l3.begin(), l3.end(), [](const LinkInfo& l) { return l.name == "tap0"; }),
           l3.end());
  DiscoveryWork w;
  w.netns.insert(inoOf(3));
  auto r = pass(w);
  EXPECT_EQ(nl_->calls, std::vector<std::string>{netnsOf(3)});
  EXPECT_EQ(hopsOf(r, "ns/vm3"), (std::set<Hop>{Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth}));
  EXPECT_EQ(others(r, "ns/vm3"), others(before, "ns/vm3"));
}

TEST_F(Incremental, AHostLinkEventRelistsOnlyTheNodesOwnNetns) {
  pass(DiscoveryWork::everything());
  DiscoveryWork w;
  w.host = true;
  auto r = pass(w);
  EXPECT_EQ(nl_->calls, std::vector<std::string>{""});
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(allFour(r, i)) << i;
}

TEST_F(Incremental, AnExitRemovesOnlyItsDevicesAndListsNothing) {
  auto before = pass(DiscoveryWork::everything());
  removeProcess(pidOf(2));
  DiscoveryWork w;
  w.pids[pidOf(2)] = true;
  auto r = pass(w);
  EXPECT_TRUE(nl_->calls.empty());
  EXPECT_TRUE(hopsOf(r, "ns/vm2").empty());  // the host veth too: its launcher is gone
  EXPECT_EQ(others(r, "ns/vm2"), others(before, "ns/vm2"));
  EXPECT_EQ(r.launchers, 4u);
  EXPECT_EQ(std::count(r.launcher_pids.begin(), r.launcher_pids.end(), pidOf(2)), 0);
}

TEST_F(Incremental, ALauncherThatExecsSomethingElseIsGoneAndAReusedPidIsReadAgain) {
  pass(DiscoveryWork::everything());
  std::ofstream(root_ + "/proc/" + std::to_string(pidOf(4)) + "/comm") << "sleep\n";
  DiscoveryWork w;
  w.pids[pidOf(4)] = false;
  auto r = pass(w);
  EXPECT_TRUE(hopsOf(r, "ns/vm4").empty());
  // Exit then exec of the same pid in one batch: the later event wins, the process is read again.
  DiscoveryWork exit_then_exec;
  exit_then_exec.pids[pidOf(5)] = true;
  DiscoveryWork again;
  again.pids[pidOf(5)] = false;
  exit_then_exec.merge(again);
  r = pass(exit_then_exec);
  EXPECT_TRUE(allFour(r, 5));
}

TEST_F(Incremental, TwoLaunchersInOneNetnsKeepItUntilTheLastExits) {
  pass(DiscoveryWork::everything());
  // A second launcher process in vm1's netns (its ns/net the same file, through a hard link).
  const std::string dir = root_ + "/proc/2001";
  std::filesystem::create_directories(dir + "/ns");
  std::ofstream(dir + "/comm") << "virt-launcher\n";
  std::filesystem::create_hard_link(netnsOf(1), dir + "/ns/net");
  DiscoveryWork exec;
  exec.pids[2001] = false;
  auto r = pass(exec);
  EXPECT_TRUE(nl_->calls.empty());  // a netns already known is not listed again
  removeProcess(pidOf(1));
  DiscoveryWork exit1;
  exit1.pids[pidOf(1)] = true;
  r = pass(exit1);
  EXPECT_TRUE(allFour(r, 1));
  // Its links are read through the launcher that is left.
  nl_->links[dir + "/ns/net"] = nl_->links[netnsOf(1)];
  DiscoveryWork links;
  links.netns.insert(*netnsInode(dir + "/ns/net"));
  r = pass(links);
  EXPECT_EQ(nl_->calls, std::vector<std::string>{dir + "/ns/net"});
  EXPECT_TRUE(allFour(r, 1));
  DiscoveryWork exit2;
  exit2.pids[2001] = true;
  r = pass(exit2);
  EXPECT_TRUE(hopsOf(r, "ns/vm1").empty());
}

TEST_F(Incremental, WhatItCannotPlaceIsAFullPass) {
  pass(DiscoveryWork::everything());
  // New kube-dns endpoints from the API: which server netns count is the full pass's to tell.
  hints_.endpoints = std::set<std::string>{};
  pass({});
  EXPECT_EQ(disc_->fullPasses(), 2u);
  // A launcher exec'd inside a netns given as --dns-netns: its role is the full pass's order.
  const std::string dir = root_ + "/proc/3001";
  std::filesystem::create_directories(dir + "/ns");
  std::ofstream(dir + "/comm") << "virt-launcher\n";
  std::filesystem::create_hard_link(server_ns_, dir + "/ns/net");
  DiscoveryWork exec;
  exec.pids[3001] = false;
  pass(exec);
  EXPECT_EQ(disc_->fullPasses(), 3u);
  // A DNS server process started: whether it holds an endpoint is the full pass's to tell.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(root_ + "/proc/3002/ns");
  std::ofstream(root_ + "/proc/3002/comm") << "coredns\n";
  DiscoveryWork server;
  server.pids[3002] = false;
  pass(server);
  EXPECT_EQ(disc_->fullPasses(), 4u);
  // An --dns-netns that could not be read is looked for again when the node's links change.
  std::filesystem::remove(host_ns_);
  pass(DiscoveryWork::everything());
  EXPECT_EQ(disc_->fullPasses(), 5u);
  DiscoveryWork host;
  host.host = true;
  pass(host);
  EXPECT_EQ(disc_->fullPasses(), 6u);
}

TEST_F(Incremental, ANetnsThatCannotBeReadAnyMoreIsDroppedAndReported) {
  pass(DiscoveryWork::everything());
  nl_->links.erase(server_ns_);
  DiscoveryWork w;
  w.netns.insert(*netnsInode(server_ns_));
  auto r = pass(w);
  EXPECT_FALSE(hopsOf(r, "").count(Hop::Server));
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(r.errors.front().find(server_ns_), std::string::npos) << r.errors.front();
  // A launcher's netns that is gone with its process is not an error: its exit is on its way.
  nl_->links.erase(netnsOf(1));
  DiscoveryWork l;
  l.netns.insert(inoOf(1));
  r = pass(l);
  EXPECT_TRUE(allFour(r, 1));
  EXPECT_EQ(r.errors.size(), 1u);
}

}  // namespace
}  // namespace nodegate::dns
