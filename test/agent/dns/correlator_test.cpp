// The correlation engine on synthetic hop sequences shaped like what the tracer reports on the
// KubeVirt masquerade path (addresses rewritten by masquerade and service DNAT).
#include "dns/correlator.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace nodegate::dns {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
const std::string kGuest = "10.0.2.2", kPod = "10.244.1.7", kSvc = "10.96.0.10",
                  kCoreDns = "10.244.0.3";

struct Q {
  std::uint16_t id = 0x1234;
  std::string qname = "example.com";
  std::uint16_t qtype = 1;
  std::string vmi = "default/vm1";
  bool tcp = false;
};

Observation query(const Q& q, Hop hop, std::uint64_t t) {
  Observation o;
  o.ts_ns = t;
  o.hop = hop;
  o.vmi = hop >= Hop::HostOut ? "" : q.vmi;
  o.id = q.id;
  o.qname = q.qname;
  o.qtype = q.qtype;
  o.tcp = q.tcp;
  o.sport = 40000;
  o.dport = 53;
  // Where the NATs stand at each hop of a healthy kube-proxy path.
  o.saddr = hop <= Hop::Bridge ? kGuest : kPod;
  o.daddr = hop <= Hop::HostVeth ? kSvc : kCoreDns;
  return o;
}

Observation answer(const Q& q, Hop hop, std::uint64_t t, std::uint8_t rcode = 0) {
  Observation o = query(q, hop, t);
  std::swap(o.saddr, o.daddr);
  std::swap(o.sport, o.dport);
  o.response = true;
  o.rcode = rcode;
  o.saddr = hop <= Hop::HostVeth ? kSvc : kCoreDns;
  return o;
}

const Hop kForward[] = {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth, Hop::HostOut};

// The queries expire() finished, whole: the newest of done(), as many as it returned (in the
// order they finished, as both lists are).
std::vector<QueryTrace> expireTraces(Correlator& c, std::uint64_t now_ns) {
  const std::size_t n = c.expire(now_ns).size();
  const auto& d = c.done();
  EXPECT_LE(n, d.size()) << "more finished than done() keeps: raise max_done";
  std::vector<QueryTrace> out;
  for (std::size_t i = d.size() - std::min(n, d.size()); i < d.size(); ++i) out.push_back(d[i]);
  return out;
}

void sendFull(Correlator& c, const Q& q, std::uint64_t t0, std::uint8_t rcode = 0) {
  std::uint64_t t = t0;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs / 10));
  t += 2 * kMs;  // server time
  for (int i = 4; i >= 0; --i) c.observe(answer(q, kForward[i], t += kMs / 10, rcode));
}

TEST(Correlator, HealthyQueryIsAnsweredWithEveryHopInOrder) {
  Correlator c;
  sendFull(c, Q{}, 1000 * kMs);
  auto done = expireTraces(c, 1010 * kMs);
  ASSERT_EQ(done.size(), 1u);
  const auto& t = done[0];
  EXPECT_EQ(t.verdict, Verdict::Answered);
  ASSERT_EQ(t.query_path.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(t.query_path[i].hop, kForward[i]);
  ASSERT_EQ(t.response_path.size(), 5u);
  EXPECT_EQ(t.response_path.back().hop, Hop::Tap);
  EXPECT_EQ(t.original_daddr, kSvc);
  EXPECT_EQ(t.query_path[2].saddr, kPod);      // after masquerade
  EXPECT_EQ(t.query_path[4].daddr, kCoreDns);  // after service DNAT
  ASSERT_TRUE(t.latencyNs());
  // Guest-visible latency is the tap's round trip, the longest; inner hops are shorter.
  EXPECT_EQ(*t.latencyNs(), *t.hopLatencyNs(Hop::Tap));
  EXPECT_GT(*t.hopLatencyNs(Hop::Tap), *t.hopLatencyNs(Hop::HostOut));
  EXPECT_GT(*t.hopLatencyNs(Hop::HostOut), 0u);
  EXPECT_EQ(t.last_hop, Hop::Tap);
  EXPECT_EQ(c.inFlight(), 0u);
}

TEST(Correlator, AnswerFinishesAtTheFirstTracedHopWithoutWaitingForTimeout) {
  Correlator c;
  Q q;
  // Only the launcher eth0 and host are traced (no tap): the answer at eth0 completes it.
  c.observe(query(q, Hop::LauncherEth0, 1 * kMs));
  c.observe(query(q, Hop::HostVeth, 2 * kMs));
  c.observe(answer(q, Hop::HostVeth, 5 * kMs));
  EXPECT_EQ(c.inFlight(), 1u);
  c.observe(answer(q, Hop::LauncherEth0, 6 * kMs));
  EXPECT_EQ(c.inFlight(), 0u);
  auto done = expireTraces(c, 7 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Answered);
  EXPECT_EQ(*done[0].latencyNs(), 5 * kMs);
}

TEST(Correlator, EachRcodeHasItsVerdict) {
  Correlator c;
  const std::pair<std::uint8_t, Verdict> cases[] = {
      {0, Verdict::Answered},    {3, Verdict::NotFound},    {2, Verdict::ServerError},
      {1, Verdict::ServerError}, {4, Verdict::ServerError}, {5, Verdict::Refused}};
  std::uint16_t id = 1;
  for (const auto& [rcode, v] : cases) {
    Q q;
    q.id = id++;
    sendFull(c, q, id * 10 * kMs, rcode);
  }
  auto done = expireTraces(c, 100 * kMs);
  ASSERT_EQ(done.size(), std::size(cases));
  for (std::size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].verdict, cases[i].second) << rcodeName(*done[i].rcode);
    EXPECT_FALSE(done[i].no_answers);
  }
}

