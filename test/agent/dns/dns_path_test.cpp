// The dns-path probe: virt-launcher discovery over a procfs fixture, the Cilium static check on
// ConfigMap fixtures, and the evaluation of tracer summaries.
#include "dns_path.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "cilium_config.h"
#include "nodegate/host_root.h"
#include "processes.h"

namespace nodegate {
namespace {

const std::string kDir = std::string(NODEGATE_FIXTURES) + "/dns/";

std::string fixture(const std::string& name) {
  auto t = readFile(kDir + name);
  EXPECT_TRUE(t.ok()) << name;
  return t.valueOr("");
}

TEST(VirtLauncher, CmdlineGivesTheVmi) {
  using namespace std::string_literals;
  EXPECT_EQ(launcherVmiFromCmdline("virt-launcher\0--name\0vm1\0--namespace\0ns1\0"s), "ns1/vm1");
  EXPECT_EQ(launcherVmiFromCmdline("virt-launcher\0--namespace=ns2\0--name=vm2\0"s), "ns2/vm2");
  EXPECT_EQ(launcherVmiFromCmdline("virt-launcher\0--name\0vm3"s), "default/vm3");
  EXPECT_EQ(launcherVmiFromCmdline("virt-launcher\0--name"s), "");
  EXPECT_EQ(launcherVmiFromCmdline(""), "");
}

TEST(VirtLauncher, FindsOnlyRealLaunchersInProc) {
  HostRoot host("/nonexistent");
  host.setProcfs(kDir + "proc-launchers");
  auto found = findVirtLaunchers(host);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 4242);
  EXPECT_EQ(found[0].vmi, "team-a/vm-alpha");
  EXPECT_EQ(found[0].netns_path, kDir + "proc-launchers/4242/ns/net");
}

TEST(VirtLauncher, MissingProcIsEmptyNotACrash) {
  HostRoot host("/nonexistent-root");
  EXPECT_TRUE(findVirtLaunchers(host).empty());
}

TEST(Cilium, IncidentConfigPredictsTheIncident) {
  auto c = parseCiliumConfig(fixture("cilium-config-incident.json"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->kube_proxy_replacement);
  EXPECT_TRUE(c->socket_lb);
  EXPECT_FALSE(c->host_namespace_only);
  EXPECT_TRUE(c->predictsIncident());
}

TEST(Cilium, HostNamespaceOnlyIsTheFix) {
  auto c = parseCiliumConfig(fixture("cilium-config-hostns-only.json"));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->socket_lb);  // implied by full kube-proxy replacement
  EXPECT_TRUE(c->host_namespace_only);
  EXPECT_FALSE(c->predictsIncident());
}

TEST(Cilium, KubeProxyModeAndVariants) {
  auto c = parseCiliumConfig(fixture("cilium-config-kube-proxy.json"));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->predictsIncident());
  // Explicitly disabled socket LB under full replacement: per-packet translation stays in.
  c = parseCiliumConfig(R"({"kube-proxy-replacement":"true","bpf-lb-sock":"false"})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->predictsIncident());
  // Partial replacement with the pre-1.12 name of socket LB switched on.
  c = parseCiliumConfig(
      R"({"kube-proxy-replacement":"partial","enable-host-reachable-services":"true"})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->predictsIncident());
  c = parseCiliumConfig(R"({"kube-proxy-replacement":"strict","bpf-lb-sock-hostns-only":true})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->predictsIncident());
}

TEST(Cilium, BadInputIsAClearError) {
  for (const char* bad : {"", "[]", "{", R"({"data": 3})", "null"}) {
    auto c = parseCiliumConfig(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.error().message.find("failed to parse cilium-config"), std::string::npos);
  }
}

GuestDnsStatus guest(std::string vmi, GuestDnsState state, std::string detail,
                     std::uint64_t answered, std::uint64_t failed) {
  GuestDnsStatus g;
  g.vmi = std::move(vmi);
  g.state = state;
  g.detail = std::move(detail);
  g.answered = answered;
  g.failed = failed;
  return g;
}

DnsPathSummary summaryWith(std::vector<GuestDnsStatus> vms, std::size_t guests = 1) {
  DnsPathSummary s;
  s.guests = guests;
  s.attached_hops = 4;
  s.vms = std::move(vms);
  for (const auto& v : s.vms) s.queries_in_window += v.answered + v.failed;
  return s;
}

TEST(DnsPathEval, NoTracerAndNoGuestsIsPassNoGuests) {
  DnsPathInputs in;
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.reason, "NoGuests");
}

TEST(DnsPathEval, NoTracerWithGuestsIsUnknownNeverPass) {
  DnsPathInputs in;
  in.launchers = 2;
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "TracerNotRunning");
  EXPECT_FALSE(r.hint.empty());
  in.launchers = 0;
  in.launchers_readable = false;  // cannot even tell whether guests exist
  EXPECT_EQ(evaluateDnsPath(in).status, Status::Unknown);
}

TEST(DnsPathEval, StaticPredictionWithoutTracer) {
  DnsPathInputs in;
  in.cilium = *parseCiliumConfig(fixture("cilium-config-incident.json"));
  in.launchers = 1;
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "ServiceTranslationMissing");
  EXPECT_NE(r.hint.find("hostNamespaceOnly"), std::string::npos);
  in.launchers = 0;
  r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "ServiceTranslationMissing");
}

