// The DNS service's accounting on literal traces (their Outcome, as the engine hands them over):
// the per-VMI window the dns-path probe judges from, series that leave /metrics with their VMI,
// and the caps that bound every family.
#include "dns/accounting.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "publish/metrics.h"

namespace nodegate::dns {
namespace {

QueryTrace trace(const std::string& vmi, Verdict v, const std::string& qname = "a.example.") {
  QueryTrace t;
  t.vmi = vmi;
  t.verdict = v;
  t.qname = qname;
  t.qtype = 1;
  t.last_hop = Hop::HostVeth;
  t.query_path = {{Hop::Tap, 1000, "10.0.2.2", "10.96.0.10", 40000, 53}};
  t.response_path = {{Hop::Tap, 3000, "10.96.0.10", "10.0.2.2", 53, 40000}};
  return t;
}

QueryTrace dropped(const std::string& vmi, Hop hop, const std::string& reason) {
  QueryTrace t = trace(vmi, Verdict::Unanswered);
  t.drop_hop = hop;
  t.drop_reason = reason;
  return t;
}

// Sample lines of one family in the exposition text.
std::vector<std::string> series(const prometheus::Registry& r, const std::string& family) {
  std::vector<std::string> out;
  std::istringstream in(serializeMetrics(r));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(family + "{", 0) == 0 || line.rfind(family + " ", 0) == 0) out.push_back(line);
  return out;
}

double value(const prometheus::Registry& r, const std::string& sample) {
  for (const auto& line : series(r, sample.substr(0, sample.find('{'))))
    if (line.rfind(sample + " ", 0) == 0) return std::stod(line.substr(sample.size() + 1));
  return -1;
}

// seq: the engine numbers queries as they start; the window judges in that order.
QueryTrace traceSeq(std::uint64_t seq, Verdict v, const std::string& qname = "a.example.",
                    const std::string& vmi = "ns/a") {
  QueryTrace t = trace(vmi, v, qname);
  t.seq = seq;
  t.original_daddr = "10.96.0.10";
  return t;
}

// The silent attempt at `first` and the answer from 10.96.0.10 that followed it `lost_ms` later.
std::pair<QueryTrace, QueryTrace> failover(std::uint64_t silent_seq, std::uint64_t answer_seq,
                                           const std::string& first = "10.96.0.99",
                                           std::uint64_t lost_ms = 1000) {
  QueryTrace a = traceSeq(silent_seq, Verdict::Unanswered);
  a.original_daddr = first;
  a.response_path.clear();
  QueryTrace b = traceSeq(answer_seq, Verdict::SlowFailover);
  b.failover_of = silent_seq;
  b.failover_server = first;
  b.failover_lost_ns = lost_ms * 1'000'000;
  return {a, b};
}

GuestDnsStatus judged(Accounting& acc, const std::string& vmi = "ns/a") {
  auto s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  for (const auto& vm : s.summary.vms)
    if (vm.vmi == vmi) return vm;
  ADD_FAILURE() << "no window for " << vmi;
  return {};
}

TEST(Accounting, WindowJudgesSinceTheNewestCleanAnswerAndCountsTheRest) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a"});
  QueryTrace failed = traceSeq(3, Verdict::ServerError, "bad.example.");
  acc.account({traceSeq(1, Verdict::Unanswered), traceSeq(2, Verdict::Answered), failed}, {});
  auto s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  ASSERT_EQ(s.summary.vms.size(), 1u);
  EXPECT_EQ(s.summary.vms[0].vmi, "ns/a");
  // The lost query came before the answer: recovered from; the SERVFAIL after it was not.
  EXPECT_EQ(s.summary.vms[0].state, GuestDnsState::ServerError);
  EXPECT_EQ(s.summary.vms[0].detail, "bad.example. A: error from 10.96.0.10");
  EXPECT_EQ(s.summary.vms[0].server, "10.96.0.10");
  EXPECT_EQ(s.summary.vms[0].answered, 1u);
  EXPECT_EQ(s.summary.vms[0].failed, 2u);
  EXPECT_EQ(s.summary.queries_in_window, 3u);
  EXPECT_TRUE(s.changed);
  EXPECT_FALSE(acc.summarize(std::chrono::system_clock::now(), 1, 4).changed);
  // Past the window: nothing left to judge.
  auto later = acc.summarize(std::chrono::system_clock::now() + std::chrono::seconds(301), 1, 4);
  EXPECT_TRUE(later.summary.vms.empty());
  EXPECT_TRUE(later.changed);
}

