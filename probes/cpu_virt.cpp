#include "cpu_virt.h"

#include <sys/stat.h>

#include "device_node.h"
#include "text.h"

namespace nodegate {

CpuInfo parseCpuInfo(std::string_view text) {
  CpuInfo info;
  bool first_block_done = false;
  forEachLine(text, [&](std::string_view line) {
    auto [key, value] = splitKeyValue(line, ':');
    if (key.empty()) {
      if (info.processors > 0) first_block_done = true;
      return;
    }
    if (key == "processor") {
      ++info.processors;
      return;
    }
    // Flags are taken from the first processor only: hosts are homogeneous and reading every
    // block of a 256-CPU machine would cost more than the probe is worth.
    if (first_block_done && !info.flags.empty()) return;
    if (key == "flags") {
      info.arch = "x86";
      info.flags.clear();
      forEachWord(value, [&](std::string_view w) { info.flags.emplace(w); });
    } else if (key == "Features") {
      info.arch = "arm64";
      info.flags.clear();
      forEachWord(value, [&](std::string_view w) { info.flags.emplace(w); });
    } else if (key == "vendor_id") {
      info.vendor = std::string(value);
    } else if (key == "model name") {
      info.model = std::string(value);
    } else if (key == "CPU implementer" && info.vendor.empty()) {
      info.vendor = "arm:" + std::string(value);
    }
  });
  // arm64 kernels print "processor : N" lines too; older ones print one "Processor" header.
  if (info.processors == 0 && !info.arch.empty()) info.processors = 1;
  return info;
}

CheckResult evaluateCpuVirt(const CpuInfo& info, std::optional<bool> kvm_registered,
                            const KvmBackend& backend) {
  if (info.processors == 0 || info.arch.empty()) {
    // Nothing is known, so no label is published as if it were.
    return makeResult(kCpuVirtCheck, Status::Unknown, "CpuInfoUnreadable",
                      "cpuinfo has no processor flags to decide from",
                      "check that the host's /proc is mounted (--host-root / --path.procfs)");
  }
  const bool hypervisor = info.flags.count("hypervisor") > 0;
  // Without vmx/svm the KVM that is there (if any) is not a hardware one: say which it is.
  std::string kvm_here;
  if (!backend.modules.empty()) {
    const auto b = backend.primary();
    kvm_here = isParavirtualKvmBackend(b)
                   ? "; KVM here is " + b +
                         " (paravirtual: guests need a PVM-enabled kernel, see kvm-device)"
                   : "; KVM backend present: " + describeBackend(backend) + " (see kvm-device)";
  }
  CheckResult r;
  if (info.arch == "arm64" && !kvm_registered) {
    // arm64 has no CPU flag for it: the kernel's KVM device is the only signal, and it is unread.
    r = makeResult(kCpuVirtCheck, Status::Unknown, "SysfsUnreadable",
                   "arm64 CPU; sysfs cannot be read to see whether the kernel has KVM",
                   "give the agent the host's /sys (--path.sysfs)");
    r.evidence.push_back({"cpuinfo arch", info.arch});
    return r;
  }
  if (info.arch == "arm64") {
    const bool kvm_misc_present = *kvm_registered;
    if (kvm_misc_present) {
      r = makeResult(kCpuVirtCheck, Status::Pass, "Arm64KvmSupported",
                     "arm64 CPU with KVM support in the running kernel");
    } else {
      r = makeResult(
          kCpuVirtCheck, Status::Warn, "Arm64KvmNotVisible",
          "arm64 CPU; the kernel shows no KVM device (EL2 not available or kvm not loaded)",
          "boot the kernel at EL2 (bare metal or a nested-capable hypervisor) with KVM "
          "enabled; see the kvm-device check");
    }
    r.labels["cpu-virt"] = kvm_misc_present ? "arm64" : "none";
  } else if (info.flags.count("vmx")) {
    r = makeResult(kCpuVirtCheck, Status::Pass, "VmxPresent", "Intel VT-x (vmx) present");
    r.labels["cpu-virt"] = "vmx";
  } else if (info.flags.count("svm")) {
    r = makeResult(kCpuVirtCheck, Status::Pass, "SvmPresent", "AMD-V (svm) present");
    r.labels["cpu-virt"] = "svm";
  } else if (hypervisor) {
    r = makeResult(
        kCpuVirtCheck, Status::Fail, "NoHardwareVirtualization",
        "no vmx/svm: this VM's hypervisor does not expose hardware virtualization" + kvm_here,
        "enable nested virtualization on the hypervisor (or use a metal / "
        "nested-capable instance type) so that kvm_intel or kvm_amd can load");
    r.labels["cpu-virt"] = "none";
  } else {
    r = makeResult(kCpuVirtCheck, Status::Fail, "NoHardwareVirtualization",
                   "the CPU reports neither vmx nor svm" + kvm_here,
                   "enable VT-x/AMD-V (SVM) in the firmware setup and reboot");
    r.labels["cpu-virt"] = "none";
  }
  r.evidence.push_back({"cpuinfo arch", info.arch});
  if (!info.model.empty()) r.evidence.push_back({"cpuinfo model name", info.model});
  r.evidence.push_back({"cpuinfo flags", info.flags.count("vmx")   ? "vmx"
                                         : info.flags.count("svm") ? "svm"
                                                                   : "no vmx/svm"});
  r.evidence.push_back({"cpuinfo hypervisor flag", hypervisor ? "present" : "absent"});
  r.evidence.push_back({"kvm backend", backendEvidence(backend)});
  r.labels["hypervisor"] = hypervisor ? "true" : "false";
  return r;
}

CheckResult CpuVirtProbe::run(const ProbeContext& ctx) {
  auto text = readFile(ctx.host.proc("cpuinfo"));
  if (!text) {
    return makeResult(kCpuVirtCheck, Status::Unknown, "CpuInfoUnreadable", text.error().message,
                      "check that the host's /proc is mounted (--host-root / --path.procfs)");
  }
  auto r = evaluateCpuVirt(parseCpuInfo(*text), miscRegistered(ctx.host, "kvm"),
                           readKvmBackend(ctx.host));
  r.evidence.insert(r.evidence.begin(), {"source", ctx.host.proc("cpuinfo")});
  return r;
}

}  // namespace nodegate
