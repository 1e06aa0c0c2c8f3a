#include "nested_virt.h"

#include "cpu_virt.h"
#include "kvm_device.h"
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
  if (on) {
    r = makeResult("nested-virt", Status::Pass, "NestedEnabled",
                   "nested virtualization is enabled (" + o.module + " nested=" + o.raw + ")");
  } else {
    std::string why = o.module.empty() ? "no KVM vendor module parameter to read"
                      : o.nested       ? o.module + " nested=" + o.raw
                                       : o.module + " is not loaded or has no nested parameter";
    std::string hint =
        o.module.empty()
            ? std::string("nested virtualization needs kvm_intel or kvm_amd (see cpu-virt)")
            : "enable it: echo 'options " + o.module + " nested=1' > /etc/modprobe.d/" + o.module +
                  ".conf, then reload " + o.module + " with no VM running";
    if (o.required) {
      r = makeResult("nested-virt", Status::Warn, "NestedDisabled",
                     "policy requires nested virtualization but it is off: " + why, hint);
    } else {
      // Not required: a reported value, not a problem (absence is a value).
      r = makeResult("nested-virt", Status::Pass, "NestedDisabled",
                     "nested virtualization is off (" + why + "); the policy does not require it");
    }
  }
  r.labels["nested-virt"] = on ? "true" : "false";
  if (!o.module.empty())
    r.evidence.push_back(
        {"sysfs module/" + o.module + "/parameters/nested", o.raw.empty() ? "absent" : o.raw});
  r.evidence.push_back(
      {"cpuinfo hypervisor flag", o.cpu_hypervisor ? "present (node is a guest)" : "absent"});
  r.evidence.push_back({"policy checks.nested-virt.required", o.required ? "true" : "false"});
  return r;
}

CheckResult NestedVirtProbe::run(const ProbeContext& ctx) {
  NestedObservation o;
  o.required = ctx.config.flag("nested-virt", "required", false);
  if (auto text = readFile(ctx.host.proc("cpuinfo"))) {
    auto cpu = parseCpuInfo(*text);
    o.arch = cpu.arch;
    o.module = kvmVendorModule(cpu);
    o.cpu_hypervisor = cpu.flags.count("hypervisor") > 0;
  }
  if (!o.module.empty()) {
    if (auto v = readValue(ctx.host.sys("module/" + o.module + "/parameters/nested"))) {
      o.raw = *v;
      o.nested = parseSysfsBool(*v);
    }
  }
  return evaluateNestedVirt(o);
}

}  // namespace nodegate