TEST(Accounting, EachVerdictStandsForItsState) {
  const std::pair<Verdict, GuestDnsState> cases[] = {
      {Verdict::Answered, GuestDnsState::Ok},
      {Verdict::NotFound, GuestDnsState::Ok},  // not a cluster name: DNS data, not a failure
      {Verdict::SlowFailover, GuestDnsState::SlowFailover},
      {Verdict::TruncatedTcpFailed, GuestDnsState::TruncatedTcpFailed},
      {Verdict::Refused, GuestDnsState::Refused},
      {Verdict::ServerError, GuestDnsState::ServerError},
      {Verdict::Unreachable, GuestDnsState::Unreachable},
      {Verdict::ConnectionRefused, GuestDnsState::Unreachable},
      {Verdict::Unanswered, GuestDnsState::NoResponse},
      {Verdict::ServiceTranslationMissing, GuestDnsState::ServiceTranslationMissing},
      {Verdict::NodeLocalCacheDown, GuestDnsState::NodeLocalCacheDown}};
  for (const auto& [verdict, state] : cases) {
    prometheus::Registry reg;
    Accounting acc(reg, {});
    acc.present({"ns/a"});
    acc.account({traceSeq(1, verdict)}, {});
    EXPECT_EQ(judged(acc).state, state) << verdictName(verdict);
  }
  // Every finished verdict is covered.
  EXPECT_EQ(std::size(cases), finishedVerdicts().size());
  // NXDOMAIN for a name of the cluster's zones fails.
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a"});
  QueryTrace nx = traceSeq(1, Verdict::NotFound, "db.prod.svc.cluster.local");
  nx.rcode = 3;
  nx.cluster_name = true;
  acc.account({nx}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::ClusterNameNotFound);
  EXPECT_EQ(judged(acc).detail, "db.prod.svc.cluster.local A: NXDOMAIN from 10.96.0.10");
}

