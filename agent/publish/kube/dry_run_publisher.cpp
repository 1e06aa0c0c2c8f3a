#include "publish/kube/dry_run_publisher.h"

#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

// Conditions merge by type, as the API server applies our strategic merge patch; only our own
// conditions exist on the simulated Node.
void applyStatusPatch(json& node, const json& patch) {
  json& conds = node["status"]["conditions"];
  if (!conds.is_array()) conds = json::array();
  for (const auto& c : patch["status"]["conditions"]) {
    const std::string type = c.value("type", "");
    for (auto it = conds.begin(); it != conds.end();)
      it = it->value("type", "") == type ? conds.erase(it) : it + 1;
    if (c.value("$patch", "") != "delete") conds.push_back(c);
  }
}

}  // namespace

DryRunPublisher::DryRunPublisher(PublishSettings settings, std::chrono::seconds release_delay,
                                 std::shared_ptr<GateHoldBoard> holds)
    : s_(std::move(settings)), release_delay_(release_delay), holds_(std::move(holds)) {
  node_ = {{"metadata", {{"name", s_.node_name}}}};
}

void DryRunPublisher::publish(const Snapshot& snap) {
  if (!snap.complete) return;
  auto now = Clock::now();
  const PodView no_pods{true, "", {}, {}};
  const HoldContext ctx{&no_pods, closed_.observe(node_, s_, now), now, release_delay_};
  const NodePlan plan = planNode(snap, node_, s_, ctx);
  if (holds_) holds_->update(plan.holds, no_pods, s_.node_name);
  const Desired& want = plan.want;
  if (auto patch = nodePatch(want, node_, s_)) {
    std::string labels;
    for (const auto& [k, v] : want.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
    log::info("kube none: would set node labels",
              {{"node", s_.node_name},
               {"labels", labels},
               {"taint", want.taint ? taintKey(s_.prefix) + ":NoSchedule" : "none"},
               {"patch", patch->dump()}});
    node_.merge_patch(*patch);
  }
  const auto changes = transitions(want, node_);
  // No heartbeat: a dry run logs changes, not the passing of time.
  if (auto sp = statusPatch(want, node_, now, std::chrono::seconds(0))) {
    log::info("kube none: would patch node status",
              {{"node", s_.node_name}, {"patch", sp->dump()}});
    applyStatusPatch(node_, *sp);
  }
  for (const auto& t : changes)
    log::info("kube none: would post event", {{"node", s_.node_name},
                                              {"condition", t.to.type},
                                              {"status", t.to.status},
                                              {"reason", t.to.reason}});
}

}  // namespace nodegate::kube
