// listLinks/discoverHops against real network namespaces built with iproute2 (root, kernel).
#include <unistd.h>

#include <cstdlib>
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

}  // namespace
}  // namespace nodegate::dns
