// Which KVM this host has: the CPU's side (architecture, vmx/svm, the hypervisor flag) and the
// kernel's side (the backend module that is really loaded or built in). cpu-virt, kvm-device,
// kernel-modules and nested-virt all tell the reader about the same KVM, so they read it here,
// once, the same way. The backend comes from <proc>/modules and <sys>/module — never from the
// CPU vendor: an AMD CPU without svm does not run kvm_amd (this build machine is one, and runs
// kvm_pvm instead).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/host_root.h"

namespace nodegate {

struct CpuInfo;

// The KVM backend modules nodegate knows by name. kvm_pvm is the PVM patch set's paravirtual
// backend: it needs no VT-x/AMD-V, but it runs only guests built for PVM, not a stock kernel.
// kvm_hv and kvm_pr are POWER's; arm64 and s390 have no separate backend (KVM is in kvm itself).
bool isKnownKvmBackend(std::string_view module);
bool isParavirtualKvmBackend(std::string_view module);

struct KvmBackend {
  // Backend modules present, hardware ones first (kvm_intel, kvm_amd), then kvm_pvm, then any
  // other kvm_* name found under <sys>/module. Empty: none is loaded or built in.
  std::vector<std::string> modules;
  // How each was seen, for evidence: "kvm_pvm built in (<sys>/module/kvm_pvm)".
  std::string seen;
  // Why the kernel's list could not be read (<sys>/module not listable): modules then holds
  // only what <proc>/modules showed, and an empty list is not "none". "" when it was read.
  std::string unreadable;
  // The one that backs /dev/kvm, as far as nodegate can tell: the first of modules, or "".
  std::string primary() const { return modules.empty() ? std::string() : modules.front(); }
};

// Pure: the backend from what the kernel lists. loaded: <proc>/modules names (nullopt when
// unreadable or absent); sysfs: the names of <sys>/module/* entries that start with "kvm";
// paths name the two sources in the evidence.
KvmBackend pickKvmBackend(const std::optional<std::set<std::string>>& loaded,
                          const std::set<std::string>& sysfs, std::string_view proc_modules_path,
                          std::string_view sys_module_path);

// The vendor module the CPU flags allow: kvm_intel for vmx, kvm_amd for svm, "" otherwise
// (arm64 builds KVM into the kernel; an x86 CPU without either flag can load neither).
std::string cpuKvmModule(const CpuInfo& cpu);

struct KvmHostFacts {
  bool cpuinfo_read = false;
  std::string arch;         // "x86", "arm64", "" (cpuinfo unreadable or neither)
  std::string cpu_module;   // cpuKvmModule()
  bool hypervisor = false;  // the CPU's hypervisor flag: this node is itself a VM
  KvmBackend backend;
};

KvmHostFacts readKvmHostFacts(const HostRoot& host);
// The backend part alone (for a caller that has read cpuinfo itself).
KvmBackend readKvmBackend(const HostRoot& host);

// "kvm_pvm (paravirtual)", "kvm_intel", "none loaded", "unknown (...)": the backend in a
// reader's words.
std::string describeBackend(const KvmBackend& backend);
// The evidence line: how each module was seen, "none loaded", or why it is unknown.
std::string backendEvidence(const KvmBackend& backend);

}  // namespace nodegate