TEST(Correlator, NoErrorWithoutAnswerRecordsIsNodataNotFound) {
  Correlator c;
  Q q;
  q.qtype = 28;
  std::uint64_t t = 0;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs));
  for (int i = 4; i >= 0; --i) {
    auto a = answer(q, kForward[i], t += kMs);
    a.no_answers = true;
    c.observe(a);
  }
  auto done = expireTraces(c, t);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::NotFound);
  EXPECT_TRUE(done[0].no_answers);
  EXPECT_EQ(*done[0].rcode, 0);
}

TEST(Correlator, ClusterNamesAreThoseUnderTheClusterDomainsOrKubernetesShaped) {
  const std::vector<std::string> domains = {"cluster.local", "corp.example."};
  EXPECT_TRUE(clusterName("db.prod.svc.cluster.local", domains));
  EXPECT_TRUE(clusterName("DB.Prod.SVC.Cluster.Local.", domains));  // 0x20 case, absolute form
  EXPECT_TRUE(clusterName("cluster.local", domains));
  EXPECT_TRUE(clusterName("host.corp.example", domains));
  EXPECT_FALSE(clusterName("notcluster.local", domains));  // a label boundary, not a suffix
  EXPECT_FALSE(clusterName("www.example.com", domains));
  EXPECT_FALSE(clusterName("www.example.com", {}));
  // Kubernetes-shaped names under a domain nobody told nodegate of, and the search-list form.
  EXPECT_TRUE(clusterName("db.prod.svc.k8s.example.net", {}));
  EXPECT_TRUE(clusterName("db.prod.svc", {}));
  EXPECT_FALSE(clusterName("svc", {}));
  EXPECT_FALSE(clusterName("", domains));
}

TEST(Correlator, EachTraceSaysWhetherItAskedForAClusterName) {
  Correlator c;
  Q in_cluster;
  in_cluster.qname = "db.prod.svc.cluster.local";
  Q corp;
  corp.id = 2;
  corp.qname = "build.corp.example";
  sendFull(c, in_cluster, 1 * kMs, 3);
  sendFull(c, corp, 20 * kMs, 3);
  auto done = expireTraces(c, 100 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].cluster_name);  // cluster.local until told otherwise
  EXPECT_FALSE(done[1].cluster_name);
  c.setClusterDomains({"corp.example"});
  sendFull(c, in_cluster, 200 * kMs, 3);  // still Kubernetes-shaped
  corp.id = 3;
  sendFull(c, corp, 220 * kMs, 3);
  done = expireTraces(c, 300 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].cluster_name);
  EXPECT_TRUE(done[1].cluster_name);
}

TEST(Correlator, AAndAaaaWithTheSameIdStayDistinct) {
  Correlator c;
  Q a, aaaa;
  aaaa.qtype = 28;  // glibc sends both from one socket, often with ids one apart or equal
  std::uint64_t t = 0;
  for (Hop h : kForward) {
    c.observe(query(a, h, t += kMs));
    c.observe(query(aaaa, h, t += kMs));
  }
  for (int i = 4; i >= 0; --i) c.observe(answer(aaaa, kForward[i], t += kMs));
  auto done = expireTraces(c, t);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].qtype, 28);
  EXPECT_EQ(c.inFlight(), 1u);  // the A query is still waiting
  done = expireTraces(c, t + 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].qtype, 1);
  EXPECT_NE(done[0].verdict, Verdict::Answered);
}

TEST(Correlator, RetryWithTheSameIdIsANewQueryLinkedToTheFirst) {
  Correlator c;
  Q q;
  // The first attempt is lost after the bridge; the guest retries 1 s later and gets through.
  c.observe(query(q, Hop::Tap, 0));
  c.observe(query(q, Hop::Bridge, kMs));
  std::uint64_t t = 1000 * kMs;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs));
  for (int i = 4; i >= 0; --i) c.observe(answer(q, kForward[i], t += kMs));
  auto done = expireTraces(c, t);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Answered);
  EXPECT_EQ(done[0].retry_of, 1u);
  EXPECT_EQ(done[0].query_path.size(), 5u);
  done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].seq, 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].last_hop, Hop::Bridge);
}

TEST(Correlator, QueriesOfDifferentVmsWithEqualIdsStayApart) {
  Correlator c;
  Q a, b;
  b.vmi = "default/vm2";
  c.observe(query(a, Hop::Tap, 0));
  c.observe(query(b, Hop::Tap, kMs));
  c.observe(answer(b, Hop::Tap, 2 * kMs));
  auto done = expireTraces(c, 3 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].vmi, "default/vm2");
  EXPECT_EQ(c.inFlight(), 1u);
}

TEST(Correlator, QnameCaseDoesNotSplitAQuery) {
  Correlator c;
  Q lower, upper;
  upper.qname = "ExAmple.COM";
  c.observe(query(lower, Hop::Tap, 0));
  c.observe(answer(upper, Hop::Tap, kMs));
  EXPECT_EQ(c.expire(2 * kMs).size(), 1u);
}

TEST(Correlator, IncidentUntranslatedAtHostOutIsServiceTranslationMissing) {
  Correlator c;
  Q q;
  std::uint64_t t = 0;
  for (Hop h : kForward) {
    auto o = query(q, h, t += kMs);
    o.daddr = kSvc;  // nobody translated the ClusterIP
    c.observe(o);
  }
  EXPECT_TRUE(c.expire(4000 * kMs).empty());  // not yet timed out
  auto done = expireTraces(c, 5100 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::ServiceTranslationMissing);
  EXPECT_EQ(done[0].last_hop, Hop::HostOut);
  EXPECT_TRUE(done[0].drop_reason.empty());
}

// A guest that queries a CoreDNS pod directly (its address known from the API's EndpointSlices)
// needs no translation: a lost query to it is plain NoResponse, not the incident.
TEST(Correlator, QueryStraightToAKnownDnsServerIsNotTranslationMissing) {
  Correlator c;
  c.setServerAddresses({kSvc});
  Q q;
  std::uint64_t t = 0;
  for (Hop h : kForward) {
    auto o = query(q, h, t += kMs);
    o.daddr = kSvc;
    c.observe(o);
  }
  auto done = expireTraces(c, 5100 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].last_hop, Hop::HostOut);
}

