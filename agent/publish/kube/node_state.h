// What nodegate wants on its Node versus what the Node shows, and the smallest patches that
// close the gap. Everything here is pure (no I/O, no clock): the publisher feeds it the
// snapshot, the last Node it observed and the time, and sends whatever comes back.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"
#include "nodegate/snapshot.h"

namespace nodegate::kube {

using Clock = std::chrono::system_clock;

struct PublishSettings {
  std::string node_name;
  std::string prefix = "nodegate.io";
  std::pair<std::string, std::string> gate_label{"nodegate.io/vm-ready", "true"};
  bool taint = false;
  std::set<std::string> required;  // Config::required: these checks decide their condition
};

struct Condition {
  std::string type;
  std::string status;   // "True" | "False" | "Unknown"
  std::string reason;   // CamelCase
  std::string message;  // one line
  bool operator==(const Condition&) const = default;
};

struct Desired {
  std::map<std::string, std::string> labels;   // full keys, gate label included when open
  std::vector<Condition> conditions;           // only those whose probes are in the snapshot
  std::vector<std::string> absent_conditions;  // our condition types with no probe: removed
  bool taint = false;
};

// The condition types nodegate owns and the checks that feed each one (ProbeSpec::condition).
struct ConditionSource {
  std::string type;
  std::vector<std::string> checks;
};
const std::vector<ConditionSource>& conditionSources();

std::string ownedLabelsAnnotation(const std::string& prefix);  // "<prefix>/owned-labels"
std::string taintKey(const std::string& prefix);               // "<prefix>/not-ready"

// Label values must match Kubernetes' syntax (<= 63 chars of [A-Za-z0-9-_.], alphanumeric at
// both ends); probes report free text such as "arm64", so anything else is folded to '-'.
std::string sanitizeLabelValue(const std::string& value);
bool validLabelName(const std::string& name);
// The API server's syntax for a label key ([DNS-1123 subdomain "/"] name) and value (empty or a
// name), as apimachinery's IsQualifiedName and IsValidLabelValue check them.
bool validLabelKey(const std::string& key);
bool validLabelValue(const std::string& value);
// Domains whose labels belong to others (Kubernetes, KubeVirt; DESIGN.md): nodegate never takes
// one, or a subdomain of one, as its prefix or its gate label's domain.
bool reservedDomain(const std::string& domain);
// --prefix and --gate-label (key and value already split) checked at start; the error names the
// flag and the value, so a typo stops the agent instead of earning 422 answers forever.
Result<void> checkLabelFlags(const std::string& prefix,
                             const std::pair<std::string, std::string>& gate_label);

// The labels nodegate may own: those under its prefix, and its gate label. The ownership
// annotation is written by us but editable by anyone who may annotate the Node, so nothing it
// names outside these is ever touched.
bool ownableLabel(const std::string& key, const PublishSettings& settings);

// What the Node says about the labels nodegate may write.
struct Ownership {
  std::set<std::string> owned;      // in the annotation and ownable: ours to change or remove
  std::set<std::string> ignored;    // in the annotation but not ownable: never touched
  bool gate_label_foreign = false;  // the gate label is on the Node and we did not write it
  struct Problem {
    std::string reason;  // CamelCase, the event's reason
    std::string note;    // one line for the log and the event
  };
  std::vector<Problem> problems(const PublishSettings& settings) const;
};
Ownership ownership(const nlohmann::json& node, const PublishSettings& settings);

Desired desiredState(const Snapshot& snap, const PublishSettings& settings);

// JSON merge patch for /api/v1/nodes/<name>: labels plus the ownership annotation, and, only
// when the taint must change, spec.taints with metadata.resourceVersion as the precondition
// (taints have no merge key, so the whole list is written and must not race another writer).
// Only ownable labels are written or removed (ownership()): an annotation key we may not own is
// dropped from the annotation and its label left as it is; a foreign gate label is neither
// written, removed nor recorded. nullopt: the Node already shows what we want.
std::optional<nlohmann::json> nodePatch(const Desired& want, const nlohmann::json& node,
                                        const PublishSettings& settings);

// Strategic merge patch for /api/v1/nodes/<name>/status (conditions merge by type). All our
// conditions are written together with a fresh heartbeat whenever one's status or reason
// changed (a message-only change waits for the next write) or a heartbeat is due (heartbeat == 0:
// never for its own sake); lastTransitionTime survives an unchanged status. nullopt: nothing to
// write.
std::optional<nlohmann::json> statusPatch(const Desired& want, const nlohmann::json& node,
                                          Clock::time_point now, std::chrono::seconds heartbeat);

// When the next heartbeat falls due (time_point::max() when never or nothing is ours yet).
Clock::time_point nextHeartbeat(const Desired& want, const nlohmann::json& node,
                                std::chrono::seconds heartbeat);

// A condition whose status differs from the one on the Node. A condition appearing for the
// first time is a transition only when it is not True (a healthy first report is not news).
struct Transition {
  Condition to;
  std::string from;  // previous status, "" when the condition was absent
};
std::vector<Transition> transitions(const Desired& want, const nlohmann::json& node);

}  // namespace nodegate::kube
