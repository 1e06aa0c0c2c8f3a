// Pure "desired state vs observed Node -> patch" computations.
#include "publish/kube/node_state.h"
#include "publish/rfc3339.h"
#include "text.h"

#include <gtest/gtest.h>

namespace nodegate::kube {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

CheckState check(const std::string& name, Status s, std::string reason = "Ok",
                 std::map<std::string, std::string> labels = {}) {
  CheckState c;
  c.result = makeResult(name, s, std::move(reason), name + " says " + std::string(toString(s)));
  c.result.labels = std::move(labels);
  return c;
}

Snapshot healthy() {
  Snapshot s;
  s.checks = {check("cpu-virt", Status::Pass, "Ok", {{"cpu-virt", "vmx"}}),
              check("kvm-device", Status::Pass, "Ok", {{"kvm", "true"}}),
              check("vhost-net", Status::Warn, "DeviceMissing", {{"vhost-net", "false"}}),
              check("tun", Status::Pass, "Ok", {{"tun", "true"}}),
              check("kernel-modules", Status::Pass),
              check("lvm", Status::Pass),
              check("time-sync", Status::Pass)};
  s.gate_open = true;
  s.complete = true;
  return s;
}

PublishSettings settings(bool taint = false) {
  PublishSettings p;
  p.node_name = "n1";
  p.prefix = "nodegate.io";
  p.gate_label = {"nodegate.io/vm-ready", "true"};
  p.taint = taint;
  p.required = {"cpu-virt", "kvm-device", "tun", "kernel-modules"};
  return p;
}

json node(json labels = json::object(), json annotations = json::object()) {
  return {{"metadata",
           {{"name", "n1"},
            {"resourceVersion", "42"},
            {"labels", labels},
            {"annotations", annotations}}},
          {"spec", json::object()},
          {"status", {{"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

const Condition* find(const Desired& d, const std::string& type) {
  for (const auto& c : d.conditions)
    if (c.type == type) return &c;
  return nullptr;
}

TEST(DesiredState, LabelsUnderPrefixAndGateOnlyWhileOpen) {
  auto d = desiredState(healthy(), settings());
  EXPECT_EQ(d.labels.at("nodegate.io/cpu-virt"), "vmx");
  EXPECT_EQ(d.labels.at("nodegate.io/kvm"), "true");
  EXPECT_EQ(d.labels.at("nodegate.io/vm-ready"), "true");
  auto closed = healthy();
  closed.gate_open = false;
  EXPECT_EQ(desiredState(closed, settings()).labels.count("nodegate.io/vm-ready"), 0u);
}

TEST(DesiredState, ConditionsOnlyForPresentProbes) {
  auto d = desiredState(healthy(), settings());
  ASSERT_NE(find(d, "VirtualizationReady"), nullptr);
  ASSERT_NE(find(d, "LocalStorageHealthy"), nullptr);
  ASSERT_NE(find(d, "TimeSynchronized"), nullptr);
  EXPECT_EQ(find(d, "GuestDNSHealthy"), nullptr);
  EXPECT_EQ(d.absent_conditions,
            (std::vector<std::string>{"GuestDNSHealthy", "KubeVirtNodeHealthy"}));
  const auto* v = find(d, "VirtualizationReady");
  EXPECT_EQ(v->status, "True");
  EXPECT_EQ(v->reason, "ChecksPassed");
  // The optional vhost-net WARN is mentioned but does not decide.
  EXPECT_NE(v->message.find("vhost-net WARN"), std::string::npos);
}

TEST(DesiredState, RequiredFailDecidesReasonAndUnknownIsNotTrue) {
  auto s = healthy();
  s.checks[1] = check("kvm-device", Status::Fail, "DeviceMissing");
  s.checks[4] = check("kernel-modules", Status::Unknown, "PermissionDenied");
  auto v = *find(desiredState(s, settings()), "VirtualizationReady");
  EXPECT_EQ(v.status, "False");
  EXPECT_EQ(v.reason, "DeviceMissing");
  EXPECT_EQ(v.message.find('\n'), std::string::npos);
  s.checks[1] = check("kvm-device", Status::Pass);
  v = *find(desiredState(s, settings()), "VirtualizationReady");
  EXPECT_EQ(v.status, "Unknown");
  EXPECT_EQ(v.reason, "PermissionDenied");
}

TEST(DesiredState, OptionalGroupFailsOnFailNotOnWarn) {
  auto s = healthy();
  s.checks[5] = check("lvm", Status::Warn, "ThinPoolFilling");
  EXPECT_EQ(find(desiredState(s, settings()), "LocalStorageHealthy")->status, "True");
  s.checks[5] = check("lvm", Status::Fail, "ThinPoolFull");
  auto c = *find(desiredState(s, settings()), "LocalStorageHealthy");
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "ThinPoolFull");
}

TEST(DesiredState, TaintOnlyWhenEnabledAndClosed) {
  auto s = healthy();
  EXPECT_FALSE(desiredState(s, settings(true)).taint);
  s.gate_open = false;
  EXPECT_TRUE(desiredState(s, settings(true)).taint);
  EXPECT_FALSE(desiredState(s, settings(false)).taint);
}

TEST(Labels, SanitizeAndValidate) {
  EXPECT_EQ(sanitizeLabelValue("x86_64 (v2)"), "x86_64--v2");
  EXPECT_EQ(sanitizeLabelValue(std::string(80, 'a')).size(), 63u);
  EXPECT_EQ(sanitizeLabelValue("--"), "");
  EXPECT_TRUE(validLabelName("cpu-virt"));
  EXPECT_FALSE(validLabelName("-bad"));
  EXPECT_FALSE(validLabelName("a/b"));
}

TEST(NodePatch, AddsLabelsAndRecordsOwnership) {
  auto p = nodePatch(desiredState(healthy(), settings()), node(), settings());
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["metadata"]["labels"]["nodegate.io/vm-ready"], "true");
  std::string owned = (*p)["metadata"]["annotations"]["nodegate.io/owned-labels"];
  EXPECT_NE(owned.find("nodegate.io/kvm"), std::string::npos);
  EXPECT_NE(owned.find("nodegate.io/vm-ready"), std::string::npos);
  // Labels and annotations merge by key: no precondition needed, no taint written.
  EXPECT_FALSE((*p)["metadata"].contains("resourceVersion"));
  EXPECT_FALSE(p->contains("spec"));
}

TEST(NodePatch, NothingWhenNodeAlreadyMatches) {
  auto want = desiredState(healthy(), settings());
  json labels = json::object();
  std::string owned;
  for (const auto& [k, v] : want.labels) {
    labels[k] = v;
    owned += (owned.empty() ? "" : ",") + k;
  }
  labels["other.io/x"] = "1";
  EXPECT_FALSE(nodePatch(want, node(labels, {{"nodegate.io/owned-labels", owned}}), settings()));
}

TEST(NodePatch, RemovesOnlyOwnedStaleLabels) {
  auto s = healthy();
  s.gate_open = false;
  auto want = desiredState(s, settings());
  json labels = {{"nodegate.io/vm-ready", "true"},  // ours, gate closed now: remove
                 {"nodegate.io/custom", "keep"},    // under our prefix but not ours: keep
                 {"nodegate.io/old-check", "x"}};   // ours, no longer produced: remove
  json ann = {{"nodegate.io/owned-labels", "nodegate.io/old-check,nodegate.io/vm-ready"}};
  auto p = nodePatch(want, node(labels, ann), settings());
  ASSERT_TRUE(p);
  const auto& lp = (*p)["metadata"]["labels"];
  EXPECT_TRUE(lp["nodegate.io/vm-ready"].is_null());
  EXPECT_TRUE(lp["nodegate.io/old-check"].is_null());
  EXPECT_FALSE(lp.contains("nodegate.io/custom"));
  EXPECT_EQ((*p)["metadata"]["annotations"]["nodegate.io/owned-labels"].get<std::string>().find(
                "vm-ready"),
            std::string::npos);
}

TEST(NodePatch, AnnotationNamingForeignLabelsNeverRemovesThem) {
  auto s = healthy();
  s.gate_open = false;
  auto want = desiredState(s, settings());
  json labels = {{"kubernetes.io/hostname", "n1"},
                 {"team", "storage"},
                 {"kubevirt.io/schedulable", "true"},
                 {"nodegate.io/old", "x"}};
  json ann = {{"nodegate.io/owned-labels",
               "kubernetes.io/hostname,team,kubevirt.io/schedulable,nodegate.io/old,"
               "nodegate.io.evil/x"}};
  const json n = node(labels, ann);
  auto own = ownership(n, settings());
  EXPECT_EQ(own.owned, (std::set<std::string>{"nodegate.io/old"}));
  EXPECT_EQ(own.ignored, (std::set<std::string>{"kubernetes.io/hostname", "team",
                                                "kubevirt.io/schedulable", "nodegate.io.evil/x"}));
  ASSERT_EQ(own.problems(settings()).size(), 1u);
  EXPECT_EQ(own.problems(settings())[0].reason, "OwnedLabelsIgnored");
  auto p = nodePatch(want, n, settings());
  ASSERT_TRUE(p);
  const auto& lp = (*p)["metadata"]["labels"];
  EXPECT_TRUE(lp["nodegate.io/old"].is_null());
  for (const char* k : {"kubernetes.io/hostname", "team", "kubevirt.io/schedulable"})
    EXPECT_FALSE(lp.contains(k)) << k;
  // The annotation is rewritten with what we own only.
  std::string owned = (*p)["metadata"]["annotations"]["nodegate.io/owned-labels"];
  EXPECT_EQ(owned.find("team"), std::string::npos);
  EXPECT_EQ(owned.find("kubernetes.io"), std::string::npos);
}

TEST(NodePatch, ForeignGateLabelIsNeitherWrittenNorRemoved) {
  auto ps = settings();
  ps.gate_label = {"team", "storage"};
  for (bool open : {true, false}) {
    auto s = healthy();
    s.gate_open = open;
    auto want = desiredState(s, ps);
    const json n = node({{"team", "other"}});
    auto own = ownership(n, ps);
    EXPECT_TRUE(own.gate_label_foreign);
    ASSERT_EQ(own.problems(ps).size(), 1u);
    EXPECT_EQ(own.problems(ps)[0].reason, "GateLabelNotOwned");
    auto p = nodePatch(want, n, ps);
    ASSERT_TRUE(p);
    EXPECT_FALSE((*p)["metadata"]["labels"].contains("team")) << open;
    std::string owned = (*p)["metadata"]["annotations"]["nodegate.io/owned-labels"];
    EXPECT_EQ(owned.find("team"), std::string::npos);
  }
  // Written by us (recorded in the annotation): ours to remove when the gate closes.
  auto s = healthy();
  s.gate_open = false;
  const json mine = node({{"team", "storage"}}, {{"nodegate.io/owned-labels", "team"}});
  EXPECT_FALSE(ownership(mine, ps).gate_label_foreign);
  auto p = nodePatch(desiredState(s, ps), mine, ps);
  ASSERT_TRUE(p);
  EXPECT_TRUE((*p)["metadata"]["labels"]["team"].is_null());
}

TEST(Labels, FlagSyntaxAsTheApiServerChecksIt) {
  const std::pair<std::string, std::string> gate{"nodegate.io/vm-ready", "true"};
  EXPECT_TRUE(checkLabelFlags("nodegate.io", gate));
  EXPECT_TRUE(checkLabelFlags("gate.example.com", {"example.com/vms", "yes"}));
  EXPECT_TRUE(checkLabelFlags("nodegate.io", {"team", ""}));
  const std::vector<std::string> bad_prefixes = {"Bad_Prefix!",
                                                 "",
                                                 "kubevirt.io",
                                                 "node.kubevirt.io",
                                                 "k8s.io",
                                                 "node-role.kubernetes.io",
                                                 "-a.io",
                                                 "a..b",
                                                 std::string(254, 'a')};
  for (const auto& bad : bad_prefixes) {
    auto r = checkLabelFlags(bad, gate);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("for --prefix"), std::string::npos) << r.error().message;
  }
  for (auto [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"a", "b=c"},
                                                        {"", "true"},
                                                        {"Bad_Key!", "true"},
                                                        {"kubevirt.io/schedulable", "true"},
                                                        {"x.kubernetes.io/y", "1"},
                                                        {"ok", std::string(64, 'v')},
                                                        {"UPPER.io/x", "1"}}) {
    auto r = checkLabelFlags("nodegate.io", {k, v});
    ASSERT_FALSE(r) << k << "=" << v;
    EXPECT_NE(r.error().message.find("\"" + k + "=" + v + "\" for --gate-label"), std::string::npos)
        << r.error().message;
  }
  EXPECT_TRUE(validLabelKey("kubernetes.io/hostname"));
  EXPECT_FALSE(validLabelKey("a/b/c"));
  EXPECT_FALSE(reservedDomain("notkubevirt.io"));
  EXPECT_TRUE(reservedDomain("cpu.node.kubevirt.io"));
}

TEST(NodePatch, TaintEditsOnlyOwnEntryWithPrecondition) {
  auto s = healthy();
  s.gate_open = false;
  auto want = desiredState(s, settings(true));
  auto n = node();
  n["spec"]["taints"] = json::array({{{"key", "other"}, {"value", "x"}, {"effect", "NoExecute"}}});
  auto p = nodePatch(want, n, settings(true));
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["metadata"]["resourceVersion"], "42");
  ASSERT_EQ((*p)["spec"]["taints"].size(), 2u);
  EXPECT_EQ((*p)["spec"]["taints"][0]["key"], "other");
  EXPECT_EQ((*p)["spec"]["taints"][1]["key"], "nodegate.io/not-ready");
  EXPECT_EQ((*p)["spec"]["taints"][1]["effect"], "NoSchedule");

  // Gate open again: our taint goes, the other stays.
  n["spec"]["taints"].push_back({{"key", "nodegate.io/not-ready"}, {"effect", "NoSchedule"}});
  auto open = desiredState(healthy(), settings(true));
  p = nodePatch(open, n, settings(true));
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["spec"]["taints"],
            json::array({{{"key", "other"}, {"value", "x"}, {"effect", "NoExecute"}}}));
}

