// The correlation engine on synthetic hop sequences shaped like what the tracer reports on the
// KubeVirt masquerade path (addresses rewritten by masquerade and service DNAT).
#include "dns/correlator.h"

#include <gtest/gtest.h>

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

void sendFull(Correlator& c, const Q& q, std::uint64_t t0, std::uint8_t rcode = 0) {
  std::uint64_t t = t0;
  for (Hop h : kForward) c.observe(query(q, h, t += kMs / 10));
  t += 2 * kMs;  // server time
  for (int i = 4; i >= 0; --i) c.observe(answer(q, kForward[i], t += kMs / 10, rcode));
}

TEST(Correlator, HealthyQueryIsAnsweredWithEveryHopInOrder) {
  Correlator c;
  sendFull(c, Q{}, 1000 * kMs);
  auto done = c.expire(1010 * kMs);
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
  auto done = c.expire(7 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Answered);
  EXPECT_EQ(*done[0].latencyNs(), 5 * kMs);
}

TEST(Correlator, NxdomainIsAnAnswerServfailIsAServerError) {
  Correlator c;
  Q a, b;
  b.id = 7;
  b.qname = "nope.invalid";
  sendFull(c, a, 0, 3);
  sendFull(c, b, 0, 2);
  auto done = c.expire(10 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].verdict, Verdict::Answered);
  EXPECT_EQ(*done[0].rcode, 3);
  EXPECT_EQ(done[1].verdict, Verdict::ServerError);
  EXPECT_EQ(rcodeName(*done[1].rcode), "SERVFAIL");
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
  auto done = c.expire(t);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].qtype, 28);
  EXPECT_EQ(c.inFlight(), 1u);  // the A query is still waiting
  done = c.expire(t + 6000 * kMs);
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
  auto done = c.expire(t);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::Answered);
  EXPECT_EQ(done[0].retry_of, 1u);
  EXPECT_EQ(done[0].query_path.size(), 5u);
  done = c.expire(6000 * kMs);
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
  auto done = c.expire(3 * kMs);
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
  auto done = c.expire(5100 * kMs);
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
  auto done = c.expire(5100 * kMs);
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
  auto done = c.expire(6000 * kMs);
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
  auto done = c.expire(6000 * kMs);
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
  auto done = c.expire(t + 6000 * kMs);
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
  auto done = c.expire(6000 * kMs);
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
  auto done = c.expire(6000 * kMs);
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
  auto done = c.expire(6000 * kMs);
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
  c.observe(tc);
  c.observe(query(tcp, Hop::Tap, 2 * kMs));
  c.observe(answer(tcp, Hop::Tap, 4 * kMs));
  auto done = c.expire(5 * kMs);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].truncated);
  EXPECT_FALSE(done[0].tcp);
  EXPECT_TRUE(done[1].tcp);
  EXPECT_EQ(done[1].tcp_retry_of, done[0].seq);
}

TEST(Correlator, TcpQueryWithoutTruncatedPredecessorIsNotLinked) {
  Correlator c;
  Q udp, tcp;
  tcp.tcp = true;
  c.observe(query(udp, Hop::Tap, 0));
  c.observe(answer(udp, Hop::Tap, kMs));  // not truncated
  c.observe(query(tcp, Hop::Tap, 2 * kMs));
  c.observe(answer(tcp, Hop::Tap, 3 * kMs));
  auto done = c.expire(4 * kMs);
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

TEST(Correlator, LateResponseAfterTimeoutIsAnOrphan) {
  Correlator c;
  Q q;
  c.observe(query(q, Hop::Tap, 0));
  auto done = c.expire(5000 * kMs);
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
  auto done = c.expire(6000 * kMs);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].verdict, Verdict::ServerError);
  EXPECT_EQ(done[0].last_hop, Hop::Bridge);
}

TEST(Correlator, Names) {
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
