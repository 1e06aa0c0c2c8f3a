// A closed gate never kills a running VM.
//
// When kubelet restarts it admits every pod bound to its node again and rejects the ones whose
// node selector or required node affinity no longer match the node's labels — running pods
// included (kubernetes/kubernetes#124586, #123980; KubeVirt lost running VMs to exactly this with
// kubevirt.io/schedulable: kubevirt/kubevirt#11843, #11662, #12290). So nodegate never changes a
// label in a way that would make a pod bound to the node fail kubelet's admission (admission.h):
// such a change is held back — the label keeps the value the running pods select — and while
// anything is held the node is closed to new pods by nodegate's own NoSchedule taint, which
// kubelet's admission ignores. When the last pod that needs the old value is gone, the change
// goes through and the taint follows the gate again.
//
// Three more rules keep the doubt on the safe side:
//  - without a complete view of the node's pods (not listed yet, the watch failing, RBAC
//    missing, a pod that does not parse), no label present on the node is removed or changed;
//  - the gate label, and any label a pod on the node reads, is released only after the taint has
//    been on the node for release_delay: a VM the scheduler bound just before the taint took
//    effect must have time to appear in the pod view;
//  - additions are not delayed (a label that appears cannot break a pod that selects it).
// Pure: the publisher passes the Node, the pod view and the time, and writes what comes back.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "publish/kube/admission.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

// The pods bound to this node, as the pod source last saw them.
struct PodView {
  bool complete = false;                // listed, and the watch has not failed since
  std::string why;                      // why not complete ("not listed yet", "HTTP 403: ...")
  std::vector<PodPlacement> pods;       // non-terminal pods with spec.nodeName == this node
  std::vector<std::string> unreadable;  // "ns/name" of pods whose placement did not parse
};

struct LabelHold {
  std::string key;
  std::optional<std::string> kept;    // what stays on the Node (nullopt: stays absent)
  std::optional<std::string> wanted;  // what the verdict alone would write (nullopt: removed)
  std::string reason;                 // SelectedByRunningPods | PodViewIncomplete | ClosingDelay
  std::vector<std::string> pods;      // pods whose admission needs `kept` (at most a few)
  std::optional<Clock::time_point> release_at;  // ClosingDelay: when it may go
  bool operator==(const LabelHold&) const = default;
};

struct HoldContext {
  const PodView* pods = nullptr;
  // When this process first saw nodegate's NoSchedule taint on the Node in its current run of
  // presence (nullopt: not on the Node now).
  std::optional<Clock::time_point> closed_since;
  Clock::time_point now;
  std::chrono::seconds release_delay{10};
};

// Adjusts `want` (labels, taint) so that no pod bound to the node loses kubelet's admission, and
// returns what was held back and why. The label changes considered are the ones nodePatch()
// would send for `want`.
std::vector<LabelHold> protectRunningPods(Desired& want, const nlohmann::json& node,
                                          const PublishSettings& settings, const HoldContext& ctx);

// When the earliest ClosingDelay hold may be released (time_point::max() when none).
Clock::time_point nextRelease(const std::vector<LabelHold>& holds);

// Whether nodegate's taint (<prefix>/not-ready:NoSchedule) is on the Node.
bool ownTaintPresent(const nlohmann::json& node, const PublishSettings& settings);

// HoldContext::closed_since as a publisher keeps it: the first time it saw its taint on the
// Node in the current run of presence. A restart starts the delay over (the safe side).
class ClosedSince {
 public:
  std::optional<Clock::time_point> observe(const nlohmann::json& node,
                                           const PublishSettings& settings, Clock::time_point now);

 private:
  std::optional<Clock::time_point> since_;
};

// What both publishers (the real one and --kube none) write for a snapshot: the verdict's
// Desired adjusted by protectRunningPods, and what that held back. One function, so the dry
// run prints what the real publisher sends.
struct NodePlan {
  Desired want;
  std::vector<LabelHold> holds;
};
NodePlan planNode(const Snapshot& snap, const nlohmann::json& node, const PublishSettings& settings,
                  const HoldContext& ctx);

// When the publisher must look again for a ClosingDelay hold: its release_at, or, for one whose
// taint is not on the Node yet, `fallback` (the write that adds the taint comes first).
Clock::time_point nextLook(const std::vector<LabelHold>& holds, Clock::time_point fallback);

}  // namespace nodegate::kube
