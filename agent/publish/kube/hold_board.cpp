#include "publish/kube/hold_board.h"

#include <map>

#include "nodegate/log.h"
#include "publish/rfc3339.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

std::string shown(const std::optional<std::string>& v) {
  return v ? *v : "<absent>";
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// What a log line says about a hold: release_at moves when the taint is first seen, which is not
// news.
bool sameStory(const LabelHold& a, const LabelHold& b) {
  return a.kept == b.kept && a.wanted == b.wanted && a.reason == b.reason && a.pods == b.pods;
}

json valueOrNull(const std::optional<std::string>& v) {
  return v ? json(*v) : json();
}

}  // namespace

GateHoldBoard::GateHoldBoard(prometheus::Registry& registry)
    : gauge_(
          prometheus::BuildGauge()
              .Name("nodegate_gate_held_labels")
              .Help("Labels the gate keeps as running pods need them instead of writing the "
                    "verdict, by reason (SelectedByRunningPods, PodViewIncomplete, ClosingDelay).")
              .Register(registry)) {
  for (const char* r : kHoldReasons) gauge_.Add({{"reason", r}}).Set(0);
}

void GateHoldBoard::update(const std::vector<LabelHold>& holds, const PodView& pods,
                           const std::string& node_name) {
  std::map<std::string, LabelHold> before;
  {
    std::lock_guard lk(mu_);
    for (const auto& h : state_.holds) before[h.key] = h;
    state_.published = true;
    state_.holds = holds;
    state_.pods_complete = pods.complete;
    state_.pods_why = pods.why;
    state_.pods = pods.pods.size();
    std::map<std::string, int> count;
    for (const auto& h : holds) ++count[h.reason];
    for (const char* r : kHoldReasons) gauge_.Add({{"reason", r}}).Set(count[r]);
  }
  for (const auto& h : holds) {
    auto it = before.find(h.key);
    if (it != before.end() && sameStory(it->second, h)) {
      before.erase(it);
      continue;
    }
    if (it != before.end()) before.erase(it);
    log::info("gate holds a label for running pods", {{"node", node_name},
                                                      {"label", h.key},
                                                      {"kept", shown(h.kept)},
                                                      {"verdict", shown(h.wanted)},
                                                      {"reason", h.reason},
                                                      {"pods", joined(h.pods)}});
  }
  for (const auto& [key, h] : before)
    log::info("gate released a held label",
              {{"node", node_name}, {"label", key}, {"was", h.reason}});
}

GateHoldBoard::State GateHoldBoard::state() const {
  std::lock_guard lk(mu_);
  return state_;
}

json GateHoldBoard::toJson() const {
  const State s = state();
  json holds = json::array();
  for (const auto& h : s.holds)
    holds.push_back({{"label", h.key},
                     {"kept", valueOrNull(h.kept)},
                     {"wanted", valueOrNull(h.wanted)},
                     {"reason", h.reason},
                     {"pods", h.pods},
                     {"release_at", h.release_at ? json(formatRfc3339(*h.release_at)) : json()}});
  return {{"published", s.published},
          {"holds", holds},
          {"pod_view",
           {{"complete", s.pods_complete},
            {"reason", s.pods_why.empty() ? json() : json(s.pods_why)},
            {"pods", s.pods}}}};
}

}  // namespace nodegate::kube