TEST(Correlator, IncidentWithKernelDropRecordsTheReason) {
  Correlator c;
  Q q;
  for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth}) {
    auto o = query(q, h, kMs * static_cast<unsigned>(h));
    c.observe(o);
  }
  Observation drop = query(q, Hop::HostVeth, 9 * kMs);
  drop.drop = true;
  drop.drop_reason = "IP_INNOROUTES";
  drop.vmi.clear();  // kfree_skb knows no VMI
  c.observe(drop);
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::ServiceTranslationMissing);
  EXPECT_EQ(done[0].drop_reason, "IP_INNOROUTES");
  EXPECT_EQ(done[0].drop_hop, Hop::HostVeth);
  EXPECT_EQ(done[0].last_hop, Hop::HostVeth);
}

TEST(Correlator, UntranslatedDropBeyondTheTracedHopsIsTranslationMissing) {
  Correlator c;
  Q q;
  for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth})
    c.observe(query(q, h, kMs * static_cast<unsigned>(h)));
  Observation drop = query(q, Hop::Unknown, 9 * kMs);  // in a netns nobody traces (the uplink)
  drop.drop = true;
  drop.drop_reason = "IP_INADDRERRORS";
  drop.vmi.clear();
  c.observe(drop);
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::ServiceTranslationMissing);
  EXPECT_EQ(done[0].drop_hop, Hop::Unknown);
}

TEST(Correlator, SilentServerAfterTranslationIsUnanswered) {
  Correlator c;
  c.setBeyondHostTraced(true);
  Q q;
  std::uint64_t t = 0;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs));
  c.observe(query(q, Hop::Server, t += kMs));
  auto done = expireTraces(c, t + 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].last_hop, Hop::Server);
}

TEST(Correlator, LostInsideTheLauncherIsUnansweredNotTranslation) {
  Correlator c;
  c.setBeyondHostTraced(true);
  Q q;
  c.observe(query(q, Hop::Tap, 0));
  c.observe(query(q, Hop::Bridge, kMs));
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].last_hop, Hop::Bridge);
}

TEST(Correlator, UntranslatedWithoutEvidenceBeyondHostStaysUnanswered) {
  // Only the host veth is traced on the host side: the DNAT would happen after it, so absence
  // of a translated copy proves nothing.
  Correlator c;
  Q q;
  for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth})
    c.observe(query(q, h, kMs * static_cast<unsigned>(h)));
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].last_hop, Hop::HostVeth);
}

TEST(Correlator, DropOfTranslatedQueryIsNotTranslationMissing) {
  Correlator c;
  Q q;
  for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth})
    c.observe(query(q, h, kMs * static_cast<unsigned>(h)));
  Observation drop = query(q, Hop::Unknown, 9 * kMs);
  drop.drop = true;
  drop.drop_reason = "NO_SOCKET";
  drop.daddr = kCoreDns;
  drop.vmi.clear();
  c.observe(drop);
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].drop_reason, "NO_SOCKET");
  EXPECT_EQ(done[0].drop_hop, Hop::Unknown);  // dropped on a device of no traced path
  EXPECT_EQ(done[0].last_hop, Hop::HostVeth);
}

TEST(Correlator, TruncatedAnswerIsLinkedToTheTcpRetry) {
  Correlator c;
  Q udp, tcp;
  tcp.tcp = true;
  tcp.id = 0x4321;  // resolvers may pick a new id for the TCP attempt
  c.observe(query(udp, Hop::Tap, 0));
  auto tc = answer(udp, Hop::Tap, kMs);
  tc.truncated = true;
  tc.no_answers = true;  // what did not fit was left out: not NODATA
  c.observe(tc);
  EXPECT_EQ(c.awaitingTcp(), 1u);  // its verdict waits for the TCP retry
  EXPECT_TRUE(c.expire(2 * kMs).empty());
  c.observe(query(tcp, Hop::Tap, 2 * kMs));
  c.observe(answer(tcp, Hop::Tap, 4 * kMs));
  auto done = expireTraces(c, 5 * kMs);
  ASSERT_EQ(done.size(), 2u);  // the retry finishes first, then the answer it completes
  EXPECT_TRUE(done[0].tcp);
  EXPECT_TRUE(done[1].truncated);
  EXPECT_FALSE(done[1].tcp);
  EXPECT_EQ(done[1].verdict, Verdict::Answered);
  EXPECT_EQ(done[0].tcp_retry_of, done[1].seq);
  EXPECT_EQ(done[1].tcp_retried_by, done[0].seq);
  EXPECT_EQ(c.awaitingTcp(), 0u);
}

TEST(Correlator, TcpQueryWithoutTruncatedPredecessorIsNotLinked) {
  Correlator c;
  Q udp, tcp;
  tcp.tcp = true;
  c.observe(query(udp, Hop::Tap, 0));
  c.observe(answer(udp, Hop::Tap, kMs));  // not truncated
  c.observe(query(tcp, Hop::Tap, 2 * kMs));
  c.observe(answer(tcp, Hop::Tap, 3 * kMs));
  auto done = expireTraces(c, 4 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].tcp_retry_of, 0u);
}

TEST(Correlator, OrphanResponsesAndDropsAreCounted) {
  Correlator c;
  Q q;
  c.observe(answer(q, Hop::Tap, 0));
  Observation d = query(q, Hop::Tap, 0);
  d.drop = true;
  c.observe(d);
  EXPECT_EQ(c.stats().orphan_responses, 1u);
  EXPECT_EQ(c.stats().orphan_drops, 1u);
  EXPECT_EQ(c.inFlight(), 0u);
}

