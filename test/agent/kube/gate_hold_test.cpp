// The kubelet/scheduler admission model (admission.h) on a real virt-launcher pod and on the
// operators the API allows, and the holds that keep running pods admitted (gate_hold.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <prometheus/registry.h>

#include "publish/kube/admission.h"
#include "publish/kube/gate_hold.h"
#include "publish/kube/hold_board.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

json fixture(const std::string& name) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/kubevirt/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// The captured virt-launcher pod, bound to node "n1", selecting the gate label as KubeVirt's
// developerConfiguration.nodeSelectors makes it do.
json launcher(const std::string& name = "virt-launcher-vm-a", bool selects_gate = true) {
  json p = fixture("virt-launcher-pod.json");
  p["metadata"]["name"] = name;
  p["metadata"]["uid"] = "uid-" + name;
  p["spec"]["nodeName"] = "n1";
  if (selects_gate) p["spec"]["nodeSelector"]["nodegate.io/vm-ready"] = "true";
  return p;
}

PodPlacement placement(const json& pod) {
  auto p = parsePodPlacement(pod);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return p.ok() ? p.value() : PodPlacement{};
}

NodeFacts facts(std::map<std::string, std::string> labels, std::vector<Taint> taints = {}) {
  return {"n1", std::move(labels), std::move(taints)};
}

TEST(Admission, ParsesTheCapturedVirtLauncherPod) {
  PodPlacement p = placement(fixture("virt-launcher-pod.json"));
  EXPECT_EQ(p.id(), "default/virt-launcher-cat8kv-01-8dzl7");
  EXPECT_EQ(p.phase, "Running");
  EXPECT_EQ(p.node_name, "kubevirt-nn4bm-worker-9fxdj");
  EXPECT_EQ(p.node_selector,
            (std::map<std::string, std::string>{{"kubevirt.io/schedulable", "true"}}));
  EXPECT_FALSE(p.required_terms);
  ASSERT_EQ(p.tolerations.size(), 3u);
  EXPECT_EQ(p.tolerations[0].key, "node.kubernetes.io/not-ready");
  EXPECT_EQ(p.tolerations[0].effect, "NoExecute");
  EXPECT_FALSE(p.static_pod);
}

TEST(Admission, NodeSelectorDecidesKubeletAdmission) {
  PodPlacement p = placement(launcher());
  auto both = facts({{"kubevirt.io/schedulable", "true"}, {"nodegate.io/vm-ready", "true"}});
  EXPECT_TRUE(kubeletAdmission(p, both).admitted);
  auto gone = facts({{"kubevirt.io/schedulable", "true"}});
  Verdict v = kubeletAdmission(p, gone);
  EXPECT_FALSE(v.admitted);
  EXPECT_EQ(v.reason, "NodeAffinity");
  // kubevirt/kubevirt#11843: schedulable=false plus a kubelet restart.
  EXPECT_FALSE(kubeletAdmission(p, facts({{"kubevirt.io/schedulable", "false"},
                                          {"nodegate.io/vm-ready", "true"}}))
                   .admitted);
}

TEST(Admission, KubeletIgnoresNoScheduleTaintsTheSchedulerHonours) {
  PodPlacement p = placement(launcher());
  auto node = facts({{"kubevirt.io/schedulable", "true"}, {"nodegate.io/vm-ready", "true"}},
                    {{"nodegate.io/not-ready", "", "NoSchedule"}});
  EXPECT_TRUE(kubeletAdmission(p, node).admitted);
  Verdict s = schedulerFilter(p, node);
  EXPECT_FALSE(s.admitted);
  EXPECT_EQ(s.reason, "TaintToleration");
  // The pod's own tolerations cover the node lifecycle taints...
  node.taints = {{"node.kubernetes.io/not-ready", "", "NoExecute"}};
  EXPECT_TRUE(kubeletAdmission(p, node).admitted);
  // ...but any other NoExecute taint fails kubelet's admission, except for a static pod.
  node.taints = {{"example.com/drain", "now", "NoExecute"}};
  EXPECT_FALSE(kubeletAdmission(p, node).admitted);
  p.static_pod = true;
  EXPECT_TRUE(kubeletAdmission(p, node).admitted);
}

