#include "kube/pod_ledger.h"

#include <algorithm>

namespace nodegate::kube {
namespace {

using nlohmann::json;

std::string field(const json& obj, const char* a, const char* b) {
  auto it = obj.find(a);
  if (it == obj.end() || !it->is_object()) return {};
  auto v = it->find(b);
  return v != it->end() && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace

bool PodLedger::Record::operator==(const Record& o) const {
  return id == o.id && placement == o.placement && handler == o.handler && dns == o.dns;
}

std::optional<VmiDnsConfig> launcherDnsConfig(const json& pod) {
  if (!pod.is_object() || field(pod, "metadata", "namespace").empty()) return std::nullopt;
  const json& meta = pod["metadata"];
  auto labels = meta.find("labels");
  if (labels == meta.end() || !labels->is_object() ||
      labels->value("kubevirt.io", json()) != json("virt-launcher"))
    return std::nullopt;
  std::string vmi;
  if (auto owners = meta.find("ownerReferences"); owners != meta.end() && owners->is_array())
    for (const auto& o : *owners)
      if (o.is_object() && o.value("kind", json()) == json("VirtualMachineInstance") &&
          o.value("name", json()).is_string())
        vmi = o["name"].get<std::string>();
  if (vmi.empty())
    if (auto d = labels->find("kubevirt.io/domain"); d != labels->end() && d->is_string())
      vmi = d->get<std::string>();
  if (vmi.empty()) return std::nullopt;
  VmiDnsConfig c;
  c.vmi = field(pod, "metadata", "namespace") + "/" + vmi;
  c.dns_policy = field(pod, "spec", "dnsPolicy");
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object())
    if (auto cfg = spec->find("dnsConfig"); cfg != spec->end() && cfg->is_object())
      if (auto ns = cfg->find("nameservers"); ns != cfg->end() && ns->is_array())
        for (const auto& n : *ns)
          // The API allows three; a malformed pod must not make the list grow without bound.
          if (n.is_string() && c.nameservers.size() < 8)
            c.nameservers.push_back(n.get<std::string>());
  return c;
}

Result<PodListPage> parsePodListPage(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{EINVAL, "failed to parse pod list: not a JSON object"};
  if (j.value("kind", "") != "PodList")
    return Error{EINVAL, "failed to parse pod list: kind is \"" + j.value("kind", "") + "\""};
  PodListPage page;
  page.resource_version = field(j, "metadata", "resourceVersion");
  page.continue_token = field(j, "metadata", "continue");
  if (auto it = j.find("items"); it != j.end() && it->is_array())
    for (auto& item : *it) page.items.push_back(std::move(item));
  return page;
}

std::optional<std::pair<std::string, PodLedger::Record>> PodLedger::record(const json& pod) {
  if (!pod.is_object()) return std::nullopt;
  const std::string name = field(pod, "metadata", "name");
  if (name.empty()) return std::nullopt;
  Record r;
  r.id = field(pod, "metadata", "namespace") + "/" + name;
  if (auto p = parsePodPlacement(pod)) r.placement = std::move(p).value();
  if (isVirtHandlerPod(pod)) r.handler = virtHandlerPod(pod);
  r.dns = launcherDnsConfig(pod);
  std::string uid = field(pod, "metadata", "uid");
  return std::pair{uid.empty() ? r.id : uid, std::move(r)};
}

void PodLedger::replace(const std::vector<json>& items) {
  pods_.clear();
  for (const auto& item : items)
    if (auto r = record(item)) pods_.insert_or_assign(r->first, std::move(r->second));
}

bool PodLedger::apply(const std::string& type, const json& pod) {
  auto r = record(pod);
  if (!r) return false;
  auto it = pods_.find(r->first);
  if (type == "DELETED") {
    if (it == pods_.end()) return false;
    pods_.erase(it);
    return true;
  }
  if (type != "ADDED" && type != "MODIFIED") return false;
  if (it != pods_.end() && it->second == r->second) return false;  // a status heartbeat
  pods_.insert_or_assign(r->first, std::move(r->second));
  return true;
}

PodView PodLedger::view(bool complete, const std::string& why) const {
  PodView v;
  v.complete = complete;
  v.why = why;
  for (const auto& [uid, r] : pods_) {
    if (!r.placement) {
      v.unreadable.push_back(r.id);
      continue;
    }
    if (!r.placement->terminal()) v.pods.push_back(*r.placement);
  }
  std::sort(v.unreadable.begin(), v.unreadable.end());
  return v;
}

std::vector<VirtHandlerPod> PodLedger::handlers() const {
  std::vector<VirtHandlerPod> out;
  for (const auto& [uid, r] : pods_)
    if (r.handler && r.placement && !r.placement->terminal()) out.push_back(*r.handler);
  std::sort(out.begin(), out.end(),
            [](const VirtHandlerPod& a, const VirtHandlerPod& b) { return a.name < b.name; });
  return out;
}

std::vector<VmiDnsConfig> PodLedger::vmiDns() const {
  std::map<std::string, VmiDnsConfig> by_vmi;
  for (const auto& [uid, r] : pods_)
    if (r.dns && r.placement && !r.placement->terminal()) by_vmi.emplace(r.dns->vmi, *r.dns);
  std::vector<VmiDnsConfig> out;
  for (auto& [vmi, c] : by_vmi) out.push_back(std::move(c));
  return out;
}

}  // namespace nodegate::kube
