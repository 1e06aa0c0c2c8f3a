// kubevirt-node: KubeVirt's view of this node against nodegate's own device verdicts — the
// check that explains "Insufficient devices.kubevirt.io/kvm".
//
// KubeVirt's virt-handler registers device plugins for devices.kubevirt.io/{kvm,tun,vhost-net}
// and judges their health by the device file existing (an fsnotify watch), heartbeats the Node
// (annotation kubevirt.io/heartbeat, label kubevirt.io/schedulable) and virt-controller marks
// the node unschedulable when the heartbeat is 5 minutes old. Every virt-launcher pod selects
// kubevirt.io/schedulable=true and requests one of each device. So KubeVirt's view and the truth
// drift apart in a few well-known ways, each its own reason here:
//   DevicePluginUnhealthy      the device works, KubeVirt offers 0 (plugin marked it unhealthy)
//   DevicePluginNotRegistered  the device works, KubeVirt does not offer the resource at all
//   DeviceAdvertisedButUnusable  KubeVirt offers it, nodegate's check says no guest can use it
//   HeartbeatStale / HeartbeatMissing / HeartbeatUnreadable   kubevirt.io/heartbeat
//   MarkedUnschedulable / NotMarkedSchedulable                kubevirt.io/schedulable
//   VirtHandlerMissing / VirtHandlerNotReady                  the virt-handler pod on this node
// KubeVirtNotInstalled (PASS): nothing of KubeVirt on the Node and no virt-handler pod.
//
// Inputs: the Node and this node's virt-handler pods from the API (a KubeVirtSource, injected
// through Seams::kubevirt: the agent's pod source and node watch fill it) and the kvm-device,
// tun and vhost-net results of the same cycle (ProbeSpec::reads). Without an API connection
// (`nodegate check`, `--kube none`) there is no source and the check is UNKNOWN/NoApiConnection:
// registered all the same, so every mode lists the same checks and conditions.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/check.h"
#include "nodegate/probe.h"
#include "nodegate/result.h"
#include "nodegate/spec.h"

namespace nodegate {

inline constexpr const char* kKubeVirtNodeCheck = "kubevirt-node";

// The KubeVirt part of a Node object.
struct KubeVirtNodeView {
  std::map<std::string, std::string> capacity;     // devices.kubevirt.io/<name> -> quantity
  std::map<std::string, std::string> allocatable;  // the same for status.allocatable
  std::optional<std::string> schedulable;          // label kubevirt.io/schedulable
  std::optional<std::string> heartbeat;            // annotation kubevirt.io/heartbeat
  bool operator==(const KubeVirtNodeView&) const = default;
};
KubeVirtNodeView kubevirtNodeView(const nlohmann::json& node);
Result<KubeVirtNodeView> parseKubeVirtNode(std::string_view node_json);

// A virt-handler pod (label kubevirt.io=virt-handler) bound to this node.
struct VirtHandlerPod {
  std::string name;  // namespace/name
  std::string phase;
  bool ready = false;        // condition Ready True
  std::string ready_detail;  // the Ready condition's reason/message when not ready
  int restarts = 0;          // summed over its containers
  bool deleting = false;     // metadata.deletionTimestamp set
  bool operator==(const VirtHandlerPod&) const = default;
};
bool isVirtHandlerPod(const nlohmann::json& pod);
VirtHandlerPod virtHandlerPod(const nlohmann::json& pod);

// What the API said, as the agent's sources last saw it.
struct KubeVirtFacts {
  std::optional<KubeVirtNodeView> node;  // nullopt: the Node has not been read (node_error: why)
  std::string node_error;
  bool pods_complete = false;  // the pods bound to this node are listed and watched
  // The pod view broke a moment ago (pods_error says how) and `handlers` is its last complete
  // state: the source's grace for a watch that is re-established at once.
  bool pods_stale = false;
  std::string pods_error;
  std::vector<VirtHandlerPod> handlers;
};

// Where the facts come from; the agent provides one when it has an API connection. facts() is
// called on a probe thread and must return at once with the last view (never block on the API).
class KubeVirtSource {
 public:
  virtual ~KubeVirtSource() = default;
  virtual KubeVirtFacts facts() = 0;
};

// A resource.Quantity as a whole count ("1k" = 1000, "110", "2Ki" = 2048, "1e3"); nullopt for
// anything that is not a non-negative whole number.
std::optional<long long> parseQuantityCount(std::string_view q);

struct KubeVirtNodeInputs {
  KubeVirtFacts facts;
  // This cycle's kvm-device, tun and vhost-net results (absent: not run, compared as unknown).
  std::map<std::string, CheckResult> devices;
  std::chrono::system_clock::time_point now;
  std::chrono::seconds heartbeat_stale{300};  // checks.kubevirt-node.heartbeat_stale_seconds
};
CheckResult evaluateKubeVirtNode(const KubeVirtNodeInputs& in);

inline const SettingSpec kKubeVirtNodeHeartbeatStaleSetting = integerSetting(
    kKubeVirtNodeCheck, "heartbeat_stale_seconds", 300, 30, 86400,
    "virt-handler's kubevirt.io/heartbeat older than this is HeartbeatStale, seconds "
    "(virt-controller marks the node unschedulable at 300)");
inline const ProbeSpec kKubeVirtNodeSpec{
    .name = kKubeVirtNodeCheck,
    .summary =
        "KubeVirt's view of the node (devices.kubevirt.io capacity and allocatable, "
        "kubevirt.io/schedulable, virt-handler's heartbeat and pod) agrees with kvm-device, tun "
        "and vhost-net",
    .triggers = kTriggerTimer | kTriggerKube,
    .condition = "KubeVirtNodeHealthy",
    // Advisory: it explains a Pending VM, and a node without KubeVirt must not be closed by it.
    .default_required = false,
    .settings = {&kKubeVirtNodeHeartbeatStaleSetting},
    .reads = {"kvm-device", "tun", "vhost-net"},
};

class KubeVirtNodeProbe final : public Probe {
 public:
  // source: null without an API connection.
  explicit KubeVirtNodeProbe(std::shared_ptr<KubeVirtSource> source) : source_(std::move(source)) {}
  const ProbeSpec& spec() const override { return kKubeVirtNodeSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<KubeVirtSource> source_;
};

}  // namespace nodegate