TEST(Accounting, TheWorstSinceTheLastCleanAnswerWinsAndAnAnswerClearsIt) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a"});
  acc.account({traceSeq(1, Verdict::Refused), traceSeq(2, Verdict::ServerError)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::ServerError);
  // A WARN after a FAIL does not hide it: the guest has not had a clean answer since.
  QueryTrace unreach = traceSeq(3, Verdict::Unreachable, "u.example.");
  acc.account({unreach, traceSeq(4, Verdict::SlowFailover)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Unreachable);
  EXPECT_EQ(judged(acc).server, "10.96.0.10");
  acc.account({traceSeq(5, Verdict::Answered)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Ok);
  // A query that started before that answer and finishes after it (lost at the timeout): the
  // guest got its answer after it, so it does not bring the failure back.
  acc.account({traceSeq(4, Verdict::Unanswered, "late.example.")}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Ok);
  // Equal states: the newest query's detail.
  acc.account({traceSeq(7, Verdict::Unanswered, "b.example."),
               traceSeq(6, Verdict::Unanswered, "a.example.")},
              {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::NoResponse);
  EXPECT_EQ(judged(acc).detail.rfind("b.example. A: ", 0), 0u) << judged(acc).detail;
  // A name that does not exist outside the cluster is an answer, but no clean one.
  acc.account({traceSeq(8, Verdict::NotFound, "nope.example.")}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::NoResponse);
}

TEST(Accounting, ASilentAttemptThatWasFailedOverIsSlowFailoverInEitherOrder) {
  // The answer first, the silent attempt at its timeout later (the usual order: the engine's
  // timeout is longer than the resolver's).
  {
    prometheus::Registry reg;
    Accounting acc(reg, {});
    acc.present({"ns/a"});
    auto [silent, answer] = failover(1, 2);
    acc.account({answer}, {});
    EXPECT_EQ(judged(acc).state, GuestDnsState::SlowFailover);
    acc.account({silent}, {});
    auto g = judged(acc);
    EXPECT_EQ(g.state, GuestDnsState::SlowFailover);
    EXPECT_EQ(g.server, "10.96.0.99");
    EXPECT_EQ(g.failovers, 1u);
    EXPECT_EQ(g.failover_lost_ns, 1'000'000'000u);
    EXPECT_NE(g.detail.find("answered by 10.96.0.10 after 10.96.0.99 did not answer"),
              std::string::npos)
        << g.detail;
  }
  // The silent attempt first: no response, until the answer it was failed over to comes.
  {
    prometheus::Registry reg;
    Accounting acc(reg, {});
    acc.present({"ns/a"});
    auto [silent, answer] = failover(1, 2);
    acc.account({silent}, {});
    EXPECT_EQ(judged(acc).state, GuestDnsState::NoResponse);
    acc.account({answer}, {});
    EXPECT_EQ(judged(acc).state, GuestDnsState::SlowFailover);
    EXPECT_EQ(judged(acc).server, "10.96.0.99");
  }
  // Every lookup of a guest with a silent first nameserver: the time lost adds up, and a silent
  // attempt that was never failed over still counts as lost.
  {
    prometheus::Registry reg;
    Accounting acc(reg, {});
    acc.present({"ns/a"});
    std::vector<Outcome> batch;
    for (std::uint64_t i = 0; i < 3; ++i) {
      auto [silent, answer] = failover(10 + 2 * i, 11 + 2 * i, "10.96.0.99", 1000 + 500 * i);
      // Interleaved: one lookup's answer before its silent attempt, the next one after.
      if (i % 2) {
        batch.push_back(answer);
        batch.push_back(silent);
      } else {
        batch.push_back(silent);
        batch.push_back(answer);
      }
    }
    acc.account(std::move(batch), {});
    auto g = judged(acc);
    EXPECT_EQ(g.state, GuestDnsState::SlowFailover);
    EXPECT_EQ(g.failovers, 3u);
    EXPECT_EQ(g.failover_lost_ns, 4'500'000'000u);
    QueryTrace alone = traceSeq(20, Verdict::Unanswered);
    acc.account({alone}, {});
    EXPECT_EQ(judged(acc).state, GuestDnsState::NoResponse);
  }
  // Another VMI's answer says nothing of this one's attempts.
  {
    prometheus::Registry reg;
    Accounting acc(reg, {});
    acc.present({"ns/a", "ns/b"});
    auto [silent, answer] = failover(1, 2);
    answer.vmi = "ns/b";
    acc.account({answer, silent}, {});
    EXPECT_EQ(judged(acc, "ns/a").state, GuestDnsState::NoResponse);
    EXPECT_EQ(judged(acc, "ns/b").state, GuestDnsState::SlowFailover);
  }
}

TEST(Accounting, ClusterNamesNotFoundFailUnlessTheNameWasAnsweredWithAnotherType) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a"});
  auto cluster = [](std::uint64_t seq, Verdict v, std::uint16_t qtype, std::uint8_t rcode) {
    QueryTrace t = traceSeq(seq, v, "web.ngdns.svc.cluster.local");
    t.cluster_name = true;
    t.qtype = qtype;
    if (v == Verdict::NotFound) t.rcode = rcode;
    return t;
  };
  // An IPv4-only Service: A answered, AAAA NODATA after it (or before it): the name exists.
  acc.account({cluster(2, Verdict::NotFound, 28, 0), cluster(1, Verdict::Answered, 1, 0)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Ok);
  acc.account({cluster(4, Verdict::NotFound, 28, 0), cluster(3, Verdict::Answered, 1, 0)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Ok);
  // NXDOMAIN is about the name, whatever was answered for it elsewhere: a wrong server.
  acc.account({cluster(5, Verdict::NotFound, 1, 3)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::ClusterNameNotFound);
  // A search-list expansion that was NXDOMAIN and the lookup answered under the next domain.
  acc.account({cluster(6, Verdict::Answered, 1, 0)}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::Ok);
  // NODATA for a cluster name nothing answered.
  QueryTrace srv = traceSeq(7, Verdict::NotFound, "_http._tcp.web.ngdns.svc.cluster.local");
  srv.cluster_name = true;
  srv.rcode = 0;
  srv.qtype = 33;
  acc.account({srv}, {});
  EXPECT_EQ(judged(acc).state, GuestDnsState::ClusterNameNotFound);
}

// Servers whose path guests saw failing, for the prediction of VMIs that ask them first: keyed by
// the address the guest asked, across VMIs, until a clean answer from that server.
TEST(Accounting, ServersSeenFailingAcrossVmisUntilTheyAnswer) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a", "ns/b", "ns/c"});
  auto [silent, answer] = failover(1, 2, "10.96.0.99");
  QueryTrace unreach = traceSeq(3, Verdict::Unreachable, "u.example.", "ns/b");
  unreach.original_daddr = "10.96.0.53";
  QueryTrace servfail = traceSeq(4, Verdict::ServerError, "s.example.", "ns/c");
  servfail.original_daddr = "10.96.0.54";  // answers, with errors: its path works
  acc.account({answer, silent, unreach, servfail}, {});
  auto s = acc.summarize(std::chrono::system_clock::now(), 3, 12);
  ASSERT_EQ(s.summary.failing_servers.size(), 2u);
  EXPECT_EQ(s.summary.failing_servers[0].server, "10.96.0.53");
  EXPECT_EQ(s.summary.failing_servers[0].state, GuestDnsState::Unreachable);
  EXPECT_EQ(s.summary.failing_servers[0].vmi, "ns/b");
  EXPECT_EQ(s.summary.failing_servers[1].server, "10.96.0.99");
  EXPECT_EQ(s.summary.failing_servers[1].state, GuestDnsState::SlowFailover);
  EXPECT_NE(s.summary.failing_servers[1].detail.find("did not answer"), std::string::npos);
  // 10.96.0.10 answered the failover: not failing.
  EXPECT_FALSE(acc.summarize(std::chrono::system_clock::now(), 3, 12).changed);
  // 10.96.0.53 answers another VMI's query: it works again, and the summary says it changed.
  QueryTrace ok = traceSeq(5, Verdict::Answered, "u.example.", "ns/c");
  ok.original_daddr = "10.96.0.53";
  acc.account({ok}, {});
  s = acc.summarize(std::chrono::system_clock::now(), 3, 12);
  ASSERT_EQ(s.summary.failing_servers.size(), 1u);
  EXPECT_EQ(s.summary.failing_servers[0].server, "10.96.0.99");
  EXPECT_TRUE(s.changed);
  // A node-local cache that is down fails every VMI that asks it first.
  QueryTrace cache = traceSeq(6, Verdict::NodeLocalCacheDown, "c.example.", "ns/a");
  cache.original_daddr = "169.254.20.10";
  acc.account({cache}, {});
  s = acc.summarize(std::chrono::system_clock::now(), 3, 12);
  ASSERT_EQ(s.summary.failing_servers.size(), 2u);
  EXPECT_EQ(s.summary.failing_servers[0].server, "10.96.0.99");
  EXPECT_EQ(s.summary.failing_servers[1].server, "169.254.20.10");
  EXPECT_EQ(s.summary.failing_servers[1].state, GuestDnsState::NodeLocalCacheDown);
}

// A window of five queries, for the cases about what it keeps.
class FiveQueryWindow : public testing::Test {
 protected:
  static AccountingLimits limits() {
    AccountingLimits lim;
    lim.per_vmi = 5;
    return lim;
  }
  FiveQueryWindow() { acc.present({"ns/a"}); }
  prometheus::Registry reg;
  Accounting acc{reg, limits()};
};

// A window names each server once and drops the names no entry uses once they outnumber the
// entries: a guest asking ever new addresses must neither grow it nor mix the names up when the
// survivors are renumbered. Each query here is lost to a server of its own, so the failing
// servers are exactly the window's, each with its own query's detail.
TEST_F(FiveQueryWindow, AGuestAskingEverNewServersKeepsEachNameWithItsQuery) {
  auto server = [](std::uint64_t i) {
    return "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256);
  };
  for (std::uint64_t i = 1; i <= 200; ++i) {
    QueryTrace t = traceSeq(i, Verdict::Unanswered, "q" + std::to_string(i) + ".example.");
    t.original_daddr = server(i);
    acc.account({t}, {});
    if (i % 37 != 0) continue;  // the summary between batches sees the table as it is then
    auto s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
    ASSERT_EQ(s.summary.failing_servers.size(), 5u) << i;
    std::set<std::string> want;
    for (std::uint64_t k = i - 4; k <= i; ++k) want.insert(server(k));
    for (const auto& f : s.summary.failing_servers) {
      EXPECT_EQ(want.erase(f.server), 1u) << f.server << " at " << i;
      const auto k = f.detail.substr(1, f.detail.find('.') - 1);
      EXPECT_EQ(server(std::stoul(k)), f.server) << f.detail;
    }
    EXPECT_EQ(judged(acc).server, server(i));
  }
}

// What the engine dropped to stay within its caps is counted by kind, the difference since the
// last tick each time: unaccounted queries are missing from every other DNS family, so a user
// must see that the agent fell behind.
TEST(Accounting, EngineEvictionsAreCountedByKind) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  CorrelatorStats engine;
  engine.evicted_in_flight = 2;
  engine.unaccounted_dropped = 3;
  acc.account({}, engine);
  engine.unaccounted_dropped = 10;
  engine.evicted_done = 1;
  acc.account({}, engine);
  acc.account({}, engine);  // nothing new
  EXPECT_EQ(value(reg, R"(nodegate_dns_trace_evictions_total{kind="in_flight"})"), 2);
  EXPECT_EQ(value(reg, R"(nodegate_dns_trace_evictions_total{kind="done"})"), 1);
  EXPECT_EQ(value(reg, R"(nodegate_dns_trace_evictions_total{kind="unaccounted"})"), 10);
}

TEST_F(FiveQueryWindow, KeepsAtMostPerVmiEntries) {
  std::vector<Outcome> many;
  for (int i = 0; i < 20; ++i) many.push_back(trace("ns/a", Verdict::Answered));
  acc.account(std::move(many), {});
  auto s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  ASSERT_EQ(s.summary.vms.size(), 1u);
  EXPECT_EQ(s.summary.vms[0].answered, 5u);
  // The counter counts every query; only the window is capped.
  EXPECT_EQ(value(reg, R"(nodegate_dns_queries_total{namespace="ns",result="answered",vmi="a"})"),
            20);
}

TEST(Accounting, AGoneVmiLeavesTheWindowAndMetricsAndStaysGone) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a", "ns/b"});
  acc.account({trace("ns/a", Verdict::Unanswered), trace("ns/a", Verdict::Answered),
               trace("ns/b", Verdict::Unanswered)},
              {});
  EXPECT_EQ(series(reg, "nodegate_dns_queries_total").size(), 3u);
  auto s = acc.summarize(std::chrono::system_clock::now(), 2, 8);
  EXPECT_EQ(s.summary.vms.size(), 2u);

  acc.present({"ns/a"});  // b's launcher is gone
  auto left = series(reg, "nodegate_dns_queries_total");
  ASSERT_EQ(left.size(), 2u);
  for (const auto& l : left) EXPECT_EQ(l.find("vmi=\"b\""), std::string::npos) << l;
  s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  ASSERT_EQ(s.summary.vms.size(), 1u);
  EXPECT_EQ(s.summary.vms[0].vmi, "ns/a");
  EXPECT_TRUE(s.changed);  // so the probe re-runs and stops reporting b

  // b's query that was in flight finishes at its timeout: counted as such, not as b's again.
  acc.account({trace("ns/b", Verdict::Unanswered)}, {});
  EXPECT_EQ(series(reg, "nodegate_dns_queries_total").size(), 2u);
  EXPECT_EQ(
      value(
          reg,
          R"(nodegate_dns_series_limited_total{family="nodegate_dns_queries_total",reason="vmi_gone"})"),
      1);
  EXPECT_EQ(acc.summarize(std::chrono::system_clock::now(), 1, 4).summary.vms.size(), 1u);

  // The node's own queries, seen only at the server's side, have no VMI and always count.
  acc.account({trace("", Verdict::Answered)}, {});
  EXPECT_EQ(value(reg, R"(nodegate_dns_queries_total{namespace="",result="answered",vmi=""})"), 1);
  // ... but they are no guest's: the probe judges only VMIs.
  s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  ASSERT_EQ(s.summary.vms.size(), 1u);
  EXPECT_EQ(s.summary.vms[0].vmi, "ns/a");
}

TEST(Accounting, VmiSeriesAreCappedAndTheOverflowCounted) {
  prometheus::Registry reg;
  AccountingLimits lim;
  lim.max_vmis = 3;
  Accounting acc(reg, lim);
  std::set<std::string> on_node;
  std::vector<Outcome> batch;
  for (int i = 0; i < 5; ++i) {
    on_node.insert("ns/vm" + std::to_string(i));
    batch.push_back(trace("ns/vm" + std::to_string(i), Verdict::Answered));
  }
  acc.present(on_node);
  acc.account(std::move(batch), {});
  auto s = series(reg, "nodegate_dns_queries_total");
  EXPECT_EQ(s.size(), 4u);  // three VMIs of their own, one _other
  EXPECT_EQ(
      value(reg,
            R"(nodegate_dns_queries_total{namespace="_other",result="answered",vmi="_other"})"),
      2);
  EXPECT_EQ(
      value(
          reg,
          R"(nodegate_dns_series_limited_total{family="nodegate_dns_queries_total",reason="cap"})"),
      2);
  // Every VMI still has its window: the cap bounds /metrics, not what the probe judges.
  EXPECT_EQ(acc.summarize(std::chrono::system_clock::now(), 5, 20).summary.vms.size(), 5u);

  // One with a series leaves: a newcomer gets a series of its own again.
  on_node.erase("ns/vm0");
  on_node.insert("ns/vm9");
  acc.present(on_node);
  acc.account({trace("ns/vm9", Verdict::Answered)}, {});
  EXPECT_EQ(value(reg, R"(nodegate_dns_queries_total{namespace="ns",result="answered",vmi="vm9"})"),
            1);
  EXPECT_EQ(series(reg, "nodegate_dns_queries_total").size(), 4u);
}

TEST(Accounting, DropSeriesAreCappedAndTheOverflowCounted) {
  prometheus::Registry reg;
  AccountingLimits lim;
  lim.max_drop_series = 2;
  Accounting acc(reg, lim);
  acc.present({"ns/a"});
  acc.account(
      {dropped("ns/a", Hop::HostVeth, "NETFILTER_DROP"),
       dropped("ns/a", Hop::HostVeth, "IP_RPFILTER"),
       dropped("ns/a", Hop::HostVeth, "NETFILTER_DROP"),
       dropped("ns/a", Hop::HostVeth, "NO_SOCKET"), dropped("ns/a", Hop::Unknown, "IP_INNOROUTES")},
      {});
  EXPECT_EQ(series(reg, "nodegate_dns_drops_total").size(), 4u);
  EXPECT_EQ(value(reg, R"(nodegate_dns_drops_total{hop="host-veth",reason="NETFILTER_DROP"})"), 2);
  EXPECT_EQ(value(reg, R"(nodegate_dns_drops_total{hop="host-veth",reason="_other"})"), 1);
  EXPECT_EQ(value(reg, R"(nodegate_dns_drops_total{hop="unknown",reason="_other"})"), 1);
  EXPECT_EQ(
      value(reg,
            R"(nodegate_dns_series_limited_total{family="nodegate_dns_drops_total",reason="cap"})"),
      2);
}

TEST(Accounting, EveryFamilyIsBoundedUnderManyVmisAndReasons) {
  prometheus::Registry reg;
  AccountingLimits lim;
  lim.max_vmis = 16;
  lim.max_drop_series = 8;
  Accounting acc(reg, lim);
  // 50 rounds of VMs coming and going, each with queries, drops of ever new reasons and latency.
  for (int round = 0; round < 50; ++round) {
    std::set<std::string> on_node;
    std::vector<Outcome> batch;
    for (int i = 0; i < 10; ++i) {
      std::string vmi = "ns" + std::to_string(round) + "/vm" + std::to_string(i);
      on_node.insert(vmi);
      batch.push_back(trace(vmi, Verdict::Answered));
      batch.push_back(dropped(vmi, Hop::HostOut, "REASON_" + std::to_string(round * 10 + i)));
    }
    acc.present(on_node);
    acc.account(std::move(batch), {});
  }
  // The last round's 10 VMIs (answered and unanswered each); earlier rounds' series are gone.
  EXPECT_EQ(series(reg, "nodegate_dns_queries_total").size(), 20u);
  // 8 (hop, reason) pairs and the overflow of that hop.
  EXPECT_EQ(series(reg, "nodegate_dns_drops_total").size(), 9u);
  EXPECT_EQ(series(reg, "nodegate_dns_hop_latency_seconds_count").size(), 1u);  // one hop seen
  EXPECT_EQ(series(reg, "nodegate_dns_series_limited_total").size(), 3u);
  EXPECT_EQ(acc.summarize(std::chrono::system_clock::now(), 10, 40).summary.vms.size(), 10u);
}

}  // namespace
}  // namespace nodegate::dns