TEST(NodePatch, TaintWithOurKeyAndAnotherEffectIsNotOurs) {
  // Taints are identified by key and effect: nodegate writes only <prefix>/not-ready:NoSchedule
  // and leaves a NoExecute entry under the same key to whoever wrote it.
  auto s = healthy();
  s.gate_open = false;
  auto n = node();
  n["spec"]["taints"] = json::array({{{"key", "nodegate.io/not-ready"}, {"effect", "NoExecute"}}});
  auto p = nodePatch(desiredState(s, settings(true)), n, settings(true));
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["spec"]["taints"],
            json::array({{{"key", "nodegate.io/not-ready"}, {"effect", "NoExecute"}},
                         {{"key", "nodegate.io/not-ready"}, {"effect", "NoSchedule"}}}));
  // Gate open: nothing of ours to remove, so nothing is written.
  n["spec"]["taints"] = json::array({{{"key", "nodegate.io/not-ready"}, {"effect", "NoExecute"}}});
  p = nodePatch(desiredState(healthy(), settings(true)), n, settings(true));
  EXPECT_TRUE(!p || !p->contains("spec"));
}

json withConditions(const Desired& want, const std::string& stamp) {
  auto n = node();
  for (const auto& c : want.conditions)
    n["status"]["conditions"].push_back({{"type", c.type},
                                         {"status", c.status},
                                         {"reason", c.reason},
                                         {"message", c.message},
                                         {"lastHeartbeatTime", stamp},
                                         {"lastTransitionTime", "2026-01-01T00:00:00Z"}});
  return n;
}

