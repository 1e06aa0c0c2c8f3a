// kernel-modules: are the modules KubeVirt needs loaded or built into the running kernel?
// Built-in modules never show in /proc/modules, so modules.builtin of the *host's* running
// release is read too; the release comes from <proc>/sys/kernel/osrelease because uname() in a
// container reports the same kernel but a chart may point --path.procfs elsewhere on purpose.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvm_backend.h"
#include "nodegate/probe.h"

namespace nodegate {

// /proc/modules ("name size refcnt deps state addr") -> module names. Also accepts lsmod
// output: the header and any line whose second field is not a size are skipped.
std::set<std::string> parseProcModules(std::string_view text);

// modules.builtin ("kernel/drivers/net/tun.ko" per line) -> module names, '-' folded to '_'
// as the kernel does. Lines that are not a .ko path are skipped.
std::set<std::string> parseModulesBuiltin(std::string_view text);

// modules.devname ("tun net/tun c10:200") -> module name -> device node it autoloads on. A
// module listed there is loaded by the kernel on the first open of its node (kmod creates the
// node at boot), so "not loaded yet" is not "missing".
std::map<std::string, std::string> parseModulesDevname(std::string_view text);

// A module name as the kernel spells it in /proc/modules and /sys/module ('-' -> '_').
std::string normalizeModuleName(std::string_view name);

// Whether the running kernel loads modules at all: true when <proc>/modules is readable, false
// when it is absent from a procfs that is there (CONFIG_MODULES=n: everything is built in),
// nullopt when procfs cannot be read.
std::optional<bool> kernelModuleSupport(const HostRoot& host);

// How to get modules into the running kernel: modprobe where it loads modules, a kernel built
// with them (their Kconfig options) where it cannot. module_support nullopt reads as true.
std::string moduleHint(const std::vector<std::string>& modules, std::optional<bool> module_support);

struct ModulesObservation {
  std::string arch;        // cpuinfo arch
  std::string cpu_module;  // the vendor module the CPU flags allow (kvm_intel / kvm_amd / "")
  KvmBackend backend;      // the KVM backend really loaded or built in
  std::optional<bool> kvm_registered;            // arm64: KVM is a boolean Kconfig, never a module
  std::optional<std::set<std::string>> loaded;   // nullopt: /proc/modules unreadable
  std::optional<std::set<std::string>> builtin;  // nullopt: modules.builtin unreadable
  std::map<std::string, std::string> devname;    // modules.devname (empty if unreadable)
  std::set<std::string> in_sysfs;  // required names with a <sys>/module/<name> directory
  // Required names whose driver registered its misc device (<sys>/class/misc/kvm, tun,
  // vhost-net): proof the code is in the running kernel however it got there.
  std::set<std::string> misc_registered;
  bool no_module_support = false;  // <proc>/modules absent: a kernel built without modules
  std::string release;             // "" when osrelease is unreadable
  std::string loaded_error, builtin_error;
  // Why sysfs could not be read: in_sysfs and misc_registered are then empty for want of a
  // look, and a module found nowhere else is undecided, not missing.
  std::string sysfs_error;
};

// Names this host needs, each with whether it is required (FAIL when missing) or only
// recommended (shown in the evidence; its own check judges it: vhost_net is the vhost-net
// check's fact, so its absence does not change this check's status, #21).
std::map<std::string, bool> requiredModules(const ModulesObservation& obs);
// The check that judges a recommended module ("vhost_net" -> "vhost-net").
std::string recommendedBy(const std::string& module);
bool noBackendPossible(const ModulesObservation& obs);

CheckResult evaluateKernelModules(const ModulesObservation& obs);

inline constexpr char kKernelModulesCheck[] = "kernel-modules";
inline const ProbeSpec kKernelModulesSpec{
    .name = kKernelModulesCheck,
    .summary = "kvm and its backend loaded or built in (<proc>/modules, modules.builtin)",
    .triggers = kTriggerTimer | kTriggerUdevMisc,
    .condition = "VirtualizationReady",
    .default_required = true,
    .settings = {},
};

class KernelModulesProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kKernelModulesSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
