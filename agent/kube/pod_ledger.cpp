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
  return id == o.id && placement == o.placement && handler == o.handler;
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

}  // namespace nodegate::kube
