#include "cgroups.h"

#include "nodegate/host_root.h"
#include "text.h"

namespace nodegate {
namespace {

void appendWord(std::string& list, std::string_view word) {
  if (!list.empty()) list += ' ';
  list.append(word);
}

}  // namespace

std::set<std::string> parseCgroupControllers(std::string_view text) {
  std::set<std::string> out;
  forEachWord(trim(text), [&](std::string_view w) {
    if (w.size() <= 64) out.emplace(w);
  });
  return out;
}

std::map<std::string, ProcCgroup> parseProcCgroups(std::string_view text) {
  std::map<std::string, ProcCgroup> out;
  forEachLine(text, [&](std::string_view line) {
    if (trim(line).empty() || trim(line).front() == '#') return;
    std::string_view f[4];
    int n = 0;
    forEachWord(line, [&](std::string_view w) {
      if (n < 4) f[n] = w;
      ++n;
    });
    if (n != 4) return;
    auto hier = parseU64(f[1]);
    auto enabled = parseU64(f[3]);
    if (!hier || !parseU64(f[2]) || !enabled || *hier > 0xffffffffu || *enabled > 1) return;
    out[std::string(f[0])] = ProcCgroup{static_cast<unsigned>(*hier), *enabled == 1};
  });
  return out;
}

CheckResult evaluateCgroups(const CgroupsObservation& o) {
  if (o.version == 0) {
    return makeResult(
        kCgroupsCheck, Status::Unknown, "CgroupsUnreadable",
        "cannot read cgroup.controllers (v2) nor the procfs cgroups file (v1): " + o.error,
        "check that the host's /sys and /proc are mounted (--host-root)");
  }
  std::vector<std::string> required =
      o.version == 2 ? std::vector<std::string>{"cpu", "cpuset", "memory", "io", "pids"}
                     : std::vector<std::string>{"cpu",   "cpuacct", "cpuset", "memory",
                                                "blkio", "pids",    "devices"};
  std::string present, missing;
  std::vector<Evidence> ev;
  for (const auto& c : required) {
    bool ok = false;
    if (o.version == 2) {
      ok = o.v2_controllers.count(c) > 0;
    } else {
      auto it = o.v1.find(c);
      std::string where;
      if (it != o.v1.end() && it->second.enabled && it->second.hierarchy > 0) {
        ok = true;
        if (o.mounts) {
          ok = false;
          for (const auto& m : *o.mounts)
            if (m.fstype == "cgroup" && hasMountOption(m.super_options, c)) {
              ok = true;
              where = m.mount_point;
              break;
            }
        }
      }
      ev.push_back({"cgroup v1 " + c, ok ? "mounted at " + (where.empty() ? "?" : where)
                                      : it == o.v1.end()    ? "not in the kernel"
                                      : !it->second.enabled ? "disabled"
                                                            : "not mounted"});
    }
    appendWord(ok ? present : missing, c);
  }
  CheckResult r;
  if (!missing.empty()) {
    r = makeResult(kCgroupsCheck, Status::Fail, "ControllersMissing",
                   "cgroup v" + std::to_string(o.version) + " lacks controllers: " + missing,
                   o.version == 2
                       ? "enable them in the kernel (CONFIG_CGROUP_*) and check that no "
                         "cgroup_disable= is on the kernel command line"
                       : "mount the v1 controllers (systemd does it at boot) or boot with "
                         "systemd.unified_cgroup_hierarchy=1 for cgroup v2");
  } else {
    r = makeResult(kCgroupsCheck, Status::Pass, "ControllersPresent",
                   "cgroup v" + std::to_string(o.version) + " with " + present);
  }
  r.evidence.push_back({"cgroup version", std::to_string(o.version)});
  if (o.version == 2) {
    std::string all;
    for (const auto& c : o.v2_controllers) appendWord(all, c);
    r.evidence.push_back({"cgroup.controllers", all.empty() ? "empty" : all});
    r.evidence.push_back({"devices controller", "eBPF device programs (cgroup v2)"});
  }
  for (auto& e : ev) r.evidence.push_back(std::move(e));
  return r;
}

CheckResult CgroupsProbe::run(const ProbeContext& ctx) {
  CgroupsObservation o;
  if (auto text = readFile(ctx.host.sys("fs/cgroup/cgroup.controllers"))) {
    o.version = 2;
    o.v2_controllers = parseCgroupControllers(*text);
  } else if (auto v1 = readFile(ctx.host.proc("cgroups"))) {
    o.version = 1;
    o.v1 = parseProcCgroups(*v1);
    if (auto mi = readFile(ctx.host.proc("1/mountinfo"))) o.mounts = parseMountInfo(*mi);
  } else {
    o.error = v1.error().message;
  }
  return evaluateCgroups(o);
}

}  // namespace nodegate
