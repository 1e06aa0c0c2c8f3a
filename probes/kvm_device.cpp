#include "kvm_device.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <cstdint>

#include "nodegate/host_root.h"

namespace nodegate {
namespace {

constexpr unsigned kMiscMajor = 10;
constexpr unsigned kKvmMinor = 232;  // KVM_MINOR in include/linux/miscdevice.h
constexpr int kKvmApiVersion = 12;   // stable since Linux 2.6.22

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

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

std::string loadHint(const KvmObservation& o) {
  if (o.arch == "arm64")
    return "arm64 builds KVM into the kernel: boot with CONFIG_KVM=y at EL2 (bare metal or a "
           "nested-capable hypervisor)";
  if (o.vendor_module.empty())
    return "the CPU offers no known KVM vendor module (see the cpu-virt check)";
  return "load the KVM modules: modprobe " + o.vendor_module +
         " (and persist it in /etc/modules-load.d/)";
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

std::string kvmVendorModule(const CpuInfo& cpu) {
  if (cpu.arch != "x86") return {};
  if (cpu.flags.count("vmx") || cpu.vendor == "GenuineIntel") return "kvm_intel";
  if (cpu.flags.count("svm") || cpu.vendor == "AuthenticAMD" || cpu.vendor == "HygonGenuine")
    return "kvm_amd";
  return {};
}

CpuKvmFacts readCpuKvmFacts(const HostRoot& host) {
  CpuKvmFacts facts;
  if (auto text = readFile(host.proc("cpuinfo"))) {
    auto cpu = parseCpuInfo(*text);
    facts.arch = cpu.arch;
    facts.vendor_module = kvmVendorModule(cpu);
  }
  return facts;
}

CheckResult evaluateKvmDevice(const KvmObservation& o) {
  using S = DeviceNode::State;
  const std::string dev = o.node.path;
  CheckResult r;
  switch (o.node.state) {
    case S::Missing:
      if (o.sys_misc_present) {
        r = makeResult("kvm-device", Status::Fail, "DeviceNodeMissing",
                       "the kvm driver is registered but " + dev + " does not exist",
                       "create the node (mknod " + dev +
                           " c 10 232; chmod 0666) or check that devtmpfs/udev is mounted and "
                           "that --path.devfs points at the host's /dev");
      } else {
        r = makeResult("kvm-device", Status::Fail, "DeviceMissing",
                       dev + " does not exist and the kernel registered no kvm device",
                       loadHint(o));
      }
      break;
    case S::StatFailed:
      r = makeResult("kvm-device", Status::Unknown, "DeviceUnreadable", o.node.error.message,
                     "give the agent access to the host's /dev (mount it at --path.devfs)");
      break;
    case S::NotCharDevice:
    case S::WrongNumber:
      r = makeResult("kvm-device", Status::Fail, "WrongDeviceNode",
                     dev + " is not the character device 10:232",
                     "remove the stray file and let the kvm driver create " + dev + " (mknod " +
                         dev + " c 10 232)");
      break;
    case S::PermissionDenied:
      r = makeResult("kvm-device", Status::Unknown, "PermissionDenied",
                     "cannot open " + dev + " read-write: " + causeOf(o.node.error),
                     "run the check as root, or add the user to the kvm group "
                     "(virt-launcher needs " +
                         dev + " rw)");
      break;
    case S::NoDriver:
      r = makeResult("kvm-device", Status::Fail, "NoDriver",
                     dev + " exists but no driver answers: " + causeOf(o.node.error), loadHint(o));
      break;
    case S::OpenFailed:
      r = makeResult("kvm-device", Status::Fail, "OpenFailed",
                     "cannot open " + dev + ": " + causeOf(o.node.error), loadHint(o));
      break;
    case S::Open:
      if (!o.api_version) {
        r = makeResult("kvm-device", Status::Fail, "NotKvm",
                       "KVM_GET_API_VERSION failed on " + dev + ": " + causeOf(o.api_error),
                       "check that " + dev + " is the KVM device (char 10:232) and " + loadHint(o));
      } else if (*o.api_version != kKvmApiVersion) {
        r = makeResult("kvm-device", Status::Fail, "ApiVersionMismatch",
                       "KVM API version " + std::to_string(*o.api_version) + ", QEMU needs 12",
                       "run a kernel whose KVM API is version 12 (any Linux since 2.6.22)");
      } else if (!o.caps_missing.empty()) {
        r = makeResult("kvm-device", Status::Fail, "MissingCapabilities",
                       "KVM lacks capabilities QEMU requires: " + joined(o.caps_missing),
                       "upgrade the host kernel; QEMU refuses to start without these");
      } else if (!o.create_vm_ok) {
        r = makeResult("kvm-device", Status::Fail, "CreateVmFailed",
                       "KVM_CREATE_VM failed: " + causeOf(o.create_vm_error),
                       o.create_vm_error.code == EBUSY
                           ? "another hypervisor (VirtualBox, VMware) holds VT-x/AMD-V: stop it"
                           : "check dmesg for kvm errors (disabled in firmware, or out of memory)");
      } else {
        r = makeResult("kvm-device", Status::Pass, "KvmUsable",
                       "KVM API 12, required capabilities present, a VM was created");
      }
      break;
  }
  r.labels["kvm"] = r.status == Status::Pass ? "true" : "false";
  r.evidence.push_back({"sysfs class/misc/kvm", o.sys_misc_present ? "present" : "absent"});
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
    r.evidence.push_back({"ioctl KVM_CREATE_VM",
                          o.create_vm_ok ? "created and closed" : causeOf(o.create_vm_error)});
  r.evidence.push_back({"secure guest support", o.secure_guest});
  return r;
}

CheckResult KvmDeviceProbe::run(const ProbeContext& ctx) {
  KvmObservation o;
  auto cpu = readCpuKvmFacts(ctx.host);
  o.arch = cpu.arch;
  o.vendor_module = cpu.vendor_module;
  o.sys_misc_present = exists(ctx.host.sys("class/misc/kvm"));
  o.secure_guest = secureGuest(ctx.host);
  o.node = openDeviceNode(*io_, ctx.host.dev("kvm"), kMiscMajor, kKvmMinor, O_RDWR);
  if (o.node.state != DeviceNode::State::Open) return evaluateKvmDevice(o);
  SeamFd kvm(*io_, o.node.fd);

  auto api = io_->ioctl(kvm.get(), KVM_GET_API_VERSION, nullptr);
  if (!api) {
    o.api_error = api.error();
    return evaluateKvmDevice(o);
  }
  o.api_version = *api;
  // KVM_CHECK_EXTENSION takes the capability number itself as the argument.
  for (const auto& cap : kvmRequiredCapabilities(o.arch)) {
    auto has = io_->ioctl(kvm.get(), KVM_CHECK_EXTENSION,
                          reinterpret_cast<void*>(static_cast<std::uintptr_t>(cap.number)));
    (has && *has > 0 ? o.caps_present : o.caps_missing).emplace_back(cap.name);
  }
  auto vcpus = io_->ioctl(kvm.get(), KVM_CHECK_EXTENSION,
                          reinterpret_cast<void*>(static_cast<std::uintptr_t>(KVM_CAP_MAX_VCPUS)));
  if (vcpus && *vcpus > 0) o.max_vcpus = *vcpus;
  if (o.caps_missing.empty() && o.api_version == kKvmApiVersion) {
    o.create_vm_tried = true;
    auto vm = io_->ioctl(kvm.get(), KVM_CREATE_VM, nullptr);  // machine type 0: the default
    if (vm) {
      o.create_vm_ok = true;
      io_->close(*vm);  // the VM fd is the whole VM: closing it destroys the VM at once
    } else {
      o.create_vm_error = vm.error();
    }
  }
  return evaluateKvmDevice(o);
}

}  // namespace nodegate
