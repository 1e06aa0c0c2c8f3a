#include "nested_virt.h"

#include "kernel_modules.h"
#include "kvm_backend.h"
#include "text.h"

namespace nodegate {

std::optional<bool> parseSysfsBool(std::string_view text) {
  text = trim(text);
  if (text == "Y" || text == "y" || text == "1") return true;
  if (text == "N" || text == "n" || text == "0") return false;
  return std::nullopt;
}

CheckResult evaluateNestedVirt(const NestedObservation& o) {
  const bool on = o.nested.value_or(false);
  CheckResult r;
  if (!o.unreadable.empty()) {
    // Not knowing is not "off": no label is published for a fact that was not read.
    r = makeResult(kNestedVirtCheck, Status::Unknown, "InputUnreadable", o.unreadable,
                   "mount the host's /proc and /sys read-only into the agent (--host-root, "
                   "--path.procfs, --path.sysfs)");
    r.evidence.push_back({"policy checks.nested-virt.required", o.required ? "true" : "false"});
    return r;
  }
  if (on) {
    r = makeResult(kNestedVirtCheck, Status::Pass, "NestedEnabled",
                   "nested virtualization is enabled (" + o.module + " nested=" + o.raw + ")");
  } else {
    std::string why;
    if (!o.module.empty())
      why = o.nested ? o.module + " nested=" + o.raw
                     : o.module + " is not loaded or has no nested parameter";
    else if (!o.backend.empty())
      why = "the KVM backend is " + o.backend + ", which has no nested parameter";
    else
      why = "no KVM backend is loaded and the CPU allows none: no vmx/svm";
    std::string hint;
    if (o.module.empty())
      hint = "nested virtualization needs kvm_intel or kvm_amd (see cpu-virt)";
    else if (!o.loads_modules)
      hint = "enable it: boot with " + o.module +
             ".nested=1 on the kernel command line (this "
             "kernel has no loadable modules; " +
             o.module + " is built in)";
    else
      hint = "enable it: echo 'options " + o.module + " nested=1' > /etc/modprobe.d/" + o.module +
             ".conf, then reload " + o.module + " with no VM running";
    if (o.required) {
      r = makeResult(kNestedVirtCheck, Status::Warn, "NestedDisabled",
                     "policy requires nested virtualization but it is off: " + why, hint);
    } else {
      // Not required: a reported value, not a problem (absence is a value).
      r = makeResult(kNestedVirtCheck, Status::Pass, "NestedDisabled",
                     "nested virtualization is off (" + why + "); the policy does not require it");
    }
  }
  r.labels["nested-virt"] = on ? "true" : "false";
  if (!o.module.empty())
    r.evidence.push_back(
        {"sysfs module/" + o.module + "/parameters/nested", o.raw.empty() ? "absent" : o.raw});
  if (!o.backend.empty()) r.evidence.push_back({"kvm backend", o.backend});
  r.evidence.push_back(
      {"cpuinfo hypervisor flag", o.cpu_hypervisor ? "present (node is a guest)" : "absent"});
  r.evidence.push_back({"policy checks.nested-virt.required", o.required ? "true" : "false"});
  return r;
}

CheckResult NestedVirtProbe::run(const ProbeContext& ctx) {
  NestedObservation o;
  o.required = ctx.config.flag(kNestedVirtRequiredSetting);
  auto kvm = readKvmHostFacts(ctx.host);
  if (!kvm.cpuinfo_read || kvm.arch.empty()) {
    o.unreadable = "cannot read the CPU's architecture and flags from " + ctx.host.proc("cpuinfo");
    return evaluateNestedVirt(o);
  }
  o.arch = kvm.arch;
  o.cpu_hypervisor = kvm.hypervisor;
  o.backend = kvm.backend.primary();
  if (o.backend.empty() && !kvm.backend.unreadable.empty()) {
    o.unreadable = kvm.backend.unreadable;  // no backend seen is not "none loaded"
    return evaluateNestedVirt(o);
  }
  o.loads_modules = kernelModuleSupport(ctx.host) != false;
  // The parameter of the backend really there; with none, of the one the CPU would load.
  if (o.backend == "kvm_intel" || o.backend == "kvm_amd")
    o.module = o.backend;
  else if (o.backend.empty())
    o.module = kvm.cpu_module;
  if (o.module.empty()) return evaluateNestedVirt(o);  // no parameter to read: a value
  if (auto sys = sysfsReadable(ctx.host); !sys) {
    o.unreadable = sys.error().message;
    return evaluateNestedVirt(o);
  }
  const std::string param = ctx.host.sys("module/" + o.module + "/parameters/nested");
  if (auto v = readValue(param)) {
    o.raw = *v;
    o.nested = parseSysfsBool(*v);
    if (!o.nested) o.unreadable = param + " holds \"" + *v + "\", not Y/N/1/0";
  } else if (v.error().code != ENOENT) {
    o.unreadable = v.error().message;  // EACCES, a FIFO, a file too large
  }  // ENOENT in a readable sysfs: the module is not loaded, a value
  return evaluateNestedVirt(o);
}

}  // namespace nodegate
