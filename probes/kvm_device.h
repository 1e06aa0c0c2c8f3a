// kvm-device: can this host actually run a KVM guest? Goes beyond "the node exists": char
// 10:232, opened read-write, KVM_GET_API_VERSION == 12, the capabilities QEMU (virt-launcher)
// refuses to start without, one KVM_CREATE_VM, and in that VM a tiny test guest that makes the
// mode switches of an x86-64 kernel's boot (kvm_guest.h). Only a guest that reached long mode
// is a PASS: a paravirtual backend (kvm_pvm) creates VMs and runs real-mode code, yet boots no
// stock kernel. arm64 has no test guest yet, so there the verdict is UNKNOWN, not PASS.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device_node.h"
#include "kvm_backend.h"
#include "kvm_guest.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

struct KvmCapability {
  int number;
  std::string_view name;
};

// The capabilities QEMU checks at accelerator start-up (its kvm_required_capabilites list plus
// the x86 ones); a kernel missing any of them makes every VMI fail in virt-launcher.
// arch is CpuInfo::arch ("x86", "arm64"); the x86-only ones are skipped elsewhere.
std::vector<KvmCapability> kvmRequiredCapabilities(std::string_view arch);

struct KvmObservation {
  std::string arch;                    // from cpuinfo ("" when unreadable or neither)
  std::string cpu_module;              // the vendor module the CPU flags allow (kvm_backend.h)
  KvmBackend backend;                  // the backend really loaded or built in
  std::optional<bool> module_support;  // kernelModuleSupport(), for the hints
  std::optional<bool> registered;      // miscRegistered(<sys>/class/misc/kvm), nullopt: unknown
  DeviceNode node;
  std::optional<int> api_version;
  Error api_error;
  std::vector<std::string> caps_present, caps_missing;
  std::optional<int> max_vcpus;
  bool create_vm_tried = false;
  bool create_vm_ok = false;
  Error create_vm_error;
  std::optional<GuestRun> guest;  // the test guest, run once a VM was created
  std::string secure_guest;       // "AMD SEV (kvm_amd sev=Y)", "none found"
};

// The whole collector, self-contained over the DeviceIo seam and the host root, so that the
// privileged device helper runs exactly what the probe runs. Every fd and mapping it opens is
// closed before it returns.
KvmObservation observeKvmDevice(DeviceIo& io, const HostRoot& host);

// Pure evaluation of what the collector saw.
CheckResult evaluateKvmDevice(const KvmObservation& obs);

inline constexpr char kKvmDeviceCheck[] = "kvm-device";
inline const ProbeSpec kKvmDeviceSpec{
    .name = kKvmDeviceCheck,
    .summary =
        "/dev/kvm is char 10:232, opens read-write, KVM API 12, and a tiny guest runs; label kvm",
    .triggers = kTriggerTimer | kTriggerUdevMisc,
    .condition = "VirtualizationReady",
    .default_required = true,
    .settings = {},
};

class KvmDeviceProbe final : public Probe {
 public:
  explicit KvmDeviceProbe(std::shared_ptr<DeviceIo> io) : io_(std::move(io)) {}
  const ProbeSpec& spec() const override { return kKvmDeviceSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<DeviceIo> io_;
};

}  // namespace nodegate
