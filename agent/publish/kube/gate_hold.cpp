#include "publish/kube/gate_hold.h"

#include <algorithm>
#include <map>
#include <set>

namespace nodegate::kube {
namespace {

using nlohmann::json;
using Change = std::optional<std::string>;  // new value; nullopt: the label is removed

constexpr std::size_t kPodsNamed = 5;

std::map<std::string, Change> labelChanges(const Desired& want, const json& node,
                                           const PublishSettings& settings) {
  std::map<std::string, Change> out;
  auto patch = nodePatch(want, node, settings);
  if (!patch) return out;
  auto md = patch->find("metadata");
  if (md == patch->end() || !md->contains("labels")) return out;
  for (auto it = (*md)["labels"].begin(); it != (*md)["labels"].end(); ++it)
    out[it.key()] = it.value().is_string() ? Change(it.value().get<std::string>()) : std::nullopt;
  return out;
}

NodeFacts applied(const NodeFacts& observed, const std::map<std::string, Change>& changes,
                  const std::map<std::string, LabelHold>& held) {
  NodeFacts n = observed;
  for (const auto& [k, v] : changes) {
    if (held.count(k)) continue;
    if (v)
      n.labels[k] = *v;
    else
      n.labels.erase(k);
  }
  return n;
}

// Holds every change that a pod admitted under `observed` needs undone, until the candidate
// admits them all. Each pass holds at least one more key of a pod that still fails, and a pod
// whose read keys are all held sees the observed labels again, so this ends.
void holdForPods(const NodeFacts& observed, const std::map<std::string, Change>& changes,
                 const PodView& view, std::map<std::string, LabelHold>& held) {
  for (bool again = true; again;) {
    again = false;
    const NodeFacts candidate = applied(observed, changes, held);
    for (const auto& pod : view.pods) {
      if (!kubeletAdmission(pod, observed).admitted) continue;  // not ours to save
      if (kubeletAdmission(pod, candidate).admitted) continue;
      for (const auto& key : labelKeysRead(pod)) {
        auto c = changes.find(key);
        if (c == changes.end()) continue;
        auto [it, fresh] = held.try_emplace(key);
        LabelHold& h = it->second;
        if (fresh) {
          h.reason = "SelectedByRunningPods";
          again = true;
        }
        if (h.pods.size() < kPodsNamed &&
            std::find(h.pods.begin(), h.pods.end(), pod.id()) == h.pods.end())
          h.pods.push_back(pod.id());
      }
    }
  }
}

}  // namespace

bool ownTaintPresent(const json& node, const PublishSettings& settings) {
  const std::string key = taintKey(settings.prefix);
  for (const auto& t : nodeFacts(node).taints)
    if (t.key == key && t.effect == "NoSchedule") return true;
  return false;
}

std::vector<LabelHold> protectRunningPods(Desired& want, const json& node,
                                          const PublishSettings& settings, const HoldContext& ctx) {
  const auto changes = labelChanges(want, node, settings);
  if (changes.empty()) return {};
  const NodeFacts observed = nodeFacts(node);
  static const PodView kNone{false, "no pod source", {}, {}};
  const PodView& view = ctx.pods ? *ctx.pods : kNone;

  std::map<std::string, LabelHold> held;
  auto releases = [&](auto&& fn) {
    for (const auto& [k, v] : changes)
      if (observed.labels.count(k)) fn(k);
  };
  if (!view.complete || !view.unreadable.empty()) {
    releases([&](const std::string& k) {
      LabelHold& h = held[k];
      h.reason = "PodViewIncomplete";
      if (view.complete)
        h.pods.assign(view.unreadable.begin(),
                      view.unreadable.begin() +
                          static_cast<long>(std::min(view.unreadable.size(), kPodsNamed)));
    });
  } else {
    holdForPods(observed, changes, view, held);
  }

  // A release is only safe once a VM bound just before the node closed can have shown up.
  std::set<std::string> read_by_pods;
  for (const auto& pod : view.pods)
    for (const auto& k : labelKeysRead(pod)) read_by_pods.insert(k);
  releases([&](const std::string& k) {
    if (held.count(k) || (k != settings.gate_label.first && !read_by_pods.count(k))) return;
    auto due = ctx.closed_since ? *ctx.closed_since + ctx.release_delay
                                : std::optional<Clock::time_point>();
    if (due && ctx.now >= *due) return;
    LabelHold& h = held[k];
    h.reason = "ClosingDelay";
    h.release_at = due;
  });

  std::vector<LabelHold> out;
  for (auto& [k, h] : held) {
    h.key = k;
    h.wanted = changes.at(k);
    auto seen = observed.labels.find(k);
    if (seen != observed.labels.end()) {
      h.kept = seen->second;
      want.labels[k] = seen->second;
    } else {
      want.labels.erase(k);
    }
    out.push_back(std::move(h));
  }
  if (!out.empty()) want.taint = true;
  return out;
}

std::optional<Clock::time_point> ClosedSince::observe(const json& node,
                                                      const PublishSettings& settings,
                                                      Clock::time_point now) {
  if (!ownTaintPresent(node, settings))
    since_.reset();
  else if (!since_)
    since_ = now;
  return since_;
}

NodePlan planNode(const Snapshot& snap, const json& node, const PublishSettings& settings,
                  const HoldContext& ctx) {
  NodePlan plan;
  plan.want = desiredState(snap, settings);
  plan.holds = protectRunningPods(plan.want, node, settings, ctx);
  return plan;
}

Clock::time_point nextLook(const std::vector<LabelHold>& holds, Clock::time_point fallback) {
  auto at = nextRelease(holds);
  for (const auto& h : holds)
    if (h.reason == "ClosingDelay" && !h.release_at) at = std::min(at, fallback);
  return at;
}

Clock::time_point nextRelease(const std::vector<LabelHold>& holds) {
  auto at = Clock::time_point::max();
  for (const auto& h : holds)
    if (h.release_at) at = std::min(at, *h.release_at);
  return at;
}

}  // namespace nodegate::kube
