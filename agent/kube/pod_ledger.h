// The pods bound to this node as a list and its watch events make them: what the gate needs to
// keep them admitted (their placement, publish/kube/gate_hold.h) and what kubevirt-node needs
// (the virt-handler pods). Pure bookkeeping: the pod source (pod_source.h) feeds it responses.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dns_path.h"
#include "kubevirt_node.h"
#include "nodegate/result.h"
#include "publish/kube/gate_hold.h"

namespace nodegate::kube {

// One page of a PodList.
struct PodListPage {
  std::vector<nlohmann::json> items;
  std::string resource_version;
  std::string continue_token;
};
Result<PodListPage> parsePodListPage(std::string_view body);

// A virt-launcher pod's DNS configuration (label kubevirt.io=virt-launcher; the VMI from its
// VirtualMachineInstance owner, else its kubevirt.io/domain label); nullopt for other pods.
std::optional<VmiDnsConfig> launcherDnsConfig(const nlohmann::json& pod);

class PodLedger {
 public:
  // A complete list (every page) replaces what was known.
  void replace(const std::vector<nlohmann::json>& items);
  // ADDED / MODIFIED / DELETED. Returns whether anything the views show changed.
  bool apply(const std::string& type, const nlohmann::json& pod);

  // complete/why describe the source (listed and watched, or why not).
  PodView view(bool complete, const std::string& why) const;
  std::vector<VirtHandlerPod> handlers() const;
  // Of the non-terminal launcher pods, one per VMI (a migration's two pods share it), by VMI.
  std::vector<VmiDnsConfig> vmiDns() const;
  std::size_t size() const { return pods_.size(); }

 private:
  struct Record {
    std::string id;                         // namespace/name
    std::optional<PodPlacement> placement;  // nullopt: did not parse (the view marks it)
    std::optional<VirtHandlerPod> handler;  // set for virt-handler pods
    std::optional<VmiDnsConfig> dns;        // set for virt-launcher pods
    bool operator==(const Record& o) const;
  };
  static std::optional<std::pair<std::string, Record>> record(const nlohmann::json& pod);

  std::map<std::string, Record> pods_;  // by uid (namespace/name when a pod has none)
};

}  // namespace nodegate::kube
