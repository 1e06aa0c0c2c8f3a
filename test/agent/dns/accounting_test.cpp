// The DNS service's accounting on literal traces: the per-VMI window the dns-path probe judges
// from, series that leave /metrics with their VMI, and the caps that bound every family.
#include "dns/accounting.h"

#include <gtest/gtest.h>

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

TEST(Accounting, WindowJudgesByTheNewestVerdictAndCountsTheRest) {
  prometheus::Registry reg;
  Accounting acc(reg, {});
  acc.present({"ns/a"});
  QueryTrace failed = trace("ns/a", Verdict::ServerError, "bad.example.");
  failed.original_daddr = "10.96.0.10";  // the server the guest asked
  acc.account({trace("ns/a", Verdict::Unanswered), trace("ns/a", Verdict::Answered), failed}, {});
  auto s = acc.summarize(std::chrono::system_clock::now(), 1, 4);
  ASSERT_EQ(s.summary.vms.size(), 1u);
  EXPECT_EQ(s.summary.vms[0].vmi, "ns/a");
  EXPECT_EQ(s.summary.vms[0].state, GuestDnsState::ServerError);
  EXPECT_EQ(s.summary.vms[0].detail, "bad.example. A: error from 10.96.0.10");
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

TEST(Accounting, WindowKeepsAtMostPerVmiEntries) {
  prometheus::Registry reg;
  AccountingLimits lim;
  lim.per_vmi = 5;
  Accounting acc(reg, lim);
  acc.present({"ns/a"});
  std::vector<QueryTrace> many;
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
  std::vector<QueryTrace> batch;
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
    std::vector<QueryTrace> batch;
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
