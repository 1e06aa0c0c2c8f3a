#include "publish/kube/node_state.h"

#include <algorithm>
#include <cctype>

#include "publish/rfc3339.h"
#include "text.h"

#include "nodegate/registry.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

// Conditions carry a one-line message; Kubernetes caps event notes at 1 KiB, keep both short.
constexpr std::size_t kMaxMessage = 1000;

std::string oneLine(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() > kMaxMessage) s = s.substr(0, kMaxMessage - 3) + "...";
  return s;
}

bool alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

const json* path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string stringAt(const json& j, std::initializer_list<const char*> keys) {
  const json* v = path(j, keys);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::map<std::string, std::string> stringMap(const json& j,
                                             std::initializer_list<const char*> keys) {
  std::map<std::string, std::string> out;
  const json* v = path(j, keys);
  if (!v || !v->is_object()) return out;
  for (auto it = v->begin(); it != v->end(); ++it)
    if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
  return out;
}

std::set<std::string> splitKeys(const std::string& text) {
  std::set<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string k = text.substr(start, comma - start);
    if (!k.empty()) out.insert(k);
    start = comma + 1;
  }
  return out;
}

std::string joinKeys(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k;
  }
  return out;
}

// Our condition as the Node shows it, or nullptr.
const json* observedCondition(const json& node, const std::string& type) {
  const json* conds = path(node, {"status", "conditions"});
  if (!conds || !conds->is_array()) return nullptr;
  for (const auto& c : *conds)
    if (c.is_object() && c.value("type", "") == type) return &c;
  return nullptr;
}

// Status and reason decide whether a write is due. Messages carry live detail ("unsynchronised
// for 12 s"); rewriting the Node each time one changes would defeat change-only publishing, so
// a new message rides along with the next status change or heartbeat.
bool sameAsObserved(const Condition& want, const json* seen) {
  return seen && seen->value("status", "") == want.status &&
         seen->value("reason", "") == want.reason;
}

Condition evaluate(const ConditionSource& src, const std::vector<const CheckState*>& present,
                   const std::set<std::string>& required) {
  std::vector<const CheckState*> deciding;
  for (const auto* c : present)
    if (required.count(c->result.check)) deciding.push_back(c);
  // With no required check in the group, every present one decides (storage, DNS, time are
  // not gate material by default but their conditions must still mean something).
  const bool strict = !deciding.empty();
  if (!strict) deciding = present;

  Condition out{src.type, "True", "", ""};
  std::vector<const CheckState*> bad;
  bool any_false = false;
  for (const auto* c : deciding) {
    Status s = c->result.status;
    // A required check must PASS (as for the gate); an optional one only must not FAIL.
    bool is_bad = strict ? s != Status::Pass : (s == Status::Fail || s == Status::Unknown);
    if (!is_bad) continue;
    bad.push_back(c);
    if (s != Status::Unknown) any_false = true;
  }
  if (bad.empty()) {
    out.reason = "ChecksPassed";
    std::string names;
    for (const auto* c : deciding)
      if (c->result.status == Status::Pass) names += (names.empty() ? "" : ", ") + c->result.check;
    if (names.empty()) names = "no check";
    out.message = names + " pass";
    // Degraded but usable checks are worth a mention without changing the status.
    for (const auto* c : present)
      if (c->result.status != Status::Pass)
        out.message += "; " + c->result.check + " " + std::string(toString(c->result.status)) +
                       ": " + c->result.message;
    out.message = oneLine(out.message);
    return out;
  }
  out.status = any_false ? "False" : "Unknown";
  // The first bad check that decided the status names the reason.
  const CheckState* first = bad.front();
  if (any_false)
    for (const auto* c : bad)
      if (c->result.status != Status::Unknown) {
        first = c;
        break;
      }
  out.reason = first->result.reason.empty() ? "CheckFailed" : first->result.reason;
  std::string msg;
  for (const auto* c : bad) {
    if (!msg.empty()) msg += "; ";
    msg +=
        c->result.check + " " + std::string(toString(c->result.status)) + ": " + c->result.message;
  }
  out.message = oneLine(msg);
  return out;
}

}  // namespace

const std::vector<ConditionSource>& conditionSources() {
  // From the probes' specs (ProbeSpec::condition), in registry order.
  static const std::vector<ConditionSource> kSources = [] {
    std::vector<ConditionSource> out;
    for (auto& [type, checks] : configSchema().conditions()) out.push_back({type, checks});
    return out;
  }();
  return kSources;
}

std::string ownedLabelsAnnotation(const std::string& prefix) {
  return prefix + "/owned-labels";
}
std::string taintKey(const std::string& prefix) {
  return prefix + "/not-ready";
}

std::string sanitizeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) out += (alnum(c) || c == '-' || c == '_' || c == '.') ? c : '-';
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && !alnum(out.back())) out.pop_back();
  std::size_t lead = 0;
  while (lead < out.size() && !alnum(out[lead])) ++lead;
  return out.substr(lead);
}

