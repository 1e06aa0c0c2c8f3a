#include "kubevirt_node.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "text.h"

namespace nodegate {
namespace {

using nlohmann::json;

constexpr const char* kResourcePrefix = "devices.kubevirt.io/";
constexpr const char* kPodViewHint =
    "the agent lists and watches pods with fieldSelector spec.nodeName=<node>: check its RBAC "
    "(pods get/list/watch, chart value rbac.readPods) and its log";

const json* at(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::optional<std::string> stringAt(const json& j, std::initializer_list<const char*> keys) {
  const json* v = at(j, keys);
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::map<std::string, std::string> kubevirtResources(const json& node, const char* field) {
  std::map<std::string, std::string> out;
  const json* list = at(node, {"status", field});
  if (!list || !list->is_object()) return out;
  for (auto it = list->begin(); it != list->end(); ++it)
    if (it.key().rfind(kResourcePrefix, 0) == 0 && it.value().is_string())
      out[it.key().substr(std::string_view(kResourcePrefix).size())] =
          it.value().get<std::string>();
  return out;
}

// The three devices KubeVirt's generic device plugins serve, and the check that tests each.
struct DeviceResource {
  const char* resource;  // below devices.kubevirt.io/
  const char* check;
  const char* path;
  Status when_broken;  // how bad "advertised but unusable" is
};
constexpr DeviceResource kDevices[] = {
    {"kvm", "kvm-device", "/dev/kvm", Status::Fail},
    {"tun", "tun", "/dev/net/tun", Status::Fail},
    // Without vhost-net QEMU falls back to userspace virtio-net: slow, not broken.
    {"vhost-net", "vhost-net", "/dev/vhost-net", Status::Warn},
};

struct Finding {
  Status status;
  std::string reason, message, hint;
};

std::string quantityText(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "absent" : it->second;
}

std::optional<long long> quantityOf(const std::map<std::string, std::string>& m,
                                    const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return parseQuantityCount(it->second);
}

// Each device: does KubeVirt offer what nodegate found works, and only that?
void compareDevices(const KubeVirtNodeInputs& in, std::vector<Finding>& out, CheckResult& r) {
  const KubeVirtNodeView& node = *in.facts.node;
  for (const auto& d : kDevices) {
    const std::string res = d.resource;
    const std::string name = std::string(kResourcePrefix) + res;
    auto cap = quantityOf(node.capacity, res);
    auto alloc = quantityOf(node.allocatable, res);
    r.evidence.push_back({"node status " + name, "capacity " + quantityText(node.capacity, res) +
                                                     ", allocatable " +
                                                     quantityText(node.allocatable, res)});
    // Named in full: docs/metrics.md's test finds every family in the sources.
    for (auto [family, field, value] :
         {std::tuple{"nodegate_kubevirt_device_capacity", "capacity", cap},
          std::tuple{"nodegate_kubevirt_device_allocatable", "allocatable", alloc}})
      if (value)
        r.metrics.push_back(
            {family,
             std::string("KubeVirt's device plugin resource in the Node's status.") + field +
                 ", by device.",
             {{"device", res}},
             static_cast<double>(*value)});

    auto v = in.devices.find(d.check);
    if (v == in.devices.end() || v->second.status == Status::Unknown) {
      r.evidence.push_back({d.check, v == in.devices.end() ? "not run this cycle: not compared"
                                                           : "UNKNOWN: not compared"});
      // Agreement is never assumed: a device nodegate could not judge leaves the check UNKNOWN
      // unless something else KubeVirt shows is already wrong.
      out.push_back(
          {Status::Unknown, "DeviceNotCompared",
           "KubeVirt's " + name + " is not compared: " + d.check +
               (v == in.devices.end() ? " has not run" : " is UNKNOWN (" + v->second.reason + ")"),
           "see " + std::string(d.check) +
               "'s own result and hint (`nodegate check`, "
               "the page): once it can judge " +
               d.path + ", so can this check"});
      continue;
    }
    const CheckResult& dev = v->second;
    auto label = dev.labels.find(res);
    const bool usable =
        label != dev.labels.end() ? label->second == "true" : dev.status == Status::Pass;
    r.evidence.push_back({d.check, std::string(toString(dev.status)) + " " + dev.reason});
    const bool offered = alloc && *alloc > 0;
    if (usable && !offered) {
      const std::string works = d.path + std::string(" works (") + d.check + " " +
                                std::string(toString(dev.status)) + ")";
      if (!node.capacity.count(res) && !node.allocatable.count(res))
        out.push_back({Status::Fail, "DevicePluginNotRegistered",
                       works + " but the Node offers no " + name +
                           ": KubeVirt's device plugin never registered with kubelet",
                       "restart virt-handler on this node (kubectl -n <kubevirt namespace> delete "
                       "pod <virt-handler pod>): it registers its device plugins at start; if it "
                       "keeps failing, its log says why (\"Error starting " +
                           res + " device plugin\")"});
      else
        out.push_back({Status::Fail, "DevicePluginUnhealthy",
                       works + " but KubeVirt offers " +
                           (alloc ? std::to_string(*alloc) : quantityText(node.allocatable, res)) +
                           " of capacity " + quantityText(node.capacity, res) + " " + name +
                           ": its device plugin marked the device unhealthy",
                       "restart virt-handler on this node: its plugin judged " +
                           std::string(d.path) +
                           " by an fsnotify watch and does not recover on its own once it missed "
                           "the device coming back; new VMs stay Pending with \"Insufficient " +
                           name + "\" until then"});
    } else if (!usable && offered) {
      out.push_back(
          {d.when_broken, "DeviceAdvertisedButUnusable",
           "KubeVirt offers " + std::to_string(*alloc) + " " + name + " but " + d.check + " is " +
               std::string(toString(dev.status)) + " (" + dev.reason +
               "): VMs KubeVirt schedules here will not get a working " + d.path,
           dev.hint.empty() ? "fix " + std::string(d.check) + " first (see its hint)" : dev.hint});
    }
  }
}

Evidence staleViewEvidence(const KubeVirtFacts& f) {
  return {"pods on this node", "the last complete view: the watch broke a moment ago (" +
                                   f.pods_error + ") and is being re-established"};
}

void checkHandlers(const KubeVirtNodeInputs& in, std::vector<Finding>& out, CheckResult& r) {
  const auto& f = in.facts;
  if (!f.pods_complete) {
    r.evidence.push_back({"virt-handler pod", "pod view incomplete: " + f.pods_error});
    out.push_back({Status::Unknown, "PodViewIncomplete",
                   "the pods on this node are not known (" + f.pods_error +
                       "), so whether virt-handler runs here is not known",
                   kPodViewHint});
    return;
  }
  if (f.pods_stale) r.evidence.push_back(staleViewEvidence(f));
  bool any_ready = false;
  for (const auto& h : f.handlers) {
    any_ready = any_ready || (h.ready && !h.deleting);
    r.evidence.push_back(
        {"virt-handler pod " + h.name,
         h.phase +
             (h.ready
                  ? ", Ready"
                  : ", not Ready" +
                        std::string(h.ready_detail.empty() ? "" : " (" + h.ready_detail + ")")) +
             ", " + std::to_string(h.restarts) + " restarts" +
             (h.deleting ? ", terminating" : "")});
  }
  r.metrics.push_back({"nodegate_kubevirt_handler_ready",
                       "1 when a virt-handler pod on this node is Ready, else 0.",
                       {},
                       any_ready ? 1.0 : 0.0});
  if (f.handlers.empty())
    out.push_back({Status::Fail, "VirtHandlerMissing",
                   "the Node carries KubeVirt's resources or labels but no virt-handler pod runs "
                   "on it: nothing manages VMs here or keeps the device plugins registered",
                   "check the virt-handler DaemonSet (kubectl -n <kubevirt namespace> get ds "
                   "virt-handler) and why it has no pod here: spec.workloads.nodePlacement, a "
                   "taint it does not tolerate, or the pod failing to schedule"});
  else if (!any_ready)
    out.push_back({Status::Fail, "VirtHandlerNotReady",
                   "virt-handler on this node is not Ready (" + f.handlers.front().name + ": " +
                       f.handlers.front().phase + ")",
                   "kubectl -n <kubevirt namespace> logs " +
                       f.handlers.front().name.substr(f.handlers.front().name.find('/') + 1) +
                       " -c virt-handler; kubectl describe pod shows why it is not Ready"});
}

void checkHeartbeat(const KubeVirtNodeInputs& in, std::vector<Finding>& out, CheckResult& r,
                    bool* stale) {
  const KubeVirtNodeView& node = *in.facts.node;
  if (!node.heartbeat) {
    r.evidence.push_back({"annotation kubevirt.io/heartbeat", "absent"});
    out.push_back({Status::Warn, "HeartbeatMissing",
                   "the Node has no kubevirt.io/heartbeat annotation: virt-handler has not "
                   "reported from this node yet",
                   "a virt-handler that just started writes it within seconds; otherwise see "
                   "virt-handler's log on this node"});
    return;
  }
  auto t = parseApiTime(*node.heartbeat);
  if (!t) {
    r.evidence.push_back({"annotation kubevirt.io/heartbeat", *node.heartbeat + " (unreadable)"});
    out.push_back({Status::Warn, "HeartbeatUnreadable",
                   "kubevirt.io/heartbeat is not a time: \"" + *node.heartbeat + "\"",
                   "something other than virt-handler wrote the annotation; virt-handler "
                   "rewrites it at its next heartbeat"});
    return;
  }
  const double age = std::chrono::duration<double>(in.now - *t).count();
  r.metrics.push_back({"nodegate_kubevirt_heartbeat_age_seconds",
                       "Age of virt-handler's kubevirt.io/heartbeat annotation on this Node.",
                       {},
                       std::max(0.0, age)});
  r.evidence.push_back(
      {"annotation kubevirt.io/heartbeat",
       *node.heartbeat + " (" + std::to_string(static_cast<long long>(age)) + " s ago)"});
  if (age > static_cast<double>(in.heartbeat_stale.count())) {
    *stale = true;
    out.push_back({Status::Fail, "HeartbeatStale",
                   "virt-handler's heartbeat is " + std::to_string(static_cast<long long>(age)) +
                       " s old (virt-handler writes it every 1-2 min; virt-controller marks the "
                       "node unschedulable after 5 min)",
                   "virt-handler on this node is down, stuck or cannot reach the API server: see "
                   "its pod status and log"});
  }
}

void checkSchedulable(const KubeVirtNodeInputs& in, bool stale, std::vector<Finding>& out,
                      CheckResult& r) {
  const auto& s = in.facts.node->schedulable;
  r.evidence.push_back({"label kubevirt.io/schedulable", s ? *s : "absent"});
  if (s && *s == "true") return;
  if (!s) {
    out.push_back({Status::Fail, "NotMarkedSchedulable",
                   "the Node has no kubevirt.io/schedulable label, which every virt-launcher pod "
                   "selects: no VM can be scheduled here",
                   "virt-handler sets it on its first heartbeat; see virt-handler on this node"});
    return;
  }
  out.push_back({Status::Fail, "MarkedUnschedulable",
                 "KubeVirt marked the node kubevirt.io/schedulable=" + *s +
                     ": no new VM is scheduled here" +
                     (stale ? " (virt-controller did: the heartbeat is stale)"
                            : " (virt-handler does until its device plugins are initialised)"),
                 stale ? "bring virt-handler on this node back (see HeartbeatStale)"
                       : "see virt-handler's log on this node for its device plugins; restarting "
                         "it re-registers them"});
}

}  // namespace

KubeVirtNodeView kubevirtNodeView(const json& node) {
  KubeVirtNodeView v;
  v.capacity = kubevirtResources(node, "capacity");
  v.allocatable = kubevirtResources(node, "allocatable");
  v.schedulable = stringAt(node, {"metadata", "labels", "kubevirt.io/schedulable"});
  v.heartbeat = stringAt(node, {"metadata", "annotations", "kubevirt.io/heartbeat"});
  return v;
}

Result<KubeVirtNodeView> parseKubeVirtNode(std::string_view node_json) {
  json j = json::parse(node_json, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{EINVAL, "failed to parse node: not a JSON object"};
  return kubevirtNodeView(j);
}

bool isVirtHandlerPod(const json& pod) {
  auto v = stringAt(pod, {"metadata", "labels", "kubevirt.io"});
  return v && *v == "virt-handler";
}

VirtHandlerPod virtHandlerPod(const json& pod) {
  VirtHandlerPod h;
  h.name = stringAt(pod, {"metadata", "namespace"}).value_or("") + "/" +
           stringAt(pod, {"metadata", "name"}).value_or("");
  h.phase = stringAt(pod, {"status", "phase"}).value_or("");
  h.deleting = at(pod, {"metadata", "deletionTimestamp"}) != nullptr;
  if (const json* conds = at(pod, {"status", "conditions"}); conds && conds->is_array())
    for (const auto& c : *conds) {
      if (!c.is_object() || c.value("type", "") != "Ready") continue;
      h.ready = c.value("status", "") == "True";
      if (!h.ready) {
        std::string reason = c.value("reason", ""), message = c.value("message", "");
        h.ready_detail = reason + (reason.empty() || message.empty() ? "" : ": ") + message;
      }
    }
  if (const json* cs = at(pod, {"status", "containerStatuses"}); cs && cs->is_array())
    for (const auto& c : *cs)
      if (c.is_object() && c.contains("restartCount") && c["restartCount"].is_number_integer())
        h.restarts += c["restartCount"].get<int>();
  return h;
}

std::optional<long long> parseQuantityCount(std::string_view q) {
  q = trim(q);
  std::size_t i = 0;
  while (i < q.size() && ((q[i] >= '0' && q[i] <= '9') || q[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  const std::string number(q.substr(0, i));
  if (number.find('.') != number.rfind('.') || number == ".") return std::nullopt;
  const std::string_view suffix = q.substr(i);
  static const std::pair<std::string_view, double> kSuffixes[] = {{"", 1},
                                                                  {"k", 1e3},
                                                                  {"M", 1e6},
                                                                  {"G", 1e9},
                                                                  {"T", 1e12},
                                                                  {"P", 1e15},
                                                                  {"E", 1e18},
                                                                  {"Ki", 1024.0},
                                                                  {"Mi", 1048576.0},
                                                                  {"Gi", 1073741824.0},
                                                                  {"Ti", 1099511627776.0},
                                                                  {"Pi", 1125899906842624.0},
                                                                  {"Ei", 1152921504606846976.0}};
  double scale = 0;
  for (const auto& [s, f] : kSuffixes)
    if (suffix == s) scale = f;
  if (scale == 0 && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    auto exp = parseU64(suffix.substr(1));
    if (exp && *exp <= 18) scale = std::pow(10.0, static_cast<double>(*exp));
  }
  if (scale == 0) return std::nullopt;
  const double v = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(v) || v > 9e18 || v != std::floor(v)) return std::nullopt;
  return static_cast<long long>(v);
}

CheckResult evaluateKubeVirtNode(const KubeVirtNodeInputs& in) {
  const auto& f = in.facts;
  if (!f.node)
    return makeResult(kKubeVirtNodeCheck, Status::Unknown, "NodeNotRead",
                      "the Node object has not been read from the API" +
                          (f.node_error.empty() ? std::string() : ": " + f.node_error),
                      "see the agent's log for its API connection (nodes get/watch)");
  const KubeVirtNodeView& node = *f.node;
  const bool traces = !node.capacity.empty() || !node.allocatable.empty() || node.schedulable ||
                      node.heartbeat || !f.handlers.empty();
  if (!traces && !f.pods_complete)
    return makeResult(
        kKubeVirtNodeCheck, Status::Unknown, "PodViewIncomplete",
        "the Node shows nothing of KubeVirt, but the pods on this node are not known (" +
            f.pods_error + "): whether virt-handler runs here is not known",
        kPodViewHint);
  if (!traces) {
    CheckResult r = makeResult(kKubeVirtNodeCheck, Status::Pass, "KubeVirtNotInstalled",
                               "KubeVirt is not installed on this node: no devices.kubevirt.io "
                               "resources, no kubevirt.io/schedulable label, no virt-handler pod");
    r.evidence.push_back({"node", "no KubeVirt resources, labels or annotations"});
    r.evidence.push_back({"pods on this node", "no virt-handler pod"});
    if (f.pods_stale) r.evidence.push_back(staleViewEvidence(f));
    return r;
  }

  CheckResult r;
  std::vector<Finding> findings;
  compareDevices(in, findings, r);
  checkHandlers(in, findings, r);
  bool stale = false;
  checkHeartbeat(in, findings, r, &stale);
  checkSchedulable(in, stale, findings, r);

  if (findings.empty()) {
    auto alloc = [&](const char* res) { return quantityText(node.allocatable, res); };
    CheckResult ok = makeResult(kKubeVirtNodeCheck, Status::Pass, "Agrees",
                                "KubeVirt's view agrees with nodegate's: allocatable kvm " +
                                    alloc("kvm") + ", tun " + alloc("tun") + ", vhost-net " +
                                    alloc("vhost-net") + "; virt-handler Ready; schedulable");
    ok.evidence = std::move(r.evidence);
    ok.metrics = std::move(r.metrics);
    return ok;
  }
  // The worst finding names the result; the message lists them all.
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return severity(a.status) > severity(b.status);
  });
  const Finding& top = findings.front();
  std::string message;
  for (const auto& x : findings) message += (message.empty() ? "" : "; ") + x.message;
  CheckResult out = makeResult(kKubeVirtNodeCheck, top.status, top.reason, message, top.hint);
  out.evidence = std::move(r.evidence);
  out.metrics = std::move(r.metrics);
  return out;
}

CheckResult KubeVirtNodeProbe::run(const ProbeContext& ctx) {
  if (!source_)
    return makeResult(kKubeVirtNodeCheck, Status::Unknown, "NoApiConnection",
                      "KubeVirt's view of this node is in the Kubernetes API, and this run has no "
                      "connection to it",
                      "run the agent with an API connection (--kube auto or kubeconfig, not none); "
                      "`nodegate check` never has one: see the agent's /api/v1/checks");
  KubeVirtNodeInputs in;
  in.facts = source_->facts();
  for (const auto& d : kDevices)
    if (const CheckResult* r = ctx.read(d.check)) in.devices.emplace(d.check, *r);
  in.now = std::chrono::system_clock::now();
  in.heartbeat_stale = std::chrono::seconds(
      static_cast<long long>(ctx.config.number(kKubeVirtNodeHeartbeatStaleSetting)));
  return evaluateKubeVirtNode(in);
}

}  // namespace nodegate