TEST(Correlator, MemoryIsBoundedAndEvictionsAreCounted) {
  CorrelatorLimits lim;
  lim.max_in_flight = 8;
  lim.max_done = 4;
  Correlator c(lim);
  Q q;
  for (int i = 0; i < 100; ++i) {
    q.id = static_cast<std::uint16_t>(i);
    c.observe(query(q, Hop::Tap, static_cast<std::uint64_t>(i)));
  }
  EXPECT_EQ(c.inFlight(), 8u);
  EXPECT_EQ(c.stats().evicted_in_flight, 92u);
  c.expire(10'000 * kMs);
  EXPECT_EQ(c.done().size(), 4u);
  EXPECT_EQ(c.stats().evicted_done, 4u);
  EXPECT_EQ(c.done().back().id, 99);
}

// The accounting takes finished traces once a tick: more of them than the API keeps (max_done)
// all reach it (at 25k queries/s, 2 500 a tick against 1 024 kept), up to max_unaccounted.
TEST(Correlator, EveryFinishedTraceReachesExpireUpToItsOwnCap) {
  CorrelatorLimits lim;
  lim.max_done = 4;
  lim.max_unaccounted = 10;
  Correlator c(lim);
  Q q;
  for (int i = 0; i < 8; ++i) {
    q.id = static_cast<std::uint16_t>(i);
    sendFull(c, q, static_cast<std::uint64_t>(i) * 10 * kMs);
  }
  auto done = c.expire(100 * kMs);
  ASSERT_EQ(done.size(), 8u);
  EXPECT_EQ(done.front().seq, 1u);  // the engine numbers queries from 1 as they start
  EXPECT_EQ(done.back().seq, 8u);
  EXPECT_EQ(c.done().size(), 4u);
  EXPECT_EQ(c.stats().unaccounted_dropped, 0u);
  for (int i = 0; i < 13; ++i) {
    q.id = static_cast<std::uint16_t>(100 + i);
    sendFull(c, q, (20 + static_cast<std::uint64_t>(i)) * 10 * kMs);
  }
  done = c.expire(400 * kMs);
  ASSERT_EQ(done.size(), 10u);
  EXPECT_EQ(done.front().seq, 12u);  // the oldest three (9-11) went
  EXPECT_EQ(done.back().seq, 21u);
  EXPECT_EQ(c.stats().unaccounted_dropped, 3u);
  EXPECT_TRUE(c.expire(500 * kMs).empty());
}

// What expire() hands the accounting is the trace's own account, made once when it finished:
// the round trip at every hop that saw both ways, the server as the guest addressed it, and a
// detail for every query that was not simply answered.
TEST(Correlator, TheOutcomeIsWhatTheTraceSays) {
  Correlator c;
  Q q;
  sendFull(c, q, 1000 * kMs);
  q.id = 0x4321;
  q.qname = "missing.example";
  sendFull(c, q, 2000 * kMs, 3);
  auto out = c.expire(2100 * kMs);
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(c.done().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const QueryTrace& t = c.done()[i];
    const Outcome& o = out[i];
    EXPECT_EQ(o.seq, t.seq);
    EXPECT_EQ(o.vmi, "default/vm1");
    EXPECT_EQ(o.verdict, t.verdict);
    EXPECT_EQ(o.server, kSvc);
    for (Hop h : kForward) {
      const auto n = static_cast<unsigned>(h);
      ASSERT_TRUE(o.timed & (1u << n)) << hopName(h);
      EXPECT_EQ(o.hop_latency_ns[n], t.hopLatencyNs(h).value()) << hopName(h);
    }
    EXPECT_EQ(o.timed, 0b1110110) << "only the five hops that saw the query";
  }
  EXPECT_EQ(out[0].verdict, Verdict::Answered);
  EXPECT_TRUE(out[0].detail.empty());
  EXPECT_EQ(out[1].verdict, Verdict::NotFound);
  EXPECT_FALSE(out[1].nodata);  // NXDOMAIN: the name does not exist
  EXPECT_EQ(out[1].detail, "missing.example A: " + verdictDetail(c.done()[1]));
  EXPECT_NE(out[0].name, out[1].name);
}

TEST(Correlator, LateResponseAfterTimeoutIsAnOrphan) {
  Correlator c;
  Q q;
  c.observe(query(q, Hop::Tap, 0));
  auto done = expireTraces(c, 5000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  c.observe(answer(q, Hop::Tap, 5001 * kMs));
  EXPECT_EQ(c.stats().orphan_responses, 1u);
}

TEST(Correlator, PartialAnswerThatMissedTheFirstHopStillCountsAsAnswered) {
  Correlator c;
  Q q;
  c.observe(query(q, Hop::Tap, 0));
  c.observe(query(q, Hop::Bridge, kMs));
  c.observe(answer(q, Hop::Bridge, 2 * kMs, 2));
  auto done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::ServerError);
  EXPECT_EQ(done[0].last_hop, Hop::Bridge);
}

// --- the failure taxonomy: ICMP, TCP resets, slow failover, failed TCP retries
// --------------------

// The one trace finished by now_ns (a test failure unless there is exactly one).
QueryTrace single(Correlator& c, std::uint64_t now_ns) {
  auto done = expireTraces(c, now_ns);
  EXPECT_EQ(done.size(), 1u);
  return done.empty() ? QueryTrace{} : done[0];
}

Observation icmpFor(const Q& q, Hop hop, std::uint64_t t, std::uint8_t code, bool quote_dns) {
  Observation o = query(q, hop, t);
  o.icmp = true;
  o.icmp_code = code;
  o.saddr = hop <= Hop::HostVeth ? kSvc : kCoreDns;  // sent by the server's host
  if (!quote_dns) {
    o.qname.clear();
    o.id = 0;
    o.qtype = 0;
  }
  return o;
}

Observation syn(const Q& q, Hop hop, std::uint64_t t, std::uint32_t isn) {
  Observation o = query(q, hop, t);
  o.tcp = true;
  o.syn = true;
  o.qname.clear();
  o.id = 0;
  o.qtype = 0;
  o.tcp_seq = isn;
  return o;
}

Observation fromServer(const Q& q, Hop hop, std::uint64_t t, std::uint32_t ack, bool is_syn) {
  Observation o = answer(q, hop, t);
  o.response = false;
  o.tcp = true;
  (is_syn ? o.syn : o.rst) = true;
  o.ack = true;
  o.qname.clear();
  o.id = 0;
  o.qtype = 0;
  o.tcp_seq = ack;
  return o;
}

TEST(Correlator, IcmpUnreachableQuotingTheQueryFinishesItAtTheFirstHop) {
  Correlator c;
  Q q;
  std::uint64_t t = 0;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs));
  for (int i = 4; i >= 1; --i) c.observe(icmpFor(q, kForward[i], t += kMs, 3, true));
  EXPECT_EQ(c.inFlight(), 1u);
  c.observe(icmpFor(q, Hop::Tap, t += kMs, 3, true));
  const QueryTrace tr = single(c, t);
  EXPECT_EQ(tr.verdict, Verdict::Unreachable);
  EXPECT_EQ(*tr.icmp_code, 3);
  EXPECT_EQ(tr.icmp_from, kCoreDns);  // the first ICMP seen: at host-out, before un-NAT
  EXPECT_EQ(tr.icmp_hop, Hop::HostOut);
  EXPECT_EQ(icmpUnreachableName(false, 3), "port-unreachable");
  EXPECT_EQ(icmpUnreachableName(true, 4), "port-unreachable");
  EXPECT_EQ(icmpUnreachableName(false, 99), "code 99");
}