TEST(DnsPathEval, TracerVerdictsDecide) {
  DnsPathInputs in;
  in.tracer = summaryWith({guest("ns/a", GuestDnsState::Ok, "", 10, 0)});
  EXPECT_EQ(evaluateDnsPath(in).reason, "Ok");
  EXPECT_EQ(evaluateDnsPath(in).status, Status::Pass);

  in.tracer =
      summaryWith({guest("ns/a", GuestDnsState::Ok, "", 10, 0),
                   guest("ns/b", GuestDnsState::ServerError, "x.example A: SERVFAIL", 0, 3)});
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "ServerError");
  EXPECT_NE(r.message.find("ns/b"), std::string::npos);

  in.tracer = summaryWith({guest("ns/b", GuestDnsState::ServerError, "SERVFAIL", 0, 3),
                           guest("ns/c", GuestDnsState::NoResponse, "last seen at server", 0, 2)});
  r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "NoResponse");
  EXPECT_NE(r.hint.find("nodegate dns trace --vmi ns/c"), std::string::npos);

  in.tracer = summaryWith(
      {guest("ns/c", GuestDnsState::NoResponse, "", 0, 2),
       guest("ns/d", GuestDnsState::ServiceTranslationMissing, "last seen at host-out", 0, 2)});
  r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "ServiceTranslationMissing");
  EXPECT_NE(r.message.find("ns/d"), std::string::npos);

  // The node-local cache down is the cause to name first: every guest pointed at it fails.
  in.tracer = summaryWith(
      {guest("ns/d", GuestDnsState::ServiceTranslationMissing, "last seen at host-out", 0, 2),
       guest("ns/e", GuestDnsState::NodeLocalCacheDown,
             "x.example A: node-local DNS cache 169.254.20.10 is not serving", 0, 2)});
  r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "NodeLocalCacheDown");
  EXPECT_NE(r.message.find("ns/e: x.example A: node-local DNS cache 169.254.20.10"),
            std::string::npos);
  EXPECT_NE(r.hint.find("node-local-dns"), std::string::npos);
}

