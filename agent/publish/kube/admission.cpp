#include "publish/kube/admission.h"

#include <cerrno>
#include <cstdlib>

namespace nodegate::kube {
namespace {

using nlohmann::json;

const json* child(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string text(const json& j, const char* key) {
  const json* v = child(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// apimachinery's strconv.ParseInt(s, 10, 64): an optional sign and decimal digits only.
std::optional<long long> parseInt64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (std::size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || !end || *end != '\0') return std::nullopt;
  return v;
}

Result<std::vector<SelectorRequirement>> parseRequirements(const json* list, const char* what) {
  std::vector<SelectorRequirement> out;
  if (!list || list->is_null()) return out;
  if (!list->is_array()) return Error{EINVAL, std::string(what) + " is not a list"};
  for (const auto& e : *list) {
    if (!e.is_object()) return Error{EINVAL, std::string(what) + " holds a non-object"};
    SelectorRequirement r{text(e, "key"), text(e, "operator"), {}};
    if (const json* vals = child(e, "values"); vals && vals->is_array())
      for (const auto& v : *vals) {
        if (!v.is_string()) return Error{EINVAL, std::string(what) + " has a non-string value"};
        r.values.push_back(v.get<std::string>());
      }
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<SelectorTerm>> parseTerms(const json& required) {
  const json* terms = child(required, "nodeSelectorTerms");
  if (!terms || !terms->is_array())
    return Error{EINVAL, "requiredDuringSchedulingIgnoredDuringExecution has no nodeSelectorTerms"};
  std::vector<SelectorTerm> out;
  for (const auto& t : *terms) {
    if (!t.is_object()) return Error{EINVAL, "a nodeSelectorTerm is not an object"};
    auto exprs = parseRequirements(child(t, "matchExpressions"), "matchExpressions");
    if (!exprs) return exprs.error();
    auto fields = parseRequirements(child(t, "matchFields"), "matchFields");
    if (!fields) return fields.error();
    out.push_back({std::move(exprs).value(), std::move(fields).value()});
  }
  return out;
}

// labels.Requirement.Matches with NewRequirement's validation folded in: a requirement that
// would not have parsed makes its whole term match nothing (LazyErrorNodeSelector).
enum class Match { Yes, No, Invalid };

Match labelRequirement(const SelectorRequirement& r, const std::map<std::string, std::string>& ls) {
  auto it = ls.find(r.key);
  const bool has = it != ls.end();
  auto in = [&] {
    for (const auto& v : r.values)
      if (has && v == it->second) return true;
    return false;
  };
  if (r.key.empty()) return Match::Invalid;
  if (r.op == "In" || r.op == "NotIn") {
    if (r.values.empty()) return Match::Invalid;
    bool hit = in();
    return (r.op == "In" ? hit : !hit) ? Match::Yes : Match::No;
  }
  if (r.op == "Exists" || r.op == "DoesNotExist") {
    if (!r.values.empty()) return Match::Invalid;
    return (r.op == "Exists") == has ? Match::Yes : Match::No;
  }
  if (r.op == "Gt" || r.op == "Lt") {
    if (r.values.size() != 1) return Match::Invalid;
    auto want = parseInt64(r.values[0]);
    if (!want) return Match::Invalid;
    if (!has) return Match::No;
    auto got = parseInt64(it->second);
    if (!got) return Match::No;
    return (r.op == "Gt" ? *got > *want : *got < *want) ? Match::Yes : Match::No;
  }
  return Match::Invalid;
}

// nodeSelectorRequirementsAsFieldSelector: In/NotIn with exactly one value; a node has one
// field, metadata.name (any other key reads as "").
Match fieldRequirement(const SelectorRequirement& r, const std::string& node_name) {
  if ((r.op != "In" && r.op != "NotIn") || r.values.size() != 1) return Match::Invalid;
  const std::string actual = r.key == "metadata.name" ? node_name : std::string();
  return (actual == r.values[0]) == (r.op == "In") ? Match::Yes : Match::No;
}

bool termMatches(const SelectorTerm& t, const NodeFacts& node) {
  if (t.match_expressions.empty() && t.match_fields.empty()) return false;
  bool ok = true;
  for (const auto& r : t.match_expressions) {
    Match m = labelRequirement(r, node.labels);
    if (m == Match::Invalid) return false;
    ok = ok && m == Match::Yes;
  }
  for (const auto& r : t.match_fields) {
    Match m = fieldRequirement(r, node.name);
    if (m == Match::Invalid) return false;
    // Fields are only compared when the node has any (a named node always does).
    if (!node.name.empty()) ok = ok && m == Match::Yes;
  }
  return ok;
}

// corev1.FindMatchingUntoleratedTaint over the taints whose effect is in `effects`.
const Taint* untolerated(const PodPlacement& pod, const NodeFacts& node,
                         std::initializer_list<const char*> effects) {
  for (const auto& t : node.taints) {
    bool considered = false;
    for (const char* e : effects) considered = considered || t.effect == e;
    if (considered && !toleratesTaint(pod.tolerations, t)) return &t;
  }
  return nullptr;
}

std::string describe(const Taint& t) {
  return t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect;
}

}  // namespace

Result<PodPlacement> parsePodPlacement(const json& pod) {
  if (!pod.is_object()) return Error{EINVAL, "failed to parse pod: not an object"};
  const json* md = child(pod, "metadata");
  PodPlacement p;
  if (md) {
    p.uid = text(*md, "uid");
    p.ns = text(*md, "namespace");
    p.name = text(*md, "name");
    if (const json* ann = child(*md, "annotations"); ann && ann->is_object()) {
      std::string source = text(*ann, "kubernetes.io/config.source");
      p.static_pod = !source.empty() && source != "api";
    }
  }
  if (p.name.empty()) return Error{EINVAL, "failed to parse pod: no metadata.name"};
  if (const json* st = child(pod, "status")) p.phase = text(*st, "phase");
  const json* spec = child(pod, "spec");
  if (!spec) return p;
  p.node_name = text(*spec, "nodeName");
  if (const json* sel = child(*spec, "nodeSelector"); sel && sel->is_object())
    for (auto it = sel->begin(); it != sel->end(); ++it)
      if (it.value().is_string()) p.node_selector[it.key()] = it.value().get<std::string>();
  if (const json* aff = child(*spec, "affinity")) {
    const json* na = child(*aff, "nodeAffinity");
    const json* req = na ? child(*na, "requiredDuringSchedulingIgnoredDuringExecution") : nullptr;
    if (req && !req->is_null()) {
      auto terms = parseTerms(*req);
      if (!terms)
        return Error{EINVAL, "failed to parse node affinity of pod " + p.ns + "/" + p.name + ": " +
                                 terms.error().message};
      p.required_terms = std::move(terms).value();
    }
  }
  if (const json* tols = child(*spec, "tolerations"); tols && tols->is_array())
    for (const auto& t : *tols)
      if (t.is_object())
        p.tolerations.push_back(
            {text(t, "key"), text(t, "operator"), text(t, "value"), text(t, "effect")});
  return p;
}

NodeFacts nodeFacts(const json& node) {
  NodeFacts f;
  const json* md = child(node, "metadata");
  if (md) {
    f.name = text(*md, "name");
    if (const json* ls = child(*md, "labels"); ls && ls->is_object())
      for (auto it = ls->begin(); it != ls->end(); ++it)
        if (it.value().is_string()) f.labels[it.key()] = it.value().get<std::string>();
  }
  const json* spec = child(node, "spec");
  if (const json* ts = spec ? child(*spec, "taints") : nullptr; ts && ts->is_array())
    for (const auto& t : *ts)
      if (t.is_object()) f.taints.push_back({text(t, "key"), text(t, "value"), text(t, "effect")});
  return f;
}

bool toleratesTaint(const std::vector<Toleration>& tolerations, const Taint& taint) {
  for (const auto& t : tolerations) {
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (!t.key.empty() && t.key != taint.key) continue;
    if (t.op == "Exists") return true;
    if ((t.op.empty() || t.op == "Equal") && t.value == taint.value) return true;
  }
  return false;
}

bool matchesRequiredAffinity(const PodPlacement& pod, const NodeFacts& node) {
  for (const auto& [k, v] : pod.node_selector) {
    auto it = node.labels.find(k);
    if (it == node.labels.end() || it->second != v) return false;
  }
  if (!pod.required_terms) return true;
  for (const auto& t : *pod.required_terms)
    if (termMatches(t, node)) return true;
  return false;
}

Verdict kubeletAdmission(const PodPlacement& pod, const NodeFacts& node) {
  if (!matchesRequiredAffinity(pod, node))
    return {false, "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"};
  if (!pod.node_name.empty() && pod.node_name != node.name)
    return {false, "NodeName", "node(s) didn't match the requested node name"};
  // Kubelet is only interested in NoExecute taints, and not for static pods.
  if (!pod.static_pod)
    if (const Taint* t = untolerated(pod, node, {"NoExecute"}))
      return {false, "TaintToleration", "untolerated taint " + describe(*t)};
  return {};
}

Verdict schedulerFilter(const PodPlacement& pod, const NodeFacts& node) {
  if (!matchesRequiredAffinity(pod, node))
    return {false, "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"};
  if (const Taint* t = untolerated(pod, node, {"NoSchedule", "NoExecute"}))
    return {false, "TaintToleration", "untolerated taint " + describe(*t)};
  return {};
}

std::set<std::string> labelKeysRead(const PodPlacement& pod) {
  std::set<std::string> keys;
  for (const auto& [k, v] : pod.node_selector) keys.insert(k);
  if (pod.required_terms)
    for (const auto& t : *pod.required_terms)
      for (const auto& r : t.match_expressions) keys.insert(r.key);
  return keys;
}

}  // namespace nodegate::kube