bool validLabelName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

namespace {

// RFC 1123 subdomain as Kubernetes checks it: lowercase alphanumerics, '-' and '.', each
// dot-separated part starting and ending alphanumeric, 253 characters at most.
bool validSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  for (;;) {
    auto dot = s.find('.', start);
    std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (part.empty() || !lower_alnum(part.front()) || !lower_alnum(part.back())) return false;
    if (!std::all_of(part.begin(), part.end(), [&](char c) { return lower_alnum(c) || c == '-'; }))
      return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool underDomain(const std::string& key, const std::string& prefix) {
  return key.size() > prefix.size() + 1 && key.compare(0, prefix.size(), prefix) == 0 &&
         key[prefix.size()] == '/';
}

}  // namespace

bool validLabelKey(const std::string& key) {
  auto slash = key.find('/');
  if (slash == std::string::npos) return validLabelName(key);
  return validSubdomain(key.substr(0, slash)) && validLabelName(key.substr(slash + 1));
}

bool validLabelValue(const std::string& value) {
  return value.empty() || validLabelName(value);
}

bool reservedDomain(const std::string& domain) {
  for (const std::string d : {"kubernetes.io", "k8s.io", "kubevirt.io"})
    if (domain == d ||
        (domain.size() > d.size() && domain.compare(domain.size() - d.size(), d.size(), d) == 0 &&
         domain[domain.size() - d.size() - 1] == '.'))
      return true;
  return false;
}

Result<void> checkLabelFlags(const std::string& prefix,
                             const std::pair<std::string, std::string>& gate_label) {
  auto bad = [](const std::string& flag, const std::string& value, const std::string& why) {
    return Error{EINVAL, "invalid value \"" + value + "\" for " + flag + ": " + why};
  };
  if (!validSubdomain(prefix))
    return bad("--prefix", prefix,
               "want a DNS subdomain (lowercase letters, digits, '-' and '.', e.g. nodegate.io)");
  if (reservedDomain(prefix))
    return bad("--prefix", prefix,
               "kubernetes.io, k8s.io and kubevirt.io (and their subdomains) belong to others");
  const auto& [key, value] = gate_label;
  const std::string spec = key + "=" + value;
  if (!validLabelKey(key))
    return bad("--gate-label", spec,
               "the key must be a label key ([DNS subdomain/]name, name up to 63 of "
               "[A-Za-z0-9-_.] starting and ending alphanumeric)");
  if (!validLabelValue(value))
    return bad("--gate-label", spec,
               "the value must be empty or up to 63 of [A-Za-z0-9-_.] starting and ending "
               "alphanumeric");
  if (auto slash = key.find('/');
      slash != std::string::npos && reservedDomain(key.substr(0, slash)))
    return bad("--gate-label", spec,
               "kubernetes.io, k8s.io and kubevirt.io (and their subdomains) belong to others");
  return {};
}

bool ownableLabel(const std::string& key, const PublishSettings& settings) {
  return key == settings.gate_label.first || underDomain(key, settings.prefix);
}

Ownership ownership(const json& node, const PublishSettings& settings) {
  Ownership out;
  const std::string ann_key = ownedLabelsAnnotation(settings.prefix);
  for (auto& k : splitKeys(stringAt(node, {"metadata", "annotations", ann_key.c_str()})))
    (ownableLabel(k, settings) ? out.owned : out.ignored).insert(k);
  const auto labels = stringMap(node, {"metadata", "labels"});
  out.gate_label_foreign =
      labels.count(settings.gate_label.first) && !out.owned.count(settings.gate_label.first);
  return out;
}

std::vector<Ownership::Problem> Ownership::problems(const PublishSettings& settings) const {
  std::vector<Problem> out;
  if (!ignored.empty()) {
    std::string keys;
    for (const auto& k : ignored) keys += (keys.empty() ? "" : ",") + k;
    out.push_back({"OwnedLabelsIgnored", "annotation " + ownedLabelsAnnotation(settings.prefix) +
                                             " names labels outside what nodegate may own (" +
                                             keys + "): ignored, never changed"});
  }
  if (gate_label_foreign)
    out.push_back({"GateLabelNotOwned",
                   "gate label " + settings.gate_label.first +
                       " is on the node but nodegate did not write it: left alone and the gate "
                       "is not published (remove the label or choose another --gate-label)"});
  return out;
}

Desired desiredState(const Snapshot& snap, const PublishSettings& settings) {
  Desired d;
  for (const auto& c : snap.checks)
    for (const auto& [name, value] : c.result.labels)
      if (validLabelName(name)) d.labels[settings.prefix + "/" + name] = sanitizeLabelValue(value);
  if (snap.gate_open) d.labels[settings.gate_label.first] = settings.gate_label.second;

  for (const auto& src : conditionSources()) {
    std::vector<const CheckState*> present;
    for (const auto& name : src.checks)
      if (const auto* c = snap.find(name)) present.push_back(c);
    if (present.empty())
      d.absent_conditions.push_back(src.type);
    else
      d.conditions.push_back(evaluate(src, present, settings.required));
  }
  d.taint = settings.taint && !snap.gate_open;
  return d;
}

std::optional<json> nodePatch(const Desired& want, const json& node,
                              const PublishSettings& settings) {
  json patch = json::object();
  const auto labels = stringMap(node, {"metadata", "labels"});
  const std::string ann_key = ownedLabelsAnnotation(settings.prefix);
  const std::string owned_text = stringAt(node, {"metadata", "annotations", ann_key.c_str()});
  const Ownership own = ownership(node, settings);

  std::map<std::string, std::string> writing = want.labels;
  if (own.gate_label_foreign) writing.erase(settings.gate_label.first);
  json lp = json::object();
  for (const auto& [k, v] : writing) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) lp[k] = v;
  }
  // Only keys we recorded as ours may be removed: another writer's label under our prefix
  // is not in the annotation and stays.
  for (const auto& k : own.owned)
    if (!writing.count(k) && labels.count(k)) lp[k] = nullptr;
  if (!lp.empty()) patch["metadata"]["labels"] = lp;
  const std::string new_owned = joinKeys(writing);
  if (new_owned != owned_text) patch["metadata"]["annotations"][ann_key] = new_owned;

  // nodegate owns one taint, <prefix>/not-ready:NoSchedule (taints are identified by key and
  // effect, as the API server's uniqueness rule and node-readiness-controller have it). Every
  // other entry, the same key with another effect included, is someone else's and is written
  // back as it was: editing it would fight its owner.
  const std::string key = taintKey(settings.prefix);
  json taints = json::array();
  bool have = false;
  if (const json* t = path(node, {"spec", "taints"}); t && t->is_array()) {
    for (const auto& e : *t) {
      if (e.is_object() && e.value("key", "") == key && e.value("effect", "") == "NoSchedule") {
        have = true;
        continue;
      }
      taints.push_back(e);
    }
  }
  if (have != want.taint) {
    if (want.taint) taints.push_back({{"key", key}, {"effect", "NoSchedule"}});
    patch["spec"]["taints"] = taints;
    patch["metadata"]["resourceVersion"] = stringAt(node, {"metadata", "resourceVersion"});
  }
  if (patch.empty()) return std::nullopt;
  return patch;
}

