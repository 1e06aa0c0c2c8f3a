#include "kvm_device.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>

#include "kernel_modules.h"
#include "nodegate/host_root.h"

namespace nodegate {
namespace {

constexpr unsigned kMiscMajor = 10;
constexpr unsigned kKvmMinor = 232;  // KVM_MINOR in include/linux/miscdevice.h
constexpr int kKvmApiVersion = 12;   // stable since Linux 2.6.22

bool sysfsYes(const std::string& path) {
  auto v = readValue(path);
  return v && (*v == "Y" || *v == "1" || *v == "y");
}

// Confidential guests (what virt-host-validate calls "secure guest support"): reported as
// evidence only, no policy needs it yet.
std::string secureGuest(const HostRoot& host) {
  std::vector<std::string> found;
  if (sysfsYes(host.sys("module/kvm_amd/parameters/sev")))
    found.push_back("AMD SEV (kvm_amd sev=Y)");
  if (sysfsYes(host.sys("module/kvm_amd/parameters/sev_snp"))) found.push_back("AMD SEV-SNP");
  if (sysfsYes(host.sys("module/kvm_intel/parameters/tdx")))
    found.push_back("Intel TDX (kvm_intel tdx=Y)");
  if (sysfsYes(host.sys("firmware/uv/prot_virt_host")))
    found.push_back("s390 protected virtualization");
  if (found.empty()) return "none found";
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : ", ") + f;
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// How to get a KVM driver where there is none.
std::string loadHint(const KvmObservation& o) {
  if (o.arch == "arm64")
    return "arm64 builds KVM into the kernel: boot with CONFIG_KVM=y at EL2 (bare metal or a "
           "nested-capable hypervisor)";
  if (o.arch.empty())
    return "the CPU's flags cannot be read (see the cpu-virt check): which KVM backend could "
           "load is unknown";
  if (o.cpu_module.empty())
    return "no KVM backend can load: the CPU exposes no vmx/svm (see the cpu-virt check)";
  return moduleHint({o.cpu_module}, o.module_support);
}

std::string stageOf(GuestStage s) {
  return std::string(guestStageName(s)) + " (stage " + std::to_string(static_cast<int>(s)) +
         " of " + std::to_string(kGuestStages) + ")";
}

std::string backendWords(const KvmObservation& o) {
  return "; KVM backend: " + describeBackend(o.backend);
}

// The verdict once a VM was created: what the test guest proved.
CheckResult evaluateGuest(const KvmObservation& o) {
  const GuestRun& g = *o.guest;
  if (!g.supported)
    return makeResult(kKvmDeviceCheck, Status::Unknown, "GuestRunUnsupported",
                      "KVM API 12, required capabilities present and a VM was created, but "
                      "nodegate has no test guest for " +
                          (o.arch.empty() ? std::string("this architecture") : o.arch) +
                          ": whether a guest runs is not proven",
                      "start a VM on this node to prove it (the built-in guest run covers "
                      "x86-64 only)");
  if (!g.failed_step.empty()) {
    // Out of memory is the host's state, not KVM's verdict.
    const bool transient = g.error.code == ENOMEM || g.error.code == EAGAIN;
    return makeResult(kKvmDeviceCheck, transient ? Status::Unknown : Status::Fail,
                      g.failed_step == "KVM_RUN" ? "GuestRunFailed" : "GuestSetupFailed",
                      "KVM created a VM but its test guest failed at " + g.failed_step + ": " +
                          causeOf(g.error) + backendWords(o),
                      transient ? "the host is short of memory: retry when it has some"
                                : "check dmesg for kvm errors; virt-launcher makes the same calls");
  }
  if (g.timed_out)
    return makeResult(kKvmDeviceCheck, Status::Unknown, "GuestTimedOut",
                      "the test guest did not finish within " + std::to_string(g.limit.count()) +
                          " ms; it had reached " + stageOf(g.reached) + backendWords(o),
                      "if a less loaded moment gives the same, KVM does not run guests here: "
                      "check dmesg for kvm errors");
  if (g.enteredLongMode())
    return makeResult(kKvmDeviceCheck, Status::Pass, "KvmUsable",
                      "KVM API 12, required capabilities present; a test guest entered 64-bit "
                      "long mode on a vCPU" +
                          backendWords(o));
  const std::string how = g.unexpected.empty() ? g.last.what : g.unexpected;
  const std::string hint =
      isParavirtualKvmBackend(o.backend.primary())
          ? o.backend.primary() +
                " is a paravirtual backend: it runs only PVM-enabled guest kernels, not the "
                "stock kernels KubeVirt boots; give the node hardware virtualization (a metal "
                "or nested-capable instance, see cpu-virt) so kvm_intel or kvm_amd backs " +
                o.node.path
          : "check dmesg for kvm errors: this KVM cannot take a standard x86-64 guest to long "
            "mode (see cpu-virt)";
  if (g.reached == GuestStage::None)
    return makeResult(kKvmDeviceCheck, Status::Fail, "GuestDoesNotRun",
                      "KVM answers, but its vCPU ran no guest code: the test guest stopped with " +
                          how + backendWords(o),
                      hint);
  if (g.reached == GuestStage::LongMode)
    return makeResult(kKvmDeviceCheck, Status::Fail, "GuestDidNotHalt",
                      "the test guest reached long mode but did not halt: " + how + backendWords(o),
                      hint);
  return makeResult(kKvmDeviceCheck, Status::Fail, "GuestCannotEnterLongMode",
                    "KVM answers, but a standard guest cannot enter long mode: the test guest "
                    "reached " +
                        stageOf(g.reached) + " and stopped at " +
                        std::string(guestNextStep(g.reached)) + " with " + how + backendWords(o),
                    hint);
}

// The verdict for an open /dev/kvm: the ioctls, then the guest.
CheckResult evaluateOpenKvm(const KvmObservation& o) {
  const std::string& dev = o.node.path;
  if (!o.api_version)
    return makeResult(kKvmDeviceCheck, Status::Fail, "NotKvm",
                      "KVM_GET_API_VERSION failed on " + dev + ": " + causeOf(o.api_error),
                      "check that " + dev + " is the KVM device (char 10:232); " + loadHint(o));
  if (*o.api_version != kKvmApiVersion)
    return makeResult(kKvmDeviceCheck, Status::Fail, "ApiVersionMismatch",
                      "KVM API version " + std::to_string(*o.api_version) + ", QEMU needs 12",
                      "run a kernel whose KVM API is version 12 (any Linux since 2.6.22)");
  if (!o.caps_missing.empty())
    return makeResult(kKvmDeviceCheck, Status::Fail, "MissingCapabilities",
                      "KVM lacks capabilities QEMU requires: " + joined(o.caps_missing),
                      "upgrade the host kernel; QEMU refuses to start without these");
  if (!o.create_vm_ok)
    return makeResult(kKvmDeviceCheck, Status::Fail, "CreateVmFailed",
                      "KVM_CREATE_VM failed: " + causeOf(o.create_vm_error),
                      o.create_vm_error.code == EBUSY
                          ? "another hypervisor (VirtualBox, VMware) holds VT-x/AMD-V: stop it"
                          : "check dmesg for kvm errors (disabled in firmware, or out of memory)");
  if (!o.guest)  // the collector always runs the guest after a VM; kept total for callers
    return makeResult(kKvmDeviceCheck, Status::Unknown, "GuestNotRun",
                      "a VM was created but no test guest ran in it",
                      "this is a bug in the collector: report it");
  return evaluateGuest(o);
}

std::string guestEvidence(const GuestRun& g) {
  if (!g.supported) return "not run: no test guest for this architecture";
  if (!g.failed_step.empty()) return "set-up failed at " + g.failed_step;
  if (g.timed_out)
    return "reached " + stageOf(g.reached) + ", then no exit within " +
           std::to_string(g.limit.count()) + " ms";
  if (g.enteredLongMode()) return "entered " + stageOf(g.reached) + ", then hlt";
  return "reached " + stageOf(g.reached) + ", then " +
         (g.unexpected.empty() ? g.last.what : g.unexpected) + " at " +
         std::string(guestNextStep(g.reached));
}

}  // namespace

std::vector<KvmCapability> kvmRequiredCapabilities(std::string_view arch) {
  std::vector<KvmCapability> caps = {
      {KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY"},
      {KVM_CAP_DESTROY_MEMORY_REGION_WORKS, "KVM_CAP_DESTROY_MEMORY_REGION_WORKS"},
      {KVM_CAP_JOIN_MEMORY_REGIONS_WORKS, "KVM_CAP_JOIN_MEMORY_REGIONS_WORKS"},
      {KVM_CAP_INTERNAL_ERROR_DATA, "KVM_CAP_INTERNAL_ERROR_DATA"},
      {KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD"},
      {KVM_CAP_IOEVENTFD_ANY_LENGTH, "KVM_CAP_IOEVENTFD_ANY_LENGTH"},
      {KVM_CAP_IRQFD, "KVM_CAP_IRQFD"},
  };
  if (arch == "x86") {
    caps.push_back({KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"});
    caps.push_back({KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID"});
    caps.push_back({KVM_CAP_MP_STATE, "KVM_CAP_MP_STATE"});
  }
  return caps;
}

CheckResult evaluateKvmDevice(const KvmObservation& o) {
  const DeviceNodeTexts texts{kKvmDeviceCheck,
                              "kvm",
                              Status::Fail,
                              o.registered,
                              "run the check as root, or add the user to the kvm group "
                              "(virt-launcher needs " +
                                  o.node.path + " rw)",
                              loadHint(o)};
  CheckResult r;
  if (auto unusable = evaluateDeviceNode(o.node, texts))
    r = std::move(*unusable);
  else
    r = evaluateOpenKvm(o);
  setDeviceLabel(r, "kvm", r.status == Status::Pass);
  r.evidence.push_back({"sysfs class/misc/kvm", registeredEvidence(o.registered)});
  r.evidence.push_back({"kvm backend", backendEvidence(o.backend)});
  r.evidence.push_back(nodeEvidence(o.node));
  if (o.api_version)
    r.evidence.push_back({"ioctl KVM_GET_API_VERSION", std::to_string(*o.api_version)});
  if (!o.caps_present.empty() || !o.caps_missing.empty()) {
    r.evidence.push_back({"ioctl KVM_CHECK_EXTENSION present", joined(o.caps_present)});
    if (!o.caps_missing.empty())
      r.evidence.push_back({"ioctl KVM_CHECK_EXTENSION missing", joined(o.caps_missing)});
  }
  if (o.max_vcpus) r.evidence.push_back({"KVM_CAP_MAX_VCPUS", std::to_string(*o.max_vcpus)});
  if (o.create_vm_tried)
    r.evidence.push_back({"ioctl KVM_CREATE_VM", o.create_vm_ok
                                                     ? "created; closed after the test guest"
                                                     : causeOf(o.create_vm_error)});
  if (o.guest) {
    r.evidence.push_back({"test guest", guestEvidence(*o.guest)});
    if (const auto& regs = o.guest->registers)
      r.evidence.push_back({"test guest registers at exit",
                            "cr0=" + hex(regs->cr0) + " cr3=" + hex(regs->cr3) +
                                " cr4=" + hex(regs->cr4) + " efer=" + hex(regs->efer)});
  }
  r.evidence.push_back({"secure guest support", o.secure_guest});
  return r;
}

KvmObservation observeKvmDevice(DeviceIo& io, const HostRoot& host) {
  KvmObservation o;
  auto facts = readKvmHostFacts(host);
  o.arch = facts.arch;
  o.cpu_module = facts.cpu_module;
  o.backend = facts.backend;
  o.module_support = kernelModuleSupport(host);
  o.registered = miscRegistered(host, "kvm");
  o.secure_guest = secureGuest(host);
  o.node = openDeviceNode(io, host, "kvm", kMiscMajor, kKvmMinor, O_RDWR);
  if (o.node.state != DeviceNode::State::Open) return o;
  SeamFd kvm(io, o.node.fd);

  auto api = io.ioctl(kvm.get(), KVM_GET_API_VERSION, nullptr);
  if (!api) {
    o.api_error = api.error();
    return o;
  }
  o.api_version = *api;
  // KVM_CHECK_EXTENSION takes the capability number itself as the argument.
  for (const auto& cap : kvmRequiredCapabilities(o.arch)) {
    auto has = io.ioctl(kvm.get(), KVM_CHECK_EXTENSION,
                        reinterpret_cast<void*>(static_cast<std::uintptr_t>(cap.number)));
    (has && *has > 0 ? o.caps_present : o.caps_missing).emplace_back(cap.name);
  }
  auto vcpus = io.ioctl(kvm.get(), KVM_CHECK_EXTENSION,
                        reinterpret_cast<void*>(static_cast<std::uintptr_t>(KVM_CAP_MAX_VCPUS)));
  if (vcpus && *vcpus > 0) o.max_vcpus = *vcpus;
  if (!o.caps_missing.empty() || o.api_version != kKvmApiVersion) return o;
  o.create_vm_tried = true;
  auto vm = io.ioctl(kvm.get(), KVM_CREATE_VM, nullptr);  // machine type 0: the default
  if (!vm) {
    o.create_vm_error = vm.error();
    return o;
  }
  o.create_vm_ok = true;
  SeamFd vm_fd(io, *vm);  // the VM fd is the whole VM: closing it destroys the VM
  // The guest is x86 code: a host known to be another architecture (a captured arm64 tree) gets
  // none; runGuest itself declines on a build for another architecture.
  if (o.arch.empty() || o.arch == "x86") {
    o.guest = runGuest(io, kvm.get(), vm_fd.get());
  } else {
    o.guest.emplace();
    o.guest->supported = false;
  }
  return o;
}

CheckResult KvmDeviceProbe::run(const ProbeContext& ctx) {
  return evaluateKvmDevice(observeKvmDevice(*io_, ctx.host));
}

}  // namespace nodegate
