// CoreDNS's Corefile as clusters ship it (test/fixtures/dns/README.md says where each is from),
// and Corefiles that must be refused with the line named.
#include "corefile.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nodegate {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/dns/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Corefile, AksConfigMap) {
  auto f = parseCorefileConfigMap(fixture("coredns-configmap-aks.json"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->servers.size(), 1u);
  const auto& s = f->servers[0];
  EXPECT_THAT(s.zones, ElementsAre("."));
  EXPECT_EQ(s.port, 53);
  EXPECT_TRUE(s.has_kubernetes);
  EXPECT_THAT(s.kubernetes_zones, ElementsAre("cluster.local", "in-addr.arpa", "ip6.arpa"));
  EXPECT_EQ(s.forward_from, ".");
  EXPECT_THAT(s.forward_to, ElementsAre("/etc/resolv.conf"));
  EXPECT_TRUE(s.imports);   // import custom/*.override inside the block
  EXPECT_TRUE(f->imports);  // import custom/*.server at the top
  EXPECT_THAT(describeCorefile(*f),
              ElementsAre(".:53 answers cluster.local in-addr.arpa ip6.arpa (kubernetes), "
                          "forwards . to /etc/resolv.conf (an import nodegate does not read); "
                          "top-level imports not read"));
}

TEST(Corefile, StubDomainAndForwardOptions) {
  auto f = parseCorefileConfigMap(fixture("coredns-configmap-stub-domain.json"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->servers.size(), 2u);
  // The forward plugin's option block does not end the server block.
  EXPECT_THAT(f->servers[0].forward_to, ElementsAre("/etc/resolv.conf"));
  EXPECT_FALSE(f->servers[0].imports);
  EXPECT_THAT(f->servers[1].zones, ElementsAre("consul.local"));
  EXPECT_FALSE(f->servers[1].has_kubernetes);
  EXPECT_THAT(f->servers[1].forward_to, ElementsAre("10.150.0.1"));
  auto lines = describeCorefile(*f);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1],
            "consul.local:53 holds no cluster zone (no kubernetes plugin), forwards . to "
            "10.150.0.1");
}

TEST(Corefile, NodeLocalDnsCacheBindsItsLinkLocalAddress) {
  auto f = parseCorefile(fixture("node-local-dns.Corefile"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->servers.size(), 3u);
  for (const auto& s : f->servers) {
    EXPECT_THAT(s.binds, ElementsAre("169.254.20.10", "10.96.0.10"));
    EXPECT_FALSE(s.has_kubernetes);
  }
  EXPECT_THAT(f->servers[0].forward_to, ElementsAre("__PILLAR__CLUSTER__DNS__"));
  EXPECT_THAT(describeCorefile(*f)[0], HasSubstr("cluster.local:53 on 169.254.20.10 10.96.0.10"));
}

TEST(Corefile, LinkLocalBindsAreTheNodeLocalCachesAddresses) {
  auto f = parseCorefile(fixture("node-local-dns.Corefile"));
  ASSERT_TRUE(f.ok());
  // Once, though every block binds it; the ClusterIP beside it is the Service's elsewhere.
  EXPECT_THAT(linkLocalBinds(*f), ElementsAre("169.254.20.10"));
  f = parseCorefile(
      ".:53 {\n bind 0.0.0.0 169.254.0.010 fd00::10 lo 169.255.1.1 169.254.25.10\n}\n"
      ".:5353 {\n bind 169.254.9.9\n}\n");
  ASSERT_TRUE(f.ok());
  // inet_pton takes no leading zeros; interface names, IPv6 and other ports are not taken.
  EXPECT_THAT(linkLocalBinds(*f), ElementsAre("169.254.25.10"));
  EXPECT_TRUE(linkLocalBinds(CorefileFacts{}).empty());
}

TEST(Corefile, PortsSchemesAndComments) {
  auto f = parseCorefile(
      "# a comment line\n"
      "dns://.:5353 {  # not port 53\n"
      "  forward . 1.1.1.1\n"
      "}\n"
      "example.org:53 example.net {\n"
      "  kubernetes   # no zones: the server block's\n"
      "}\n");
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->servers.size(), 2u);
  EXPECT_EQ(f->servers[0].port, 5353);
  EXPECT_THAT(f->servers[1].zones, ElementsAre("example.org", "example.net"));
  EXPECT_TRUE(f->servers[1].has_kubernetes);
  EXPECT_TRUE(f->servers[1].kubernetes_zones.empty());
  // Only port-53 servers are what guests ask.
  EXPECT_THAT(
      describeCorefile(*f),
      ElementsAre("example.org example.net:53 answers example.org example.net (kubernetes)"));
  auto none = parseCorefile("x:5300 {\n}\n");
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(describeCorefile(*none), ElementsAre("no server block on port 53"));
}

TEST(Corefile, BadInputIsAnErrorThatNamesTheLine) {
  for (auto [text, want] : std::initializer_list<std::pair<const char*, const char*>>{
           {".:53 {\n  errors\n", "1 unclosed {"},
           {"}\n", "line 1: } without {"},
           {".:53 {\n}\n}\n", "line 3: } without {"},
           {"{\n}\n", "line 1: a block without a zone"},
           {".:99999 {\n}\n", "line 1: bad server address .:99999"},
           {".:53x {\n}\n", "bad server address"},
           {".:53\n", "server .:53 has no block"},
       }) {
    auto f = parseCorefile(text);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_THAT(f.error().message, HasSubstr(want)) << text;
  }
  EXPECT_FALSE(parseCorefile(std::string(2u << 20, ' ')).ok());
  EXPECT_THAT(parseCorefileConfigMap(R"({"data":{}})").error().message, HasSubstr("no Corefile"));
  EXPECT_FALSE(parseCorefileConfigMap("[").ok());
  EXPECT_FALSE(parseCorefileConfigMap(R"({"data":{"Corefile":7}})").ok());
}

TEST(Corefile, ManyServerBlocksAreBounded) {
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "z" + std::to_string(i) + ".example {\n}\n";
  auto f = parseCorefile(many);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error().message, HasSubstr("more than 4096 server blocks"));
}

}  // namespace
}  // namespace nodegate