TEST(StatusPatch, WritesAllOwnConditionsAndDeletesStale) {
  auto want = desiredState(healthy(), settings());
  auto n = node();
  n["status"]["conditions"].push_back({{"type", "GuestDNSHealthy"}, {"status", "False"}});
  auto now = *parseApiTime("2026-11-29T10:00:00Z");
  auto p = statusPatch(want, n, now, 300s);
  ASSERT_TRUE(p);
  const auto& conds = (*p)["status"]["conditions"];
  ASSERT_EQ(conds.size(), want.conditions.size() + 1);
  EXPECT_EQ(conds[0]["lastTransitionTime"], "2026-11-29T10:00:00Z");
  EXPECT_EQ(conds.back()["$patch"], "delete");
  EXPECT_EQ(conds.back()["type"], "GuestDNSHealthy");
}

TEST(StatusPatch, UnchangedStatusKeepsTransitionTimeAndHeartbeatIsThrottled) {
  auto want = desiredState(healthy(), settings());
  auto n = withConditions(want, "2026-11-29T10:00:00Z");
  auto t0 = *parseApiTime("2026-11-29T10:00:00Z");
  EXPECT_FALSE(statusPatch(want, n, t0 + 299s, 300s));
  EXPECT_FALSE(statusPatch(want, n, t0 + 10h, 0s));  // heartbeat 0: never for its own sake
  EXPECT_EQ(nextHeartbeat(want, n, 300s), t0 + 300s);
  auto p = statusPatch(want, n, t0 + 300s, 300s);
  ASSERT_TRUE(p);
  for (const auto& c : (*p)["status"]["conditions"]) {
    EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
    EXPECT_EQ(c["lastHeartbeatTime"], "2026-11-29T10:05:00Z");
  }
}

