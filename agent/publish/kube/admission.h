// What kubelet and the scheduler conclude about one pod from a Node's name, labels and taints:
// a model of the parts of their rules that nodegate's writes can change, written from the
// Kubernetes source (docs/gating-kubevirt.md cites it). Pure: JSON in, verdicts out.
//
// kubelet (pkg/kubelet/lifecycle/predicate.go, predicateAdmitHandler.Admit -> generalFilter)
// admits a pod — a new one, and every pod bound to the node again when kubelet restarts — when
// scheduler.AdmissionCheck passes (resources, required node affinity = spec.nodeSelector AND
// spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution, spec.nodeName, host
// ports) and, unless it is a static pod, every NoExecute taint is tolerated. NoSchedule and
// PreferNoSchedule taints are not looked at by kubelet. The scheduler filters on the same node
// affinity and on NoSchedule and NoExecute taints (helper.DoNotScheduleTaintsFilterFunc).
// Resources and ports are not modelled: nodegate writes neither.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"

namespace nodegate::kube {

// A v1.NodeSelectorRequirement: In, NotIn, Exists, DoesNotExist, Gt, Lt (labels); In, NotIn
// with one value (fields: metadata.name only).
struct SelectorRequirement {
  std::string key;
  std::string op;
  std::vector<std::string> values;
  bool operator==(const SelectorRequirement&) const = default;
};

struct SelectorTerm {
  std::vector<SelectorRequirement> match_expressions;
  std::vector<SelectorRequirement> match_fields;
  bool operator==(const SelectorTerm&) const = default;
};

struct Toleration {
  std::string key;  // "" with Exists: every key
  std::string op;   // "Exists" or "Equal" ("" means Equal)
  std::string value;
  std::string effect;  // "" matches every effect
  bool operator==(const Toleration&) const = default;
};

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule, NoExecute
};

// The placement-relevant part of a Pod.
struct PodPlacement {
  std::string uid;
  std::string ns;
  std::string name;
  std::string node_name;  // spec.nodeName
  std::string phase;      // status.phase
  std::map<std::string, std::string> node_selector;
  // spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution, when set
  std::optional<std::vector<SelectorTerm>> required_terms;
  std::vector<Toleration> tolerations;
  // kubelet's types.IsStaticPod: annotation kubernetes.io/config.source other than "api"
  // (a mirror pod in the API carries "file" or "http"); kubelet skips the taint check for these.
  bool static_pod = false;

  bool operator==(const PodPlacement&) const = default;
  std::string id() const { return ns + "/" + name; }
  // Succeeded or Failed: kubelet never admits such a pod again.
  bool terminal() const { return phase == "Succeeded" || phase == "Failed"; }
};

// Error: not an object or no metadata.name. Fields of the wrong type are treated as absent,
// except a malformed affinity, which is an Error (its meaning cannot be guessed).
Result<PodPlacement> parsePodPlacement(const nlohmann::json& pod);

struct NodeFacts {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
};
NodeFacts nodeFacts(const nlohmann::json& node);

struct Verdict {
  bool admitted = true;
  std::string reason;  // "NodeAffinity" | "TaintToleration" (the plugin names kubelet reports)
  std::string detail;  // one line for logs and tests
};

// kubelet's admission of pod on node, as far as labels, name and taints decide it.
Verdict kubeletAdmission(const PodPlacement& pod, const NodeFacts& node);
// The scheduler's filters for a new pod on node (node affinity, NoSchedule/NoExecute taints).
Verdict schedulerFilter(const PodPlacement& pod, const NodeFacts& node);

// spec.nodeSelector AND the required node affinity terms (ORed; an empty term matches nothing;
// a term that does not parse matches nothing).
bool matchesRequiredAffinity(const PodPlacement& pod, const NodeFacts& node);
// v1.Toleration.ToleratesTaint for one toleration list.
bool toleratesTaint(const std::vector<Toleration>& tolerations, const Taint& taint);

// The node label keys the pod's admission reads (nodeSelector and affinity expression keys).
std::set<std::string> labelKeysRead(const PodPlacement& pod);

}  // namespace nodegate::kube
