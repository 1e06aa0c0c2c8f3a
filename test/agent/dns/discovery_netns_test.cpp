// listLinks/discoverHops against real network namespaces built with iproute2 (root, kernel).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "dns/discovery.h"

namespace nodegate::dns {
namespace {

const HopDevice* find(const std::vector<HopDevice>& d, Hop h, const std::string& vmi = "*") {
  for (const auto& x : d)
    if (x.hop == h && (vmi == "*" || x.vmi == vmi)) return &x;
  return nullptr;
}

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

class RealNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    tag_ = "ngdu" + std::to_string(::getpid() % 100000);
    host_ = tag_ + "h";
    launcher_ = tag_ + "l";
    ASSERT_EQ(sh("ip netns add " + host_), 0);
    ASSERT_EQ(sh("ip netns add " + launcher_), 0);
    const std::string L = "ip -n " + launcher_ + " ";
    ASSERT_EQ(sh("ip -n " + host_ + " link add " + tag_ + "v type veth peer name eth0 netns " +
                 launcher_),
              0);
    ASSERT_EQ(sh(L + "link add k6t-eth0 type bridge"), 0);
    ASSERT_EQ(sh(L + "tuntap add dev tap0 mode tap"), 0);
    ASSERT_EQ(sh(L + "link set tap0 master k6t-eth0"), 0);
  }
  void TearDown() override {
    if (!host_.empty()) {
      sh("ip netns del " + host_);
      sh("ip netns del " + launcher_);
    }
  }
  std::string tag_, host_, launcher_;
};

TEST_F(RealNetns, ListLinksSeesKindsPeersAndMasters) {
  auto links = listLinks("/run/netns/" + launcher_);
  ASSERT_TRUE(links.ok()) << links.error().message;
  int bridge = 0;
  const LinkInfo* tap = nullptr;
  const LinkInfo* eth0 = nullptr;
  for (const auto& l : *links) {
    if (l.name == "k6t-eth0") {
      bridge = l.ifindex;
      EXPECT_EQ(l.kind, "bridge");
    }
    if (l.name == "tap0") tap = &l;
    if (l.name == "eth0") eth0 = &l;
  }
  ASSERT_TRUE(tap && eth0 && bridge);
  EXPECT_EQ(tap->kind, "tun");
  EXPECT_EQ(tap->master, bridge);
  EXPECT_EQ(eth0->kind, "veth");
  EXPECT_GT(eth0->peer_ifindex, 0);
}

TEST_F(RealNetns, DiscoverHopsThroughExtraNetns) {
  HostRoot host("/nonexistent-no-launcher-processes");
  auto r = discoverHops(
      host, {"/run/netns/" + launcher_, "/run/netns/" + host_, "/run/netns/" + tag_ + "missing"});
  EXPECT_EQ(r.launchers, 1u);
  ASSERT_EQ(r.errors.size(), 1u);  // the missing one, reported, not fatal
  EXPECT_NE(r.errors[0].find("failed to stat netns"), std::string::npos);
  const std::string vmi = "netns/" + launcher_;
  for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth})
    EXPECT_TRUE(find(r.devices, h, vmi)) << hopName(h);
  const HopDevice* hv = find(r.devices, Hop::HostVeth, vmi);
  ASSERT_TRUE(hv);
  EXPECT_EQ(hv->ifname, tag_ + "v");
  auto ino = netnsInode("/run/netns/" + host_);
  ASSERT_TRUE(ino.ok());
  EXPECT_EQ(hv->netns_ino, *ino);
  // Our own netns did not change under us.
  auto self_before = netnsInode("");
  ASSERT_TRUE(self_before.ok());
  EXPECT_NE(*self_before, *ino);
}

// A --dns-netns with nothing discovery can place (here the host side without its launcher) is
// reported by path, not traced in silence.
TEST_F(RealNetns, AnExtraNetnsWithNothingToTraceIsReported) {
  HostRoot host("/nonexistent-no-launcher-processes");
  const std::string path = "/run/netns/" + host_;
  auto r = discoverHops(host, {path});
  EXPECT_TRUE(r.devices.empty());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("--dns-netns " + path + ": nothing to trace"), std::string::npos)
      << r.errors[0];
}

// A DNS server pod as the agent meets it: a DNS server process in a netns whose eth0 is a veth
// into the node's own netns (here: this test's netns), with the pod IP on it. No --dns-netns.
// The process is not called coredns but after the test (tag_): agents of other tests running at
// the same time (their default looks for coredns) do not attach to it, and cases running in
// parallel (ctest runs each on its own) do not see each other's server.
class RealDnsServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    static int n = 0;
    tag_ = "ngds" + std::to_string(::getpid() % 100000) + "x" + std::to_string(n++);
    ns_ = tag_ + "d";
    dir_ = "/tmp/" + tag_;
    ASSERT_EQ(sh("ip netns add " + ns_), 0);
    ASSERT_EQ(sh("ip link add " + tag_ + "h type veth peer name eth0 netns " + ns_), 0);
    ASSERT_EQ(sh("ip -n " + ns_ + " addr add 10.251.0.3/24 dev eth0"), 0);
    ASSERT_EQ(sh("ip -n " + ns_ + " addr add fd00:251::3/64 dev eth0 nodad"), 0);
    // comm is the name of the file exec()ed: a symlink to sleep. `ip netns exec` exec()s it in
    // place, so the child is the server and this process reaps it.
    std::string server = dir_ + "/" + tag_;
    ASSERT_EQ(sh("mkdir -p " + dir_ + " && ln -sf \"$(command -v sleep)\" " + server), 0);
    const char* argv[] = {"ip", "netns", "exec", ns_.c_str(), server.c_str(), "120", nullptr};
    ASSERT_EQ(
        ::posix_spawnp(&pid_, "ip", nullptr, nullptr, const_cast<char* const*>(argv), environ), 0);
    for (int i = 0; i < 100 && !serverRunning(); ++i) ::usleep(20000);
    ASSERT_TRUE(serverRunning());
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (ns_.empty()) return;
    sh("ip link del " + tag_ + "h");  // both ends at once; a netns dies asynchronously
    sh("ip netns del " + ns_);
    sh("rm -rf " + dir_);
  }
  bool serverRunning() {
    return sh("grep -qx " + tag_ + " /proc/" + std::to_string(pid_) + "/comm") == 0;
  }
  DnsServerHints serverHints() const {
    DnsServerHints h;
    h.process_names = {tag_};
    return h;
  }
  std::string tag_, ns_, dir_;  // tag_: at most 15 characters, it is also the server's comm
  pid_t pid_ = 0;
};

