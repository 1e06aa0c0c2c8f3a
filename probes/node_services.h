// node-services: are the node's kubelet and container runtime running steadily?
// Reads org.freedesktop.systemd1 on the host's system bus: LoadState, ActiveState, SubState of
// each unit and NRestarts of services. A node whose kubelet or runtime flaps cannot host VMs, but
// the check is informational: it is not in the gate's default required list.
//
// Settings (checks."node-services" in --config):
//   units                    unit names; default kubelet.service plus containerd.service or,
//                            when that is not installed, crio.service
//   max_restarts             automatic restarts tolerated within the window (3)
//   restart_window_seconds   the window (3600)
//   bus, timeout_seconds     as for time-sync (same default: the host's system bus)
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nodegate/probe.h"
#include "nodegate/seams.h"
#include "time_sync.h"

namespace nodegate {

struct UnitState {
  std::string name;
  std::string load_state;                   // "loaded", "not-found", "masked", ...
  std::string active_state;                 // "active", "failed", "activating", ...
  std::string sub_state;                    // "running", "auto-restart", ...
  std::optional<std::uint64_t> n_restarts;  // services only
};

// unit: properties of org.freedesktop.systemd1.Unit; service: of ...systemd1.Service, or null
// for units that are not services. Wrong types are errors naming the property.
Result<UnitState> parseUnitState(const std::string& name, const DBusProperties& unit,
                                 const DBusProperties* service);

// NRestarts samples of one unit over time, to count restarts inside a sliding window.
class RestartHistory {
 public:
  // Returns the restarts counted since the oldest sample still covering the window, or nullopt
  // on the first sample (a rate needs two observations). A counter that went down (reset-failed,
  // unit reloaded) restarts the history.
  std::optional<std::uint64_t> observe(std::uint64_t n_restarts,
                                       std::chrono::steady_clock::time_point now,
                                       std::chrono::seconds window);

 private:
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> samples_;
};

struct UnitReport {
  std::string name;
  std::optional<UnitState> state;  // empty when it could not be read
  std::string error;
  int error_code = 0;  // errno-style, as the D-Bus seam reports it
  std::optional<std::uint64_t> restarts_in_window;
};

struct NodeServicesPolicy {
  std::uint64_t max_restarts = 3;
  std::chrono::seconds window{3600};
};

// Pure evaluation. Worst unit wins: FAIL (failed/inactive), UNKNOWN (unreadable), WARN
// (not installed, transitioning, restarting too often), PASS.
CheckResult evaluateNodeServices(const std::vector<UnitReport>& units,
                                 const NodeServicesPolicy& policy);

inline constexpr char kNodeServicesCheck[] = "node-services";
inline const SettingSpec kNodeServicesUnitsSetting = derivedDefault(
    listSetting(kNodeServicesCheck, "units", {}, "systemd units to watch", {}, 64),
    "kubelet.service plus containerd.service, or crio.service when containerd is not installed");
inline const SettingSpec kNodeServicesMaxRestartsSetting =
    integerSetting(kNodeServicesCheck, "max_restarts", 3, 0, 1e6,
                   "automatic restarts tolerated within restart_window_seconds");
inline const SettingSpec kNodeServicesWindowSetting =
    numberSetting(kNodeServicesCheck, "restart_window_seconds", 3600, 1, 30 * 86400,
                  "the window max_restarts counts in, seconds");
inline const SettingSpec kNodeServicesBusSetting = busSetting(kNodeServicesCheck);
inline const ProbeSpec kNodeServicesSpec{
    .name = kNodeServicesCheck,
    .summary = "kubelet and the container runtime run steadily (systemd1 over D-Bus)",
    .triggers = kTriggerTimer,
    .condition = "",
    .default_required = false,
    .settings = {&kNodeServicesUnitsSetting, &kNodeServicesMaxRestartsSetting,
                 &kNodeServicesWindowSetting, &kNodeServicesBusSetting},
};

class NodeServicesProbe final : public Probe {
 public:
  explicit NodeServicesProbe(std::shared_ptr<DBus> dbus);
  const ProbeSpec& spec() const override { return kNodeServicesSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  UnitReport readUnit(const std::string& unit, const NodeServicesPolicy& policy);

  std::shared_ptr<DBus> dbus_;
  std::unique_ptr<DBusClient> client_;
  std::string client_key_;
  std::map<std::string, RestartHistory> history_;
};

}  // namespace nodegate