TEST(Correlator, IcmpForAQueryThatLeftUntranslatedIsTranslationMissing) {
  Correlator c;
  c.setBeyondHostTraced(true);
  Q q;
  // No route for the ClusterIP on the node: it answers with ICMP net unreachable.
  c.observe(query(q, Hop::Tap, kMs));
  auto hv = query(q, Hop::HostVeth, 2 * kMs);
  c.observe(hv);
  auto drop = hv;
  drop.drop = true;
  drop.drop_reason = "IP_INNOROUTES";
  c.observe(drop);
  auto icmp = icmpFor(q, Hop::Tap, 3 * kMs, 0, true);
  c.observe(icmp);
  const QueryTrace tr = single(c, 4 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::ServiceTranslationMissing);
  EXPECT_EQ(*tr.icmp_code, 0);  // the evidence stays
}

TEST(Correlator, IcmpWithoutTheDnsHeaderMatchesByPortsAtItsHop) {
  Correlator c;
  Q q, other;
  other.id = 9;
  other.qname = "other.example";
  c.observe(query(q, Hop::Tap, kMs));
  auto o = query(other, Hop::Tap, 2 * kMs);
  o.sport = 41000;
  c.observe(o);
  auto miss = icmpFor(q, Hop::Tap, 3 * kMs, 3, false);
  miss.sport = 42000;  // nobody's port
  c.observe(miss);
  EXPECT_EQ(c.stats().orphan_errors, 1u);
  c.observe(icmpFor(q, Hop::Tap, 4 * kMs, 1, false));  // host unreachable, port 40000
  const QueryTrace tr = single(c, 5 * kMs);
  EXPECT_EQ(tr.qname, "example.com");
  EXPECT_EQ(tr.verdict, Verdict::Unreachable);
  // Fragmentation needed is not a failure of the query.
  c.observe(icmpFor(other, Hop::Tap, 6 * kMs, 4, true));
  EXPECT_TRUE(c.expire(7 * kMs).empty());
  EXPECT_EQ(c.inFlight(), 1u);
}

TEST(Correlator, TcpResetAnsweringTheSynIsConnectionRefused) {
  Correlator c;
  Q q;
  q.tcp = true;
  std::uint64_t t = 0;
  for (Hop h : kForward) c.observe(syn(q, h, t += kMs, 1000));
  c.observe(syn(q, Hop::Tap, t += kMs, 1000));  // the client sends its SYN again
  for (int i = 4; i >= 0; --i) c.observe(fromServer(q, kForward[i], t += kMs, 1001, false));
  const QueryTrace tr = single(c, t);
  EXPECT_EQ(tr.verdict, Verdict::ConnectionRefused);
  EXPECT_TRUE(tr.connect_only);
  EXPECT_TRUE(tr.tcp);
  EXPECT_EQ(tr.qname, "");
  EXPECT_EQ(tr.reset_hop, Hop::HostOut);
  EXPECT_EQ(tr.query_path.size(), 5u);
  EXPECT_EQ(tr.original_daddr, kSvc);
}

TEST(Correlator, ResetAfterTheQueryWasSentMatchesByAddresses) {
  Correlator c;
  Q q;
  q.tcp = true;
  c.observe(query(q, Hop::Tap, kMs));
  auto rst = fromServer(q, Hop::Tap, 2 * kMs, 777777, false);  // acknowledges the query's bytes
  c.observe(rst);
  const QueryTrace tr = single(c, 3 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::ConnectionRefused);
  EXPECT_EQ(tr.qname, "example.com");
}

TEST(Correlator, AConnectionThatCarriesItsQueryLeavesOnlyTheQuerysTrace) {
  Correlator c;
  Q q;
  q.tcp = true;
  c.observe(syn(q, Hop::Tap, kMs, 5));
  c.observe(fromServer(q, Hop::Tap, 2 * kMs, 6, true));
  c.observe(query(q, Hop::Tap, 3 * kMs));
  c.observe(answer(q, Hop::Tap, 4 * kMs));
  const QueryTrace tr = single(c, 4 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::Answered);
  EXPECT_EQ(c.inFlight(), 0u);
  // A connection that opens and carries nothing we saw is no failure either.
  c.observe(syn(q, Hop::Tap, 10 * kMs, 50));
  c.observe(fromServer(q, Hop::Tap, 11 * kMs, 51, true));
  EXPECT_TRUE(c.expire(10 * kMs + 6000 * kMs).empty());
  EXPECT_EQ(c.inFlight(), 0u);
}