TEST_F(RealDnsServer, FoundByProcessWithoutTheApi) {
  auto r = discoverHops(HostRoot("/"), {}, serverHints());
  const HopDevice* out = find(r.devices, Hop::HostOut);
  const HopDevice* srv = find(r.devices, Hop::Server);
  ASSERT_TRUE(out && srv);
  EXPECT_EQ(out->ifname, tag_ + "h");
  EXPECT_EQ(out->netns_path, "");
  EXPECT_EQ(srv->ifname, "eth0");
  auto ino = netnsInode("/run/netns/" + ns_);
  ASSERT_TRUE(ino.ok());
  EXPECT_EQ(srv->netns_ino, *ino);
  EXPECT_EQ(r.dns_servers, 1u);
}

TEST_F(RealDnsServer, TakenWhenItHoldsAKubeDnsEndpoint) {
  DnsServerHints hints = serverHints();
  hints.endpoints = std::set<std::string>{"10.96.7.7", "fd00:251::3"};
  hints.expected_here = {"fd00:251::3"};
  auto r = discoverHops(HostRoot("/"), {}, hints);
  EXPECT_TRUE(find(r.devices, Hop::Server));
  EXPECT_TRUE(find(r.devices, Hop::HostOut));
  EXPECT_EQ(r.dns_servers, 1u);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
}

TEST_F(RealDnsServer, NotTakenWhenItHoldsNoEndpointAndTheMissingOneIsReported) {
  DnsServerHints hints = serverHints();
  hints.endpoints = std::set<std::string>{"10.251.0.99"};
  hints.expected_here = {"10.251.0.99"};
  auto r = discoverHops(HostRoot("/"), {}, hints);
  EXPECT_FALSE(find(r.devices, Hop::Server));
  EXPECT_FALSE(find(r.devices, Hop::HostOut));
  EXPECT_EQ(r.dns_servers, 0u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("kube-dns endpoint 10.251.0.99 is on this node"), std::string::npos)
      << r.errors[0];
}

TEST_F(RealDnsServer, AnEndpointOnTheNodesOwnAddressIsAHostNetworkServerNotAMissingOne) {
  DnsServerHints hints = serverHints();
  ASSERT_EQ(sh("ip addr add 10.252.0.1/32 dev " + tag_ + "h"), 0);  // our netns's own address
  hints.endpoints = std::set<std::string>{"10.252.0.1"};
  hints.expected_here = {"10.252.0.1"};
  auto r = discoverHops(HostRoot("/"), {}, hints);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_FALSE(find(r.devices, Hop::Server));  // the process netns holds no endpoint
}

TEST_F(RealDnsServer, AServerThatExitedIsNotAnError) {
  ::kill(pid_, SIGKILL);
  // Not reaped yet: a zombie keeps its comm but has no namespaces any more.
  for (int i = 0; i < 100 && sh("grep -q '^State:.*Z' /proc/" + std::to_string(pid_) + "/status");
       ++i)
    ::usleep(10000);
  ASSERT_TRUE(serverRunning()) << "the zombie's comm should still read as the server's";
  auto r = discoverHops(HostRoot("/"), {}, serverHints());
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_FALSE(find(r.devices, Hop::Server));
}

TEST_F(RealDnsServer, OtherProcessNamesAreNotServers) {
  DnsServerHints hints;  // the default: coredns
  EXPECT_TRUE(hints.process_names.count("coredns"));
  auto r = discoverHops(HostRoot("/"), {}, hints);
  EXPECT_FALSE(find(r.devices, Hop::Server));
}

TEST_F(RealDnsServer, ListLinksReadsAddressesWhenAsked) {
  auto with = listLinks("/run/netns/" + ns_, true);
  ASSERT_TRUE(with.ok()) << with.error().message;
  std::set<std::string> addrs;
  for (const auto& l : *with)
    if (l.name == "eth0") addrs.insert(l.addresses.begin(), l.addresses.end());
  EXPECT_TRUE(addrs.count("10.251.0.3"));
  EXPECT_TRUE(addrs.count("fd00:251::3"));
  auto without = listLinks("/run/netns/" + ns_);
  ASSERT_TRUE(without.ok());
  for (const auto& l : *without) EXPECT_TRUE(l.addresses.empty()) << l.name;
}

}  // namespace
}  // namespace nodegate::dns