// Each state of a guest is a reason of its own with its status, its layer's hint and the guest's
// evidence; the worst guest decides.
TEST(DnsPathEval, EveryGuestStateHasItsReasonStatusAndHint) {
  const std::pair<GuestDnsState, Status> cases[] = {
      {GuestDnsState::SlowFailover, Status::Warn},
      {GuestDnsState::TruncatedTcpFailed, Status::Warn},
      {GuestDnsState::Refused, Status::Warn},
      {GuestDnsState::ServerError, Status::Warn},
      {GuestDnsState::ClusterNameNotFound, Status::Fail},
      {GuestDnsState::Unreachable, Status::Fail},
      {GuestDnsState::NoResponse, Status::Fail},
      {GuestDnsState::ServiceTranslationMissing, Status::Fail},
      {GuestDnsState::NodeLocalCacheDown, Status::Fail}};
  std::set<std::string> reasons;
  for (const auto& [state, status] : cases) {
    DnsPathInputs in;
    GuestDnsStatus vm = guest("ns/x", state, "q.example A: what happened", 1, 2);
    vm.server = "10.96.0.99";
    in.tracer = summaryWith({guest("ns/a", GuestDnsState::Ok, "", 10, 0), vm});
    auto r = evaluateDnsPath(in);
    const std::string reason(guestDnsReason(state));
    EXPECT_EQ(r.status, status) << reason;
    EXPECT_EQ(r.reason, reason);
    EXPECT_NE(r.message.find("ns/x: q.example A: what happened"), std::string::npos) << r.message;
    EXPECT_FALSE(r.hint.empty()) << reason;
    bool saw = false;
    for (const auto& e : r.evidence)
      saw |= e.source == "guest ns/x" && e.observed.rfind(reason + ": q.example A:", 0) == 0;
    EXPECT_TRUE(saw) << reason;
    reasons.insert(reason);
  }
  EXPECT_EQ(reasons.size(), std::size(cases));  // names of their own
  EXPECT_EQ(guestDnsReason(GuestDnsState::Ok), "Ok");
}

TEST(DnsPathEval, TheWorstGuestDecidesAndEveryFailingGuestIsEvidence) {
  DnsPathInputs in;
  GuestDnsStatus slow =
      guest("ns/slow", GuestDnsState::SlowFailover,
            "www.example.test A: answered by 10.96.0.10 after 10.96.0.99 did not answer "
            "for 1.00 s",
            3, 0);
  slow.server = "10.96.0.99";
  slow.failovers = 3;
  slow.failover_lost_ns = 4'500'000'000;
  in.tracer = summaryWith({slow});
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "SlowFailover");
  EXPECT_NE(r.hint.find("first nameserver 10.96.0.99"), std::string::npos) << r.hint;
  bool saw = false;
  for (const auto& e : r.evidence)
    saw |= e.source == "guest ns/slow" &&
           e.observed.find("nameserver 10.96.0.99 did not answer 3 lookups, 4.50 s lost") !=
               std::string::npos;
  EXPECT_TRUE(saw);

  GuestDnsStatus unreach =
      guest("ns/unreach", GuestDnsState::Unreachable,
            "x.example A: ICMP port-unreachable from 10.244.0.3 at server", 0, 2);
  unreach.server = "10.96.0.10";
  GuestDnsStatus nx = guest("ns/nx", GuestDnsState::ClusterNameNotFound,
                            "db.prod.svc.cluster.local A: NXDOMAIN from 8.8.8.8", 4, 1);
  in.tracer = summaryWith({slow, nx, unreach});
  r = evaluateDnsPath(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "Unreachable");
  EXPECT_NE(r.message.find("ns/unreach"), std::string::npos);
  EXPECT_NE(r.message.find("3 guests not Ok"), std::string::npos) << r.message;
  EXPECT_NE(r.hint.find("nothing listens on port 53 at 10.96.0.10"), std::string::npos);
  std::set<std::string> guests;
  for (const auto& e : r.evidence)
    if (e.source.rfind("guest ", 0) == 0) guests.insert(e.source);
  EXPECT_EQ(guests, (std::set<std::string>{"guest ns/slow", "guest ns/nx", "guest ns/unreach"}));
}