TEST(Correlator, IcmpForASynIsUnreachable) {
  Correlator c;
  Q q;
  q.tcp = true;
  c.observe(syn(q, Hop::Tap, kMs, 0xABCD));
  auto icmp = icmpFor(q, Hop::Tap, 2 * kMs, 13, false);
  icmp.tcp = true;
  icmp.tcp_seq = 0xABCD;
  icmp.sport = 1;  // the ISN decides, not the ports
  c.observe(icmp);
  const QueryTrace tr = single(c, 3 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::Unreachable);
  EXPECT_EQ(icmpUnreachableName(false, *tr.icmp_code), "admin-prohibited");
}

TEST(Correlator, SecondServerAnsweringAfterTheFirstTimedOutIsSlowFailover) {
  Correlator c;
  Q q;
  // glibc: nameserver A (the ClusterIP) stays silent; after timeout:1 the same query (same id)
  // goes to nameserver B, which answers.
  c.observe(query(q, Hop::Tap, 0));
  c.observe(query(q, Hop::Bridge, kMs / 10));
  auto b = query(q, Hop::Tap, 1000 * kMs);
  b.daddr = "10.96.0.11";
  c.observe(b);
  auto r = answer(q, Hop::Tap, 1003 * kMs);
  r.saddr = "10.96.0.11";
  c.observe(r);
  auto done = expireTraces(c, 1004 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::SlowFailover);
  EXPECT_EQ(done[0].failover_server, kSvc);
  EXPECT_EQ(done[0].failover_lost_ns, 1000 * kMs);
  EXPECT_NE(done[0].failover_of, 0u);
  EXPECT_EQ(*done[0].latencyNs(), 3 * kMs);
  done = expireTraces(c, 6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);  // the attempt at A

  // A new id for the next server (other resolvers) is a failover too; asking both at once (musl)
  // or the same server again (a retry) is not.
  Correlator d;
  Q q2;
  d.observe(query(q2, Hop::Tap, 0));
  // One query of id to server at t ms and its answer a millisecond later: the verdict.
  auto ask = [&](std::uint16_t id, const std::string& server, std::uint64_t t) {
    auto o = query(q2, Hop::Tap, t * kMs);
    o.id = id;
    o.daddr = server;
    d.observe(o);
    auto r = answer(q2, Hop::Tap, (t + 1) * kMs);
    r.id = id;
    r.saddr = server;
    d.observe(r);
    return single(d, (t + 2) * kMs);
  };
  EXPECT_EQ(ask(77, "10.96.0.11", 1).verdict, Verdict::Answered);  // at once: musl
  EXPECT_EQ(ask(78, kSvc, 1000).verdict, Verdict::Answered);       // the same server again
  const QueryTrace other = ask(79, "10.96.0.12", 1500);            // another one, later
  EXPECT_EQ(other.verdict, Verdict::SlowFailover);
  EXPECT_EQ(other.failover_lost_ns, 1500 * kMs);
}

Observation truncatedAnswer(const Q& q, Hop hop, std::uint64_t t) {
  auto a = answer(q, hop, t);
  a.truncated = true;
  return a;
}

TEST(Correlator, TruncatedAnswerWithoutTcpRetryFailsAfterTheLinkWindow) {
  Correlator c({.tcp_link_window_ns = 2000 * kMs});
  Q q;
  c.observe(query(q, Hop::Tap, 0));
  c.observe(truncatedAnswer(q, Hop::Tap, kMs));
  EXPECT_TRUE(c.expire(1999 * kMs).empty());
  const QueryTrace tr = single(c, 2001 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::TruncatedTcpFailed);
  EXPECT_EQ(tr.tcp_failure, "no TCP retry");
}

TEST(Correlator, TruncatedAnswerWhoseTcpConnectionIsRefused) {
  Correlator c;
  Q udp, tcp;
  tcp.tcp = true;
  c.observe(query(udp, Hop::Tap, 0));
  c.observe(truncatedAnswer(udp, Hop::Tap, kMs));
  c.observe(syn(tcp, Hop::Tap, 2 * kMs, 42));
  c.observe(fromServer(tcp, Hop::Tap, 3 * kMs, 43, false));
  auto done = expireTraces(c, 4 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].verdict, Verdict::ConnectionRefused);
  EXPECT_EQ(done[0].qname, "example.com");  // named after the answer it retries
  EXPECT_EQ(done[1].verdict, Verdict::TruncatedTcpFailed);
  EXPECT_EQ(done[1].tcp_failure, "TCP retry connection_refused");
  EXPECT_EQ(done[0].tcp_retry_of, done[1].seq);
}

TEST(Correlator, TruncatedAnswerWhoseTcpSynIsDropped) {
  Correlator c;
  Q udp, tcp;
  tcp.tcp = true;
  c.observe(query(udp, Hop::Tap, 0));
  c.observe(truncatedAnswer(udp, Hop::Tap, kMs));
  c.observe(syn(tcp, Hop::Tap, 2 * kMs, 42));
  c.observe(syn(tcp, Hop::Bridge, 2 * kMs + 1000, 42));
  auto drop = syn(tcp, Hop::HostVeth, 2 * kMs + 2000, 42);
  drop.drop = true;
  drop.drop_reason = "NETFILTER_DROP";
  c.observe(drop);
  c.observe(syn(tcp, Hop::Tap, 1002 * kMs, 42));  // retransmitted
  auto done = expireTraces(c, 5000 * kMs);
  ASSERT_EQ(done.size(), 0u);
  done = expireTraces(c, 5003 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].verdict, Verdict::Unanswered);
  EXPECT_EQ(done[0].drop_reason, "NETFILTER_DROP");
  EXPECT_EQ(done[0].last_hop, Hop::Bridge);
  EXPECT_EQ(done[1].verdict, Verdict::TruncatedTcpFailed);
  EXPECT_EQ(done[1].tcp_failure, "TCP retry unanswered");
}