std::optional<json> statusPatch(const Desired& want, const json& node, Clock::time_point now,
                                std::chrono::seconds heartbeat) {
  bool changed = false;
  for (const auto& c : want.conditions)
    if (!sameAsObserved(c, observedCondition(node, c.type))) changed = true;
  bool stale_present = false;
  for (const auto& type : want.absent_conditions)
    if (observedCondition(node, type)) stale_present = true;
  if (!changed && !stale_present &&
      (heartbeat.count() == 0 || now < nextHeartbeat(want, node, heartbeat)))
    return std::nullopt;

  const std::string stamp = formatRfc3339(now);
  json conds = json::array();
  for (const auto& c : want.conditions) {
    const json* seen = observedCondition(node, c.type);
    std::string transition = stamp;
    if (seen && seen->value("status", "") == c.status) {
      std::string kept = seen->value("lastTransitionTime", "");
      if (!kept.empty()) transition = kept;
    }
    conds.push_back({{"type", c.type},
                     {"status", c.status},
                     {"reason", c.reason},
                     {"message", c.message},
                     {"lastHeartbeatTime", stamp},
                     {"lastTransitionTime", transition}});
  }
  for (const auto& type : want.absent_conditions)
    if (observedCondition(node, type)) conds.push_back({{"$patch", "delete"}, {"type", type}});
  return json{{"status", {{"conditions", conds}}}};
}

Clock::time_point nextHeartbeat(const Desired& want, const json& node,
                                std::chrono::seconds heartbeat) {
  auto due = Clock::time_point::max();
  if (heartbeat.count() == 0) return due;
  for (const auto& c : want.conditions) {
    const json* seen = observedCondition(node, c.type);
    if (!seen) continue;
    auto t = parseApiTime(seen->value("lastHeartbeatTime", ""));
    // A missing or unreadable heartbeat is due now.
    Clock::time_point at = t ? *t + heartbeat : Clock::time_point{};
    due = std::min(due, at);
  }
  return due;
}

std::vector<Transition> transitions(const Desired& want, const json& node) {
  std::vector<Transition> out;
  for (const auto& c : want.conditions) {
    const json* seen = observedCondition(node, c.type);
    std::string from = seen ? seen->value("status", "") : "";
    if (from == c.status) continue;
    if (!seen && c.status == "True") continue;
    out.push_back({c, from});
  }
  return out;
}

}  // namespace nodegate::kube