TEST(StatusPatch, MessageOnlyChangeWaitsForHeartbeat) {
  auto want = desiredState(healthy(), settings());
  auto n = withConditions(want, "2026-11-29T10:00:00Z");
  auto chatty = want;
  chatty.conditions[0].message = "live detail that changes every cycle";
  auto t0 = *parseApiTime("2026-11-29T10:00:00Z");
  EXPECT_FALSE(statusPatch(chatty, n, t0 + 10s, 300s));
  auto p = statusPatch(chatty, n, t0 + 300s, 300s);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)["status"]["conditions"][0]["message"], "live detail that changes every cycle");
}

TEST(StatusPatch, StatusChangeMovesTransitionTime) {
  auto want = desiredState(healthy(), settings());
  auto n = withConditions(want, "2026-11-29T10:00:00Z");
  auto s = healthy();
  s.checks[1] = check("kvm-device", Status::Fail, "DeviceMissing");
  auto broken = desiredState(s, settings());
  auto p = statusPatch(broken, n, *parseApiTime("2026-11-29T10:01:00Z"), 300s);
  ASSERT_TRUE(p);
  for (const auto& c : (*p)["status"]["conditions"]) {
    if (c["type"] == "VirtualizationReady") {
      EXPECT_EQ(c["status"], "False");
      EXPECT_EQ(c["lastTransitionTime"], "2026-11-29T10:01:00Z");
    } else {
      EXPECT_EQ(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }
  }
}

TEST(Transitions, OnlyStatusChangesAndNotHealthyFirstReports) {
  auto want = desiredState(healthy(), settings());
  EXPECT_TRUE(transitions(want, node()).empty());  // first report, all True
  auto n = withConditions(want, "2026-11-29T10:00:00Z");
  EXPECT_TRUE(transitions(want, n).empty());
  auto s = healthy();
  s.checks[1] = check("kvm-device", Status::Fail, "DeviceMissing");
  auto t = transitions(desiredState(s, settings()), n);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].to.type, "VirtualizationReady");
  EXPECT_EQ(t[0].from, "True");
  EXPECT_EQ(t[0].to.reason, "DeviceMissing");
  // A False first report is news.
  EXPECT_EQ(transitions(desiredState(s, settings()), node()).size(), 1u);
}

TEST(Time, FormatAndParseRoundTrip) {
  auto t = *parseApiTime("2026-11-29T14:10:50Z");
  EXPECT_EQ(formatRfc3339(t), "2026-11-29T14:10:50Z");
  EXPECT_EQ(formatRfc3339(t + 1500us, 6), "2026-11-29T14:10:50.001500Z");
  EXPECT_TRUE(parseApiTime("2026-11-29T14:10:50.123456Z"));
  EXPECT_FALSE(parseApiTime("2026-11-29 14:10:50"));
  EXPECT_FALSE(parseApiTime("2026-11-29T14:10:50+01:00"));
}

}  // namespace
}  // namespace nodegate::kube
