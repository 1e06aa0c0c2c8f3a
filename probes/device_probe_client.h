// The agent's side of the device-probe helper (protocol: device_probe.h). `--device-probe PATH`
// gives `nodegate agent` and `nodegate check` a Client; the registry then wraps the device checks
// (viaDeviceProbe) and gives the storage probes a HelperLvmAccess. The probes themselves, their
// collectors and evaluators, are the same code on both sides of the socket: the helper runs the
// kvm-device, vhost-net and tun probes as they are, and the lvm collector's two steps, whose
// output the lvm and local-pv evaluators judge here under the agent's own policy.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "device_probe.h"
#include "lvm_source.h"
#include "nodegate/probe.h"

namespace nodegate::devprobe {

class Client {
 public:
  explicit Client(std::string socket_path) : path_(std::move(socket_path)) {}
  virtual ~Client() = default;
  // One request on a connection of its own. Returns the reply's result, or an error saying what
  // failed: the connect (no helper), the peer (a socket not served by root), the deadline (a
  // helper that accepts and never answers), the reply, or the helper's own refusal. Waits at
  // most `wait` in all.
  virtual Result<nlohmann::json> call(const Request& req, std::chrono::milliseconds wait) const;
  const std::string& socketPath() const { return path_; }

 private:
  std::string path_;
};

// local as it is without a client; with one, a probe that asks the helper first. When the helper
// does not answer, local runs here and says so in its evidence; if that cannot decide either
// (UNKNOWN: the device cgroup refused the device), the result is UNKNOWN DeviceProbeUnavailable
// naming both. Only the probes deviceCheckOp() knows are wrapped.
std::unique_ptr<Probe> viaDeviceProbe(std::unique_ptr<Probe> local,
                                      std::shared_ptr<const Client> client);

// The lvm collector's steps in the helper: its label scan of the block devices and its own fixed
// `lvm fullreport`. Errors mean the helper did not answer: LvmRunFailure::HelperUnavailable.
class HelperLvmAccess final : public LvmAccess {
 public:
  explicit HelperLvmAccess(std::shared_ptr<const Client> client) : client_(std::move(client)) {}
  Result<LvmPrelude> prepare(const HostRoot* host, const Config& cfg) override;
  Result<ExecResult> fullreport(const Config& cfg, std::chrono::milliseconds timeout,
                                std::size_t max_output) override;
  LvmRunFailure failureKind() const override { return LvmRunFailure::HelperUnavailable; }

 private:
  std::shared_ptr<const Client> client_;
};

}  // namespace nodegate::devprobe
