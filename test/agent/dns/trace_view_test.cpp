// The readable forms of traces: API JSON, the CLI line, and the page's SVG row of hops.
#include "dns/trace_view.h"

#include <gtest/gtest.h>

namespace nodegate::dns {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

QueryTrace answered() {
  QueryTrace t;
  t.seq = 7;
  t.vmi = "ns1/vm1";
  t.id = 0xbeef;
  t.qname = "www.example.test";
  t.qtype = 1;
  t.first_ns = 1000 * kMs;
  t.original_daddr = "10.96.0.10";
  auto q = [&](Hop h, std::uint64_t ms, const char* s, const char* d) {
    t.query_path.push_back({h, t.first_ns + ms * kMs / 10, s, d, 40000, 53});
  };
  auto r = [&](Hop h, std::uint64_t ms, const char* s, const char* d) {
    t.response_path.push_back({h, t.first_ns + ms * kMs / 10, s, d, 53, 40000});
  };
  q(Hop::Tap, 0, "10.0.2.2", "10.96.0.10");
  q(Hop::LauncherEth0, 1, "10.244.1.7", "10.96.0.10");
  q(Hop::HostOut, 2, "10.244.1.7", "10.244.0.3");
  r(Hop::HostOut, 12, "10.244.0.3", "10.244.1.7");
  r(Hop::LauncherEth0, 13, "10.96.0.10", "10.244.1.7");
  r(Hop::Tap, 14, "10.96.0.10", "10.0.2.2");
  t.rcode = 0;
  t.verdict = Verdict::Answered;
  t.last_hop = Hop::Tap;
  return t;
}

QueryTrace lost() {
  QueryTrace t = answered();
  t.seq = 8;
  t.qname = "lost.example.test";
  t.response_path.clear();
  t.query_path.pop_back();
  t.query_path.push_back({Hop::HostVeth, t.first_ns + kMs, "10.244.1.7", "10.96.0.10", 40000, 53});
  t.rcode.reset();
  t.verdict = Verdict::ServiceTranslationMissing;
  t.last_hop = Hop::HostVeth;
  t.drop_reason = "IP_INNOROUTES";
  t.drop_hop = Hop::HostVeth;
  return t;
}

TEST(TraceJson, ShapeAndValues) {
  TimeBase base{1'700'000'000'000'000'000};
  auto j = traceJson(answered(), base);
  EXPECT_EQ(j["seq"], 7);
  EXPECT_EQ(j["qtype"], "A");
  EXPECT_EQ(j["transport"], "udp");
  EXPECT_EQ(j["result"], "answered");
  EXPECT_EQ(j["rcode"], "NOERROR");
  EXPECT_TRUE(j["drop_reason"].is_null());
  EXPECT_NEAR(j["latency_seconds"].get<double>(), 0.0014, 1e-9);
  EXPECT_EQ(j["time"].get<std::string>().substr(0, 4), "2023");
  ASSERT_EQ(j["hops"].size(), 3u);
  EXPECT_EQ(j["hops"][0]["hop"], "tap");
  EXPECT_EQ(j["hops"][1]["query"]["src"], "10.244.1.7:40000");
  EXPECT_EQ(j["hops"][2]["hop"], "host-out");
  EXPECT_EQ(j["hops"][2]["number"], 6);
  EXPECT_NEAR(j["hops"][2]["latency_seconds"].get<double>(), 0.001, 1e-9);
}

TEST(TraceJson, Ipv6EndpointsAreBracketed) {
  QueryTrace t = answered();
  t.ipv6 = true;
  t.query_path[0].saddr = "fd10:0:2::2";
  auto j = traceJson(t, {});
  EXPECT_EQ(j["family"], "ipv6");
  EXPECT_EQ(j["hops"][0]["query"]["src"], "[fd10:0:2::2]:40000");
}

TEST(TraceLine, AnsweredShowsNatChangesAndLatency) {
  std::string line = traceLine(traceJson(answered(), {}));
  EXPECT_NE(line.find("ns1/vm1 A www.example.test udp id=0xbeef"), std::string::npos) << line;
  EXPECT_NE(
      line.find("tap 10.0.2.2:40000->10.96.0.10:53 > launcher-eth0 10.244.1.7:40000->10.96.0.10:53"
                " > host-out 10.244.1.7:40000->10.244.0.3:53"),
      std::string::npos)
      << line;
  EXPECT_NE(line.find("| NOERROR in 1.40 ms"), std::string::npos) << line;
}

TEST(TraceLine, LostShowsLastHopAndDrop) {
  std::string line = traceLine(traceJson(lost(), {}));
  EXPECT_NE(line.find("host-veth (no answer)"), std::string::npos) << line;
  EXPECT_NE(line.find("LOST: service IP not translated, last seen at host-veth, kernel drop "
                      "IP_INNOROUTES at host-veth"),
            std::string::npos)
      << line;
}

TEST(TraceLine, ToleratesForeignJson) {
  EXPECT_NE(traceLine(nlohmann::json::object()).find("? ?"), std::string::npos);
  EXPECT_NO_THROW(traceLine(nlohmann::json{{"hops", 3}, {"id", "x"}, {"retry_of", "y"}}));
}

TEST(DnsSection, DrawsHopsAndHighlightsTheLastSeen) {
  VmiPath p{"ns1/vm1", {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth, Hop::HostOut}, {}};
  p.recent = {answered(), lost()};
  std::string h = renderDnsSection({p}, {}, true, "");
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(h.find("data-hop=\"host-out\""), std::string::npos);
  EXPECT_NE(h.find("class=\"hop last-seen\" data-hop=\"host-veth\""), std::string::npos) << h;
  EXPECT_NE(h.find("stroke=\"#c62828\""), std::string::npos);
  EXPECT_NE(h.find("IP_INNOROUTES"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  // Names are escaped.
  VmiPath evil{"ns/<b>x</b>", {Hop::Tap}, {}};
  EXPECT_EQ(renderDnsSection({evil}, {}, true, "").find("<b>"), std::string::npos);
  EXPECT_NE(renderDnsSection({}, {}, false, "not root").find("not running: not root"),
            std::string::npos);
}

// Each failure verdict has its wording, detail and hint in the API, the CLI and the page.
TEST(TraceJson, FailureVerdictsCarryTheirEvidenceAndAHint) {
  QueryTrace nx = answered();
  nx.qname = "db.prod.svc.cluster.local";
  nx.cluster_name = true;  // what the engine decides (clusterName(), correlator_test)
  nx.rcode = 3;
  nx.verdict = Verdict::NotFound;
  auto j = traceJson(nx, {});
  EXPECT_EQ(j["result"], "not_found");
  EXPECT_EQ(j["detail"], "NXDOMAIN from 10.96.0.10");
  EXPECT_NE(j["hint"].get<std::string>().find("cannot see the cluster's zones"), std::string::npos);
  EXPECT_NE(traceLine(j).find("NOT FOUND: NXDOMAIN in 1.40 ms from 10.96.0.10"), std::string::npos)
      << traceLine(j);
  EXPECT_NE(traceLine(j).find("\n    hint: guest resolver configuration"), std::string::npos);

  QueryTrace nodata = answered();
  nodata.qtype = 28;
  nodata.no_answers = true;
  nodata.verdict = Verdict::NotFound;
  j = traceJson(nodata, {});
  EXPECT_TRUE(j["nodata"].get<bool>());
  EXPECT_EQ(j["detail"], "NODATA (no AAAA records) from 10.96.0.10");
  EXPECT_NE(traceLine(j).find("NODATA (NOERROR, no answers)"), std::string::npos);

  QueryTrace unreach = lost();
  unreach.verdict = Verdict::Unreachable;
  unreach.icmp_code = 3;
  unreach.icmp_from = "10.244.0.3";
  unreach.icmp_hop = Hop::HostOut;
  j = traceJson(unreach, {});
  EXPECT_EQ(j["icmp"]["type"], "port-unreachable");
  EXPECT_EQ(j["icmp"]["from"], "10.244.0.3");
  EXPECT_NE(traceLine(j).find("UNREACHABLE: ICMP port-unreachable from 10.244.0.3 at host-out"),
            std::string::npos)
      << traceLine(j);

  QueryTrace rst = lost();
  rst.verdict = Verdict::ConnectionRefused;
  rst.tcp = true;
  rst.connect_only = true;
  rst.qname.clear();
  rst.reset_hop = Hop::HostVeth;
  j = traceJson(rst, {});
  EXPECT_EQ(j["reset_hop"], "host-veth");
  EXPECT_TRUE(j["connect_only"].get<bool>());
  EXPECT_NE(traceLine(j).find("(connection) tcp"), std::string::npos) << traceLine(j);
  EXPECT_NE(traceLine(j).find("CONNECTION REFUSED: TCP connection to 10.96.0.10 port 53 reset"),
            std::string::npos);

  QueryTrace slow = answered();
  slow.verdict = Verdict::SlowFailover;
  slow.original_daddr = "10.96.0.11";
  slow.failover_of = 3;
  slow.failover_server = "10.96.0.10";
  slow.failover_lost_ns = 1'000'000'000;
  j = traceJson(slow, {});
  EXPECT_EQ(j["failover"]["unanswered_server"], "10.96.0.10");
  EXPECT_DOUBLE_EQ(j["failover"]["lost_seconds"].get<double>(), 1.0);
  EXPECT_EQ(j["failover"]["first_attempt"], 3);
  EXPECT_NE(traceLine(j).find("SLOW FAILOVER: answered by 10.96.0.11 after 10.96.0.10 did not "
                              "answer for 1.00 s"),
            std::string::npos)
      << traceLine(j);

  QueryTrace tc = answered();
  tc.truncated = true;
  tc.verdict = Verdict::TruncatedTcpFailed;
  tc.tcp_failure = "no TCP retry";
  j = traceJson(tc, {});
  EXPECT_EQ(j["tcp_failure"], "no TCP retry");
  EXPECT_NE(traceLine(j).find("TRUNCATED, TCP FAILED: truncated over UDP, no TCP retry"),
            std::string::npos)
      << traceLine(j);

  // The node-local cache: the evidence that nothing serves it, each in its own words.
  QueryTrace down = lost();
  down.original_daddr = "169.254.20.10";
  down.node_local = true;
  down.verdict = Verdict::NodeLocalCacheDown;
  down.drop_reason = "NO_SOCKET";
  j = traceJson(down, {});
  EXPECT_EQ(j["result"], "node_local_cache_down");
  EXPECT_TRUE(j["node_local"].get<bool>());
  EXPECT_TRUE(j["cache_upstream"].is_null());
  EXPECT_EQ(j["detail"],
            "node-local DNS cache 169.254.20.10 is not serving: no socket on port 53 (kernel drop "
            "NO_SOCKET at host-veth)");
  EXPECT_NE(j["hint"].get<std::string>().find("node-local-dns DaemonSet pod on this node"),
            std::string::npos);
  EXPECT_NE(traceLine(j).find("NODE-LOCAL CACHE DOWN: node-local DNS cache 169.254.20.10"),
            std::string::npos)
      << traceLine(j);
  down.drop_reason.clear();
  EXPECT_EQ(verdictDetail(down),
            "node-local DNS cache 169.254.20.10 is not serving: no answer and no query upstream, "
            "last seen at host-veth");
  // Alive, its upstream silent: unanswered, and the hint names the upstream.
  QueryTrace silent = down;
  silent.verdict = Verdict::Unanswered;
  silent.upstream_seen = true;
  silent.upstream_server = "10.244.0.3";
  j = traceJson(silent, {});
  EXPECT_EQ(j["cache_upstream"], "10.244.0.3");
  EXPECT_NE(j["detail"].get<std::string>().find("the node-local cache asked 10.244.0.3 upstream"),
            std::string::npos)
      << j["detail"];
  EXPECT_NE(j["hint"].get<std::string>().find("upstream of the node-local cache"),
            std::string::npos);

  for (Verdict v : finishedVerdicts()) {
    QueryTrace t = v == Verdict::Answered ? answered() : lost();
    t.verdict = v;
    EXPECT_EQ(verdictHint(t).empty(), v == Verdict::Answered) << verdictName(v);
    EXPECT_FALSE(verdictDetail(t).empty());
  }
}

TEST(DnsSection, ShowsTheHintAndTheSlowFailoverPerVm) {
  VmiPath p{"ns1/vm1", {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth, Hop::HostOut}, {}};
  QueryTrace slow = answered();
  slow.verdict = Verdict::SlowFailover;
  slow.failover_of = 3;
  slow.failover_server = "10.96.0.10";
  slow.failover_lost_ns = 1'000'000'000;
  p.recent = {slow, slow};
  std::string h = renderDnsSection({p}, {}, true, "");
  EXPECT_NE(h.find("Slow failover: nameserver 10.96.0.10 did not answer; 2 recent queries lost "
                   "2000.0 ms"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("class=\"dns-hint\""), std::string::npos);
  EXPECT_NE(h.find("slow_failover"), std::string::npos);
}

}  // namespace
}  // namespace nodegate::dns
