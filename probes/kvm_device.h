// kvm-device: can this host actually create a KVM virtual machine? Goes beyond "the node
// exists": char 10:232, opened read-write, KVM_GET_API_VERSION == 12, the capabilities QEMU
// (virt-launcher) refuses to start without, and one KVM_CREATE_VM that is closed at once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_virt.h"
#include "device_node.h"
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

// "kvm_intel" for vmx or GenuineIntel, "kvm_amd" for svm or AuthenticAMD, "" otherwise (arm64
// builds KVM into the kernel; an unknown x86 vendor gets no guess).
std::string kvmVendorModule(const CpuInfo& cpu);

// The host's CPU architecture and kvm vendor module, read from <proc>/cpuinfo; both empty when
// cpuinfo cannot be read (the cpu-virt check reports that). kvm-device and kernel-modules share it.
struct CpuKvmFacts {
  std::string arch;
  std::string vendor_module;
};
CpuKvmFacts readCpuKvmFacts(const HostRoot& host);

struct KvmObservation {
  std::string arch;               // from cpuinfo
  std::string vendor_module;      // kvmVendorModule()
  bool sys_misc_present = false;  // <sys>/class/misc/kvm: the driver registered the device
  DeviceNode node;
  std::optional<int> api_version;
  Error api_error;
  std::vector<std::string> caps_present, caps_missing;
  std::optional<int> max_vcpus;
  bool create_vm_tried = false;
  bool create_vm_ok = false;
  Error create_vm_error;
  std::string secure_guest;  // "AMD SEV (kvm_amd sev=Y)", "none found"
};

// Pure evaluation of what the collector saw.
CheckResult evaluateKvmDevice(const KvmObservation& obs);

class KvmDeviceProbe final : public Probe {
 public:
  explicit KvmDeviceProbe(std::shared_ptr<DeviceIo> io) : io_(std::move(io)) {}
  std::string_view name() const override { return "kvm-device"; }
  std::uint32_t triggers() const override { return kTriggerTimer | kTriggerUdevMisc; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<DeviceIo> io_;
};

}  // namespace nodegate