// --- a node-local cache (NodeLocal DNSCache on 169.254.20.10): the guest's query ends at the host
// veth, where the node's socket takes it; what the cache asks upstream is the node's own query.
const std::string kNodeLocal = "169.254.20.10", kNode = "10.244.0.1";
const Hop kToCache[] = {Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth};

Observation toCache(const Q& q, Hop hop, std::uint64_t t) {
  Observation o = query(q, hop, t);
  o.daddr = kNodeLocal;  // nothing translates it: the address is the node's own
  return o;
}
Observation fromCache(const Q& q, Hop hop, std::uint64_t t, std::uint8_t rcode = 0) {
  Observation o = answer(q, hop, t, rcode);
  o.saddr = kNodeLocal;
  return o;
}
// The cache's query upstream, seen leaving the node at host-out (from the node's address).
Observation upstream(const Q& q, Hop hop, std::uint64_t t, bool response = false) {
  Observation o = response ? answer(q, hop, t) : query(q, hop, t);
  o.vmi = "";
  (response ? o.daddr : o.saddr) = kNode;
  return o;
}

Correlator cacheEngine(bool beyond_host_traced = true) {
  Correlator c;
  c.setBeyondHostTraced(beyond_host_traced);
  c.setNodeLocalAddresses({kNodeLocal});
  return c;
}

QueryTrace guestTrace(const std::vector<QueryTrace>& done) {
  for (const auto& t : done)
    if (!t.vmi.empty()) return t;
  ADD_FAILURE() << "no guest trace among " << done.size();
  return {};
}

TEST(Correlator, NodeLocalCacheAnswerEndsAtTheHostAndKeepsItsUpstreamApart) {
  // dnsmasq asks upstream with an id of its own, CoreDNS with the guest's: neither joins the
  // guest's trace, both say the cache is alive.
  for (std::uint16_t upstream_id : {std::uint16_t{0x9999}, std::uint16_t{0x1234}}) {
    Correlator c = cacheEngine();
    Q q, up;
    up.id = upstream_id;
    std::uint64_t t = 1000 * kMs;
    for (Hop h : kToCache) c.observe(toCache(q, h, t += kMs / 10));
    c.observe(upstream(up, Hop::HostOut, t += kMs / 10));
    c.observe(upstream(up, Hop::HostOut, t += kMs, true));
    for (int i = 3; i >= 0; --i) c.observe(fromCache(q, kToCache[i], t += kMs / 10));
    auto done = expireTraces(c, t);
    ASSERT_EQ(done.size(), 2u) << "upstream id " << upstream_id;
    const QueryTrace g = guestTrace(done);
    EXPECT_EQ(g.verdict, Verdict::Answered);
    EXPECT_TRUE(g.node_local);
    ASSERT_EQ(g.query_path.size(), 4u);
    EXPECT_EQ(g.query_path.back().hop, Hop::HostVeth);
    EXPECT_EQ(g.query_path.back().daddr, kNodeLocal);
    EXPECT_EQ(g.response_path.size(), 4u);
    EXPECT_EQ(g.last_hop, Hop::Tap);
    EXPECT_TRUE(g.upstream_seen);
    EXPECT_EQ(g.upstream_server, kCoreDns);
    ASSERT_TRUE(g.hopLatencyNs(Hop::HostVeth));
    EXPECT_GT(*g.hopLatencyNs(Hop::HostVeth), kMs);  // the cache waited for its upstream
    const QueryTrace& u = done[0].vmi.empty() ? done[0] : done[1];
    EXPECT_EQ(u.verdict, Verdict::Answered);
    EXPECT_EQ(u.query_path.size(), 1u);
  }
}

TEST(Correlator, NothingListeningOnTheCacheAddressIsNodeLocalCacheDown) {
  // The kernel frees the query with NO_SOCKET: proof, whether or not the upstream side is traced.
  for (bool beyond : {true, false}) {
    Correlator c = cacheEngine(beyond);
    Q q;
    std::uint64_t t = 0;
    for (Hop h : kToCache) c.observe(toCache(q, h, t += kMs));
    auto drop = toCache(q, Hop::HostVeth, t += kMs);
    drop.drop = true;
    drop.drop_reason = "NO_SOCKET";
    c.observe(drop);
    const QueryTrace tr = single(c, t + 5000 * kMs);
    EXPECT_EQ(tr.verdict, Verdict::NodeLocalCacheDown) << beyond;
    EXPECT_EQ(tr.drop_reason, "NO_SOCKET");
    EXPECT_EQ(tr.last_hop, Hop::HostVeth);
  }
  // The ICMP port unreachable the node answers with, and a TCP reset from port 53.
  Correlator c = cacheEngine(false);
  Q q;
  c.observe(toCache(q, Hop::Tap, kMs));
  c.observe(toCache(q, Hop::HostVeth, 2 * kMs));
  auto icmp = icmpFor(q, Hop::Tap, 3 * kMs, 3, true);
  icmp.saddr = kNodeLocal;
  icmp.daddr = kNodeLocal;
  c.observe(icmp);
  EXPECT_EQ(single(c, 4 * kMs).verdict, Verdict::NodeLocalCacheDown);
  Q tq;
  tq.tcp = true;
  auto s = syn(tq, Hop::Tap, 10 * kMs, 4242);
  s.daddr = kNodeLocal;
  c.observe(s);
  auto rst = fromServer(tq, Hop::Tap, 11 * kMs, 4243, false);
  rst.saddr = kNodeLocal;
  c.observe(rst);
  const QueryTrace tr = single(c, 12 * kMs);
  EXPECT_EQ(tr.verdict, Verdict::NodeLocalCacheDown);
  EXPECT_TRUE(tr.connect_only);
}