TEST(DnsPathEval, TheFirstNameserverComesFromThePolicy) {
  std::string how;
  EXPECT_EQ(firstNameserver({"ns/a", "None", {"10.96.0.99", "8.8.8.8"}}, {"10.96.0.10"}, &how),
            "10.96.0.99");
  EXPECT_NE(how.find("dnsConfig.nameservers[0]"), std::string::npos);
  EXPECT_EQ(firstNameserver({"ns/a", "None", {}}, {"10.96.0.10"}, &how), "");
  // ClusterFirst (also the default ""): the cluster DNS first, dnsConfig's servers after it.
  EXPECT_EQ(firstNameserver({"ns/a", "ClusterFirst", {"10.96.0.99"}}, {"10.96.0.10"}, &how),
            "10.96.0.10");
  EXPECT_EQ(firstNameserver({"ns/a", "", {}}, {"10.96.0.10", "fd00:96::a"}, &how), "10.96.0.10");
  EXPECT_EQ(firstNameserver({"ns/a", "ClusterFirst", {}}, {}, &how), "");
  EXPECT_NE(how.find("not read"), std::string::npos);
  EXPECT_EQ(firstNameserver({"ns/a", "Default", {}}, {"10.96.0.10"}, &how), "");
}

const std::string* observed(const CheckResult& r, const std::string& source) {
  for (const auto& e : r.evidence)
    if (e.source == source) return &e.observed;
  return nullptr;
}

// VMIs whose first nameserver the tracer has seen failing are named as predicted to fail, with the
// server and how; without a complete pod view that is unknown, never "none predicted".
TEST(DnsPathEval, VmisWhoseFirstNameserverWasSeenFailingArePredictedToFail) {
  DnsPathInputs in;
  auto s = summaryWith({guest("ns/seen", GuestDnsState::NoResponse, "x A: no answer", 0, 2)});
  s.failing_servers = {{"10.96.0.99", GuestDnsState::NoResponse, "ns/seen", "x A: no answer"}};
  in.tracer = s;
  in.service_read = true;
  in.service_ips = {"10.96.0.10"};
  VmiDnsConfigs pods;
  pods.complete = true;
  pods.vmis = {{"ns/custom", "None", {"10.96.0.99", "10.96.0.10"}},
               {"ns/default", "ClusterFirst", {}},
               {"ns/host", "Default", {}}};
  in.vmi_dns = pods;
  auto r = evaluateDnsPath(in);
  EXPECT_EQ(r.reason, "NoResponse");  // the guest that failed decides the status
  const std::string* p = observed(r, "predicted to fail ns/custom");
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("first nameserver 10.96.0.99 (dnsPolicy None"), std::string::npos) << *p;
  EXPECT_NE(p->find("seen failing: NoResponse (ns/seen: x A: no answer)"), std::string::npos);
  EXPECT_FALSE(observed(r, "predicted to fail ns/default"));
  ASSERT_TRUE(observed(r, "vmi first nameservers"));
  EXPECT_EQ(
      *observed(r, "vmi first nameservers"),
      "3 VMIs on this node, 1 predicted to fail, 1 with an unknown first nameserver (dnsPolicy "
      "Default: the node's resolv.conf, not known to nodegate)");
  std::map<std::string, double> metric;
  for (const auto& m : r.metrics) {
    EXPECT_EQ(m.name, "nodegate_dns_first_nameserver_failing");
    metric[m.labels.at("namespace") + "/" + m.labels.at("vmi")] = m.value;
  }
  EXPECT_EQ(metric, (std::map<std::string, double>{{"ns/custom", 1}, {"ns/default", 0}}));

  // The cluster DNS Service seen failing: every ClusterFirst VMI asks it first.
  in.tracer->failing_servers = {
      {"10.96.0.10", GuestDnsState::ServiceTranslationMissing, "ns/seen", "x A: untranslated"}};
  r = evaluateDnsPath(in);
  EXPECT_TRUE(observed(r, "predicted to fail ns/default"));
  EXPECT_FALSE(observed(r, "predicted to fail ns/custom"));

  // The Service's address not read: ClusterFirst VMIs' first nameserver is unknown, and why.
  in.service_read = false;
  in.service_ips.clear();
  in.service_detail = "failed to read service kube-system/kube-dns: HTTP 403";
  r = evaluateDnsPath(in);
  EXPECT_FALSE(observed(r, "predicted to fail ns/default"));
  EXPECT_NE(observed(r, "vmi first nameservers")
                ->find("2 with an unknown first nameserver (dnsPolicy ClusterFirst: the "
                       "cluster DNS Service, whose address was not read (failed to read service "
                       "kube-system/kube-dns: HTTP 403); dnsPolicy Default"),
            std::string::npos)
      << *observed(r, "vmi first nameservers");

  // No complete pod view (pods RBAC refused): unknown, no series at all.
  in.vmi_dns->complete = false;
  in.vmi_dns->why = "HTTP 403: pods is forbidden";
  r = evaluateDnsPath(in);
  EXPECT_TRUE(r.metrics.empty());
  EXPECT_EQ(*observed(r, "vmi first nameservers"),
            "unknown: the pods on this node are not known (HTTP 403: pods is forbidden)");
  in.vmi_dns.reset();
  r = evaluateDnsPath(in);
  EXPECT_NE(observed(r, "vmi first nameservers")->find("unknown: no pod view"), std::string::npos);
}

