#include "iommu.h"

#include <filesystem>

#include "cpu_virt.h"
#include "nodegate/host_root.h"
#include "text.h"

namespace nodegate {

std::string iommuCmdlineArgs(std::string_view cmdline) {
  std::string out;
  forEachWord(trim(cmdline), [&](std::string_view w) {
    auto key = w.substr(0, w.find('='));
    if (key == "intel_iommu" || key == "amd_iommu" || key == "iommu" ||
        key == "iommu.passthrough" || key == "iommu.strict") {
      if (!out.empty()) out += ' ';
      out.append(w);
    }
  });
  return out;
}

namespace {

// Entries of dir; -1 when it does not exist, the error when it cannot be listed.
Result<int> countEntries(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return -1;
  if (ec) return Error{ec.value(), "failed to list " + dir + ": " + ec.message()};
  int n = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return Error{ec.value(), "failed to list " + dir + ": " + ec.message()};
    ++n;
  }
  return n;
}

}  // namespace

CheckResult evaluateIommu(const IommuObservation& o) {
  const bool active = o.groups > 0;
  CheckResult r;
  std::string hint = o.arch == "arm64"
                         ? "enable the SMMU in firmware (ACPI IORT / device tree) and the kernel"
                         : "enable VT-d / AMD-Vi in the firmware setup and boot with "
                           "intel_iommu=on (Intel) or amd_iommu=on, plus iommu=pt";
  if (active) {
    r = makeResult(kIommuCheck, Status::Pass, "IommuActive",
                   "IOMMU active with " + std::to_string(o.groups) + " groups");
  } else if (o.groups < 0) {
    // Not knowing is not "no IOMMU": UNKNOWN whatever the policy, and no label.
    r = makeResult(kIommuCheck, Status::Unknown, "SysfsUnreadable",
                   "cannot read the IOMMU sysfs directories" +
                       (o.error.empty() ? std::string() : ": " + o.error),
                   "check that the host's /sys is mounted (--host-root / --path.sysfs)");
  } else if (o.required) {
    r = makeResult(kIommuCheck, Status::Fail, "IommuInactive",
                   "policy requires an IOMMU (passthrough) but the kernel has no IOMMU groups",
                   hint);
  } else {
    r = makeResult(kIommuCheck, Status::Pass, "IommuInactive",
                   "no IOMMU groups; the policy does not require passthrough");
  }
  if (o.groups >= 0) r.labels["iommu"] = active ? "true" : "false";
  r.evidence.push_back({"sysfs class/iommu", o.iommu_units < 0
                                                 ? "unreadable"
                                                 : std::to_string(o.iommu_units) + " units"});
  r.evidence.push_back({"sysfs kernel/iommu_groups",
                        o.groups < 0 ? "unreadable" : std::to_string(o.groups) + " groups"});
  r.evidence.push_back(
      {"kernel cmdline", o.cmdline_args.empty() ? "no iommu switches" : o.cmdline_args});
  r.evidence.push_back({"policy checks.iommu.required", o.required ? "true" : "false"});
  return r;
}

CheckResult IommuProbe::run(const ProbeContext& ctx) {
  IommuObservation o;
  o.required = ctx.config.flag(kIommuRequiredSetting);
  auto units = countEntries(ctx.host.sys("class/iommu"));
  auto groups = countEntries(ctx.host.sys("kernel/iommu_groups"));
  auto sys = sysfsReadable(ctx.host);
  // Absent directories in a readable sysfs mean a kernel without IOMMU support: zero, not
  // "could not read". An unreadable sysfs or directory stays undecided (-1).
  auto count = [&](const Result<int>& c) {
    if (!c) {
      o.error = c.error().message;
      return -1;
    }
    if (*c >= 0) return *c;
    if (!sys) o.error = sys.error().message;
    return sys ? 0 : -1;
  };
  o.iommu_units = count(units);
  o.groups = count(groups);
  if (auto c = readFile(ctx.host.proc("cmdline"))) o.cmdline_args = iommuCmdlineArgs(*c);
  if (auto text = readFile(ctx.host.proc("cpuinfo"))) o.arch = parseCpuInfo(*text).arch;
  return evaluateIommu(o);
}

}  // namespace nodegate