TEST(Admission, TolerationMatching) {
  Taint t{"k", "v", "NoSchedule"};
  EXPECT_TRUE(toleratesTaint({{"k", "Equal", "v", "NoSchedule"}}, t));
  EXPECT_TRUE(toleratesTaint({{"k", "", "v", ""}}, t));  // "" operator is Equal; "" effect: all
  EXPECT_FALSE(toleratesTaint({{"k", "Equal", "w", ""}}, t));
  EXPECT_FALSE(toleratesTaint({{"k", "Exists", "", "NoExecute"}}, t));
  EXPECT_TRUE(toleratesTaint({{"", "Exists", "", ""}}, t));  // tolerates everything
  EXPECT_FALSE(toleratesTaint({{"other", "Exists", "", ""}}, t));
  EXPECT_FALSE(toleratesTaint({}, t));
}

json affinity(json terms) {
  json p = launcher("vm-aff", false);
  p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {"nodeSelectorTerms", std::move(terms)}};
  return p;
}

TEST(Admission, RequiredAffinityOperators) {
  auto node = facts({{"kubevirt.io/schedulable", "true"}, {"zone", "a"}, {"gen", "7"}});
  auto admits = [&](json terms) {
    return kubeletAdmission(placement(affinity(std::move(terms))), node).admitted;
  };
  auto expr = [](std::string key, std::string op, std::vector<std::string> values) {
    json e = {{"key", key}, {"operator", op}};
    if (!values.empty()) e["values"] = values;
    return json{{{"matchExpressions", json::array({e})}}};
  };
  EXPECT_TRUE(admits(expr("zone", "In", {"a", "b"})));
  EXPECT_FALSE(admits(expr("zone", "In", {"b"})));
  EXPECT_FALSE(admits(expr("missing", "In", {"a"})));
  EXPECT_TRUE(admits(expr("zone", "NotIn", {"b"})));
  EXPECT_TRUE(admits(expr("missing", "NotIn", {"b"})));
  EXPECT_FALSE(admits(expr("zone", "NotIn", {"a"})));
  EXPECT_TRUE(admits(expr("zone", "Exists", {})));
  EXPECT_FALSE(admits(expr("zone", "DoesNotExist", {})));
  EXPECT_TRUE(admits(expr("missing", "DoesNotExist", {})));
  EXPECT_TRUE(admits(expr("gen", "Gt", {"6"})));
  EXPECT_FALSE(admits(expr("gen", "Gt", {"7"})));
  EXPECT_TRUE(admits(expr("gen", "Lt", {"8"})));
  EXPECT_FALSE(admits(expr("zone", "Gt", {"1"})));  // a non-integer label value
  // Requirements that would not parse make their term match nothing.
  EXPECT_FALSE(admits(expr("zone", "In", {})));
  EXPECT_FALSE(admits(expr("zone", "Exists", {"a"})));
  EXPECT_FALSE(admits(expr("gen", "Gt", {"x"})));
  EXPECT_FALSE(admits(expr("zone", "Matches", {"a"})));
  // Terms are ORed, expressions in a term ANDed; an empty term matches nothing.
  json terms = expr("zone", "In", {"b"});
  terms.push_back({{"matchExpressions", {{{"key", "gen"}, {"operator", "Exists"}}}}});
  EXPECT_TRUE(admits(terms));
  EXPECT_FALSE(admits(json::array({json::object()})));
  // matchFields: metadata.name with one value.
  EXPECT_TRUE(admits(
      {{{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n1"}}}}}}}));
  EXPECT_FALSE(
      admits({{{"matchFields",
                {{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"n1"}}}}}}}));
  EXPECT_FALSE(
      admits({{{"matchFields",
                {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n1", "n2"}}}}}}}));
}

TEST(Admission, MalformedAffinityIsAnError) {
  json p = launcher();
  p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = 5;
  EXPECT_FALSE(parsePodPlacement(p).ok());
  EXPECT_FALSE(parsePodPlacement(json::array()).ok());
  EXPECT_FALSE(parsePodPlacement(json{{"metadata", json::object()}}).ok());
}

TEST(Admission, StaticPodsAreRecognised) {
  json p = launcher();
  p["metadata"]["annotations"]["kubernetes.io/config.source"] = "file";
  EXPECT_TRUE(placement(p).static_pod);
  p["metadata"]["annotations"]["kubernetes.io/config.source"] = "api";
  EXPECT_FALSE(placement(p).static_pod);
}

// ---- holds ----

PublishSettings settings(bool taint = false) {
  PublishSettings s;
  s.node_name = "n1";
  s.taint = taint;
  s.required = {"kvm-device"};
  return s;
}

json node(std::map<std::string, std::string> labels, bool with_taint = false) {
  json n = {{"metadata",
             {{"name", "n1"},
              {"resourceVersion", "7"},
              {"labels", labels},
              {"annotations", json::object()}}},
            {"spec", json::object()},
            {"status", json::object()}};
  std::string owned;
  for (const auto& [k, v] : labels)
    if (k.rfind("nodegate.io/", 0) == 0) owned += (owned.empty() ? "" : ",") + k;
  n["metadata"]["annotations"]["nodegate.io/owned-labels"] = owned;
  if (with_taint)
    n["spec"]["taints"] = {{{"key", "nodegate.io/not-ready"}, {"effect", "NoSchedule"}}};
  return n;
}

// What nodegate wants when the kvm-device check fails: no gate label, kvm=false.
Desired closed() {
  Desired d;
  d.labels = {{"nodegate.io/kvm", "false"}};
  return d;
}

const std::map<std::string, std::string> kOpen = {{"kubevirt.io/schedulable", "true"},
                                                  {"nodegate.io/vm-ready", "true"},
                                                  {"nodegate.io/kvm", "true"}};

PodView view(std::vector<json> pods) {
  PodView v;
  v.complete = true;
  for (auto& p : pods) v.pods.push_back(placement(p));
  return v;
}

HoldContext at(const PodView& v, std::optional<Clock::time_point> closed_since,
               Clock::time_point now) {
  HoldContext c;
  c.pods = &v;
  c.closed_since = closed_since;
  c.now = now;
  c.release_delay = 10s;
  return c;
}

TEST(GateHold, RunningVmKeepsTheGateLabelAndTheNodeIsTainted) {
  PodView v = view({launcher("vm-a"), launcher("vm-b")});
  Desired want = closed();
  auto now = Clock::now();
  auto holds = protectRunningPods(want, node(kOpen), settings(), at(v, now - 1h, now));
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].key, "nodegate.io/vm-ready");
  EXPECT_EQ(holds[0].reason, "SelectedByRunningPods");
  EXPECT_EQ(holds[0].kept, "true");
  EXPECT_FALSE(holds[0].wanted);
  EXPECT_EQ(holds[0].pods, (std::vector<std::string>{"default/vm-a", "default/vm-b"}));
  EXPECT_EQ(want.labels.at("nodegate.io/vm-ready"), "true");
  EXPECT_EQ(want.labels.at("nodegate.io/kvm"), "false");  // nobody selects it: it follows
  EXPECT_TRUE(want.taint);
  // The patch keeps the gate label and adds the taint; every pod stays admitted.
  auto patch = nodePatch(want, node(kOpen), settings());
  ASSERT_TRUE(patch);
  EXPECT_FALSE(patch->at("metadata").at("labels").contains("nodegate.io/vm-ready"));
  EXPECT_EQ(patch->at("spec").at("taints")[0].at("key"), "nodegate.io/not-ready");
}

TEST(GateHold, ReleasedWhenTheLastVmIsGoneAndTheDelayHasPassed) {
  PodView v = view({});
  auto now = Clock::now();
  Desired want = closed();
  // The taint has been on the node long enough: the label goes, and so does the taint.
  EXPECT_TRUE(
      protectRunningPods(want, node(kOpen, true), settings(), at(v, now - 11s, now)).empty());
  EXPECT_FALSE(want.labels.count("nodegate.io/vm-ready"));
  EXPECT_FALSE(want.taint);
  // Not yet long enough: held, with the time it may go.
  want = closed();
  auto holds = protectRunningPods(want, node(kOpen, true), settings(), at(v, now - 3s, now));
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].reason, "ClosingDelay");
  EXPECT_EQ(nextRelease(holds), now + 7s);
  EXPECT_TRUE(want.taint);
  // No taint yet: held until it is written and seen.
  want = closed();
  holds = protectRunningPods(want, node(kOpen), settings(), at(v, std::nullopt, now));
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_FALSE(holds[0].release_at);
  EXPECT_EQ(nextRelease(holds), Clock::time_point::max());
}

TEST(GateHold, IncompleteViewHoldsEveryRelease) {
  PodView v;
  v.why = "HTTP 403: pods is forbidden";
  auto now = Clock::now();
  Desired want = closed();
  auto holds = protectRunningPods(want, node(kOpen, true), settings(), at(v, now - 1h, now));
  ASSERT_EQ(holds.size(), 2u);
  for (const auto& h : holds) EXPECT_EQ(h.reason, "PodViewIncomplete");
  EXPECT_EQ(want.labels.at("nodegate.io/kvm"), "true");
  EXPECT_EQ(want.labels.at("nodegate.io/vm-ready"), "true");
  EXPECT_TRUE(want.taint);
  // Additions are not held: a fresh node gets its labels.
  want = closed();
  holds = protectRunningPods(want, node({}), settings(), at(v, std::nullopt, now));
  EXPECT_TRUE(holds.empty());
  EXPECT_EQ(want.labels.at("nodegate.io/kvm"), "false");
  // A pod that does not parse makes a complete view as uncertain as no view.
  PodView u = view({});
  u.unreadable = {"default/odd"};
  want = closed();
  holds = protectRunningPods(want, node(kOpen, true), settings(), at(u, now - 1h, now));
  ASSERT_EQ(holds.size(), 2u);
  EXPECT_EQ(holds[0].pods, (std::vector<std::string>{"default/odd"}));
}

TEST(GateHold, AnyOwnedLabelAPodSelectsIsHeld) {
  json p = launcher("vm-kvm", false);
  p["spec"]["nodeSelector"]["nodegate.io/kvm"] = "true";
  PodView v = view({p});
  auto now = Clock::now();
  Desired want = closed();
  auto holds = protectRunningPods(want, node(kOpen, true), settings(), at(v, now - 1h, now));
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].key, "nodegate.io/kvm");
  EXPECT_EQ(holds[0].kept, "true");
  EXPECT_EQ(holds[0].wanted, "false");
  EXPECT_FALSE(want.labels.count("nodegate.io/vm-ready"));  // nobody needs it: released
  EXPECT_TRUE(want.taint);
}

TEST(GateHold, AdditionThatWouldBreakAPodIsHeldBack) {
  // A workload that keeps away from VM nodes: DoesNotExist on the gate label.
  json p = affinity(
      {{{"matchExpressions", {{{"key", "nodegate.io/vm-ready"}, {"operator", "DoesNotExist"}}}}}});
  PodView v = view({p});
  auto now = Clock::now();
  Desired want;
  want.labels = {{"nodegate.io/kvm", "true"}, {"nodegate.io/vm-ready", "true"}};
  std::map<std::string, std::string> before = {{"kubevirt.io/schedulable", "true"},
                                               {"nodegate.io/kvm", "false"}};
  auto holds = protectRunningPods(want, node(before), settings(), at(v, std::nullopt, now));
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].key, "nodegate.io/vm-ready");
  EXPECT_FALSE(holds[0].kept);
  EXPECT_FALSE(want.labels.count("nodegate.io/vm-ready"));
  EXPECT_EQ(want.labels.at("nodegate.io/kvm"), "true");
}

TEST(GateHold, PodsNotAdmittedAnywayAndTerminalOnesDoNotHold) {
  // Someone else removed kubevirt.io/schedulable: the pod fails admission already; nodegate
  // cannot save it and does not hold its labels for it.
  PodView v = view({launcher("vm-a")});
  auto now = Clock::now();
  Desired want = closed();
  auto labels = kOpen;
  labels.erase("kubevirt.io/schedulable");
  EXPECT_TRUE(
      protectRunningPods(want, node(labels, true), settings(), at(v, now - 1h, now)).empty());
}

// The Node's labels after nodePatch(want) is applied as the API server merges it.
NodeFacts afterPatch(const json& n, const Desired& want) {
  NodeFacts f = nodeFacts(n);
  auto patch = nodePatch(want, n, settings());
  if (patch && patch->contains("metadata") && patch->at("metadata").contains("labels"))
    for (const auto& [k, v] : patch->at("metadata").at("labels").items()) {
      if (v.is_null())
        f.labels.erase(k);
      else
        f.labels[k] = v.get<std::string>();
    }
  return f;
}

TEST(GateHold, OrTermsStayAdmitted) {
  // Admitted by either term; the verdict would break both.
  json p =
      affinity({{{"matchExpressions", {{{"key", "nodegate.io/vm-ready"}, {"operator", "Exists"}}}}},
                {{"matchExpressions",
                  {{{"key", "nodegate.io/kvm"}, {"operator", "In"}, {"values", {"true"}}}}}}});
  PodView v = view({p});
  auto now = Clock::now();
  Desired want = closed();
  json n = node(kOpen, true);
  auto holds = protectRunningPods(want, n, settings(), at(v, now - 1h, now));
  EXPECT_FALSE(holds.empty());
  EXPECT_TRUE(want.taint);
  EXPECT_TRUE(kubeletAdmission(placement(p), afterPatch(n, want)).admitted);
}

TEST(GateHold, NothingToChangeNothingHeld) {
  PodView v = view({launcher()});
  Desired want;
  want.labels = {{"nodegate.io/kvm", "true"}, {"nodegate.io/vm-ready", "true"}};
  auto holds = protectRunningPods(want, node(kOpen), settings(), at(v, std::nullopt, Clock::now()));
  EXPECT_TRUE(holds.empty());
  EXPECT_FALSE(want.taint);
}

TEST(GateHold, OwnTaintPresent) {
  EXPECT_TRUE(ownTaintPresent(node(kOpen, true), settings()));
  EXPECT_FALSE(ownTaintPresent(node(kOpen), settings()));
  json n = node(kOpen);
  n["spec"]["taints"] = {{{"key", "nodegate.io/not-ready"}, {"effect", "NoExecute"}}};
  EXPECT_FALSE(ownTaintPresent(n, settings()));
}

TEST(GateHold, ClosedSinceRunsFromTheFirstSightingOfTheTaint) {
  ClosedSince c;
  auto t0 = Clock::now();
  EXPECT_FALSE(c.observe(node(kOpen), settings(), t0));
  EXPECT_EQ(c.observe(node(kOpen, true), settings(), t0 + 1s), t0 + 1s);
  EXPECT_EQ(c.observe(node(kOpen, true), settings(), t0 + 5s), t0 + 1s);  // still the same run
  EXPECT_FALSE(c.observe(node(kOpen), settings(), t0 + 6s));
  EXPECT_EQ(c.observe(node(kOpen, true), settings(), t0 + 9s), t0 + 9s);  // a new run
}

TEST(GateHold, NextLookWaitsForTheTaintWriteOrTheRelease) {
  auto now = Clock::now();
  LabelHold pending{"nodegate.io/vm-ready", "true", std::nullopt, "ClosingDelay", {}, std::nullopt};
  LabelHold due = pending;
  due.release_at = now + 4s;
  LabelHold pods{"nodegate.io/vm-ready", "true", std::nullopt, "SelectedByRunningPods", {}, {}};
  EXPECT_EQ(nextLook({pending}, now + 10s), now + 10s);
  EXPECT_EQ(nextLook({due, pending}, now + 10s), now + 4s);
  EXPECT_EQ(nextLook({pods}, now + 10s), Clock::time_point::max());  // the pod view wakes it
}

TEST(GateHold, PlanIsTheVerdictAdjustedByTheHolds) {
  Snapshot snap;
  snap.complete = true;
  snap.gate_open = false;
  PodView v = view({launcher("vm-a")});
  auto now = Clock::now();
  NodePlan plan = planNode(snap, node(kOpen, true), settings(), at(v, now - 1h, now));
  ASSERT_EQ(plan.holds.size(), 1u);
  EXPECT_EQ(plan.holds[0].reason, "SelectedByRunningPods");
  EXPECT_EQ(plan.want.labels.at("nodegate.io/vm-ready"), "true");
  EXPECT_TRUE(plan.want.taint);
}

std::map<std::string, double> heldGauge(prometheus::Registry& r) {
  std::map<std::string, double> out;
  for (const auto& f : r.Collect())
    if (f.name == "nodegate_gate_held_labels")
      for (const auto& m : f.metric) out[m.label.at(0).value] = m.gauge.value;
  return out;
}

TEST(GateHoldBoard, CountsByReasonAndShowsThePods) {
  prometheus::Registry registry;
  GateHoldBoard board(registry);
  EXPECT_EQ(heldGauge(registry),
            (std::map<std::string, double>{
                {"ClosingDelay", 0}, {"PodViewIncomplete", 0}, {"SelectedByRunningPods", 0}}));
  EXPECT_FALSE(board.toJson()["published"]);
  PodView v = view({launcher("vm-a")});
  LabelHold h{"nodegate.io/vm-ready",  "true",           std::nullopt,
              "SelectedByRunningPods", {"default/vm-a"}, std::nullopt};
  board.update({h}, v, "n1");
  EXPECT_EQ(heldGauge(registry)["SelectedByRunningPods"], 1);
  json j = board.toJson();
  EXPECT_TRUE(j["published"]);
  EXPECT_EQ(j["holds"][0]["label"], "nodegate.io/vm-ready");
  EXPECT_EQ(j["holds"][0]["kept"], "true");
  EXPECT_TRUE(j["holds"][0]["wanted"].is_null());
  EXPECT_EQ(j["holds"][0]["pods"], json::array({"default/vm-a"}));
  EXPECT_EQ(j["pod_view"]["complete"], true);
  EXPECT_EQ(j["pod_view"]["pods"], 1);
  PodView incomplete;
  incomplete.why = "failed to list pods: HTTP 403";
  board.update({}, incomplete, "n1");
  EXPECT_EQ(heldGauge(registry)["SelectedByRunningPods"], 0);
  EXPECT_EQ(board.toJson()["pod_view"]["reason"], "failed to list pods: HTTP 403");
}

}  // namespace
}  // namespace nodegate::kube