TEST(DnsPathEval, TracerWithoutTraffic) {
  DnsPathInputs in;
  in.tracer = summaryWith({}, 0);
  EXPECT_EQ(evaluateDnsPath(in).reason, "NoGuests");
  in.tracer = summaryWith({}, 2);
  EXPECT_EQ(evaluateDnsPath(in).reason, "NoQueries");
  EXPECT_EQ(evaluateDnsPath(in).status, Status::Pass);
  // Guests that have not asked anything yet under a config that will break them.
  in.cilium = *parseCiliumConfig(fixture("cilium-config-incident.json"));
  EXPECT_EQ(evaluateDnsPath(in).reason, "ServiceTranslationMissing");
  // Answered queries outweigh the prediction (a NodeLocal DNS cache can avoid the ClusterIP).
  in.tracer = summaryWith({guest("ns/a", GuestDnsState::Ok, "", 4, 0)});
  EXPECT_EQ(evaluateDnsPath(in).reason, "Ok");
}

TEST(DnsPathProbe, ReadsTheBoardAndTheConfiguredFile) {
  auto board = std::make_shared<DnsVerdictBoard>();
  DnsPathProbe probe(board, nullptr);  // no API: the configured file only
  HostRoot host("/nonexistent");
  host.setProcfs(kDir + "proc-launchers");
  Config cfg;
  cfg.set("dns-path", "cilium_config_file", kDir + "cilium-config-hostns-only.json");
  ProbeContext ctx{host, cfg};
  auto r = probe.run(ctx);
  EXPECT_EQ(r.reason, "TracerNotRunning");  // one launcher in the fixture, no tracer
  board->publish(summaryWith({guest("team-a/vm-alpha", GuestDnsState::Ok, "", 3, 0)}));
  r = probe.run(ctx);
  EXPECT_EQ(r.status, Status::Pass);
  bool saw_cilium = false;
  for (const auto& e : r.evidence) saw_cilium |= e.source == "cilium-config";
  EXPECT_TRUE(saw_cilium);
  // With the tracer's summary the launchers are its discovery's count: procfs is not read.
  auto s = summaryWith({guest("team-a/vm-alpha", GuestDnsState::Ok, "", 3, 0)});
  s.launcher_processes = 7;
  board->publish(s);
  HostRoot no_proc("/nonexistent");
  no_proc.setProcfs("/nonexistent/proc");
  ProbeContext no_proc_ctx{no_proc, cfg};
  r = probe.run(no_proc_ctx);
  EXPECT_EQ(r.status, Status::Pass);
  bool saw_count = false;
  for (const auto& e : r.evidence)
    saw_count |= e.source == "virt-launcher processes" && e.observed == "7";
  EXPECT_TRUE(saw_count);
  cfg.set("dns-path", "cilium_config_file", kDir + "missing.json");
  board->clear();
  r = probe.run(ctx);
  EXPECT_EQ(r.status, Status::Unknown);
  bool saw_error = false;
  for (const auto& e : r.evidence) saw_error |= e.observed.find("failed to") != std::string::npos;
  EXPECT_TRUE(saw_error);
}

}  // namespace
}  // namespace nodegate