TEST(Correlator, SilentCacheThatNeverAskedUpstreamIsDownOnlyWhereUpstreamIsTraced) {
  {
    Correlator c = cacheEngine(true);
    Q q;
    for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
    const QueryTrace tr = single(c, 5002 * kMs);
    EXPECT_EQ(tr.verdict, Verdict::NodeLocalCacheDown);
    EXPECT_FALSE(tr.upstream_seen);
  }
  {
    // No server hop traced: its upstream query would not have been seen, so silence says nothing.
    Correlator c = cacheEngine(false);
    Q q;
    for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
    EXPECT_EQ(single(c, 5002 * kMs).verdict, Verdict::Unanswered);
    // Unless the address is on no link of the node (a new node: the cache has not set it up).
    c.setNodeLocalAddresses({kNodeLocal}, {kNodeLocal});
    Q q2;
    q2.id = 2;
    for (Hop h : kToCache) c.observe(toCache(q2, h, 6000 * kMs));
    const QueryTrace tr = single(c, 11002 * kMs);
    EXPECT_EQ(tr.verdict, Verdict::NodeLocalCacheDown);
    EXPECT_TRUE(tr.node_local_absent);
  }
  {
    // The same silence towards an address nobody said is a node-local cache: the old verdict (the
    // host-veth sighting alone proves no missing translation either).
    Correlator c;
    Q q;
    for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
    EXPECT_EQ(single(c, 5002 * kMs).verdict, Verdict::Unanswered);
  }
}

TEST(Correlator, LiveCacheWithASilentUpstreamKeepsTheUnansweredVerdict) {
  {
    // Over UDP: the cache's question goes out at host-out and nothing comes back.
    Correlator c = cacheEngine();
    Q q, up;
    up.id = 0x4321;
    for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
    c.observe(upstream(up, Hop::HostOut, 2 * kMs));
    c.observe(upstream(up, Hop::Server, 2 * kMs + kMs / 10));
    auto done = expireTraces(c, 5002 * kMs);
    ASSERT_EQ(done.size(), 2u);
    const QueryTrace g = guestTrace(done);
    EXPECT_EQ(g.verdict, Verdict::Unanswered);
    EXPECT_TRUE(g.upstream_seen);
    EXPECT_EQ(g.query_path.size(), 4u);
    // The cache's own query: lost at the server, sent by the node after its NAT (not a
    // translation the node failed to make).
    const QueryTrace& u = done[0].vmi.empty() ? done[0] : done[1];
    EXPECT_EQ(u.verdict, Verdict::Unanswered);
    EXPECT_EQ(u.last_hop, Hop::Server);
  }
  {
    // Over TCP (NodeLocal DNSCache's force_tcp) to an upstream that never accepts: only the
    // node's SYN is seen, without the question; the node was trying, so no "down".
    Correlator c = cacheEngine();
    Q q, up;
    up.tcp = true;
    for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
    auto s = syn(up, Hop::HostOut, 2 * kMs, 777);
    s.vmi = "";
    s.saddr = kNode;
    c.observe(s);
    auto done = expireTraces(c, 5002 * kMs);
    const QueryTrace g = guestTrace(done);
    EXPECT_EQ(g.verdict, Verdict::Unanswered);
    // A connection the node opened before the guest asked says nothing about this query.
    c.observe(syn(up, Hop::HostOut, 6000 * kMs, 778));
    Q q2;
    q2.id = 7;
    for (Hop h : kToCache) c.observe(toCache(q2, h, 6001 * kMs));
    done = expireTraces(c, 11002 * kMs);
    EXPECT_EQ(guestTrace(done).verdict, Verdict::NodeLocalCacheDown);
  }
}

TEST(Correlator, NodeLocalUnansweredIsNeverServiceTranslationMissing) {
  // A drop at the host veth with the destination unchanged would read as "left untranslated" for
  // a ClusterIP; for the cache's address no translation was due.
  Correlator c = cacheEngine();
  Q q, up;
  up.id = 55;
  for (Hop h : kToCache) c.observe(toCache(q, h, kMs));
  auto drop = toCache(q, Hop::HostVeth, 2 * kMs);
  drop.drop = true;
  drop.drop_reason = "NETFILTER_DROP";
  c.observe(drop);
  c.observe(upstream(up, Hop::HostOut, 3 * kMs));  // (another guest's miss of the same name)
  auto done = expireTraces(c, 5002 * kMs);
  EXPECT_EQ(guestTrace(done).verdict, Verdict::Unanswered);
}

TEST(Correlator, Names) {
  EXPECT_EQ(verdictName(Verdict::NotFound), "not_found");
  EXPECT_EQ(verdictName(Verdict::Refused), "refused");
  EXPECT_EQ(verdictName(Verdict::Unreachable), "unreachable");
  EXPECT_EQ(verdictName(Verdict::ConnectionRefused), "connection_refused");
  EXPECT_EQ(verdictName(Verdict::SlowFailover), "slow_failover");
  EXPECT_EQ(verdictName(Verdict::TruncatedTcpFailed), "truncated_tcp_failed");
  EXPECT_EQ(verdictName(Verdict::NodeLocalCacheDown), "node_local_cache_down");
  EXPECT_EQ(finishedVerdicts().size(), 11u);
  EXPECT_EQ(hopName(Hop::HostVeth), "host-veth");
  EXPECT_EQ(hopFromNumber(3), Hop::Unknown);
  EXPECT_EQ(hopFromNumber(6), Hop::HostOut);
  EXPECT_EQ(qtypeName(28), "AAAA");
  EXPECT_EQ(qtypeName(999), "TYPE999");
  EXPECT_EQ(rcodeName(99), "RCODE99");
  EXPECT_EQ(verdictName(Verdict::ServiceTranslationMissing), "service_translation_missing");
  EXPECT_FALSE(isErrorRcode(3));
  EXPECT_TRUE(isErrorRcode(5));
}

}  // namespace
}  // namespace nodegate::dns
