// cgroups: does the host offer the controllers virt-launcher's pods and QEMU need?
// v2 (unified): <sys>/fs/cgroup/cgroup.controllers lists them; the devices controller is an
// eBPF program there and needs no entry. v1: <proc>/cgroups says which controllers the kernel
// has enabled and whether each is attached to a hierarchy, and <proc>/1/mountinfo says where
// the host mounted them. PID 1's mountinfo rather than <proc>/self/mounts: the agent runs in a
// container whose own mount namespace hides the host's cgroup mounts, while PID 1 of the
// host's procfs sees the host's.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "mountinfo.h"
#include "nodegate/probe.h"

namespace nodegate {

// cgroup.controllers: space-separated names.
std::set<std::string> parseCgroupControllers(std::string_view text);

struct ProcCgroup {
  unsigned hierarchy = 0;  // 0: not attached to a v1 hierarchy (or owned by v2)
  bool enabled = false;
};
// /proc/cgroups: "#subsys_name hierarchy num_cgroups enabled" rows. Malformed rows are skipped.
std::map<std::string, ProcCgroup> parseProcCgroups(std::string_view text);

struct CgroupsObservation {
  int version = 0;  // 2, 1, or 0 when neither view could be read
  std::set<std::string> v2_controllers;
  std::map<std::string, ProcCgroup> v1;
  std::optional<std::vector<MountEntry>> mounts;  // nullopt: mountinfo unreadable
  std::string error;
};

CheckResult evaluateCgroups(const CgroupsObservation& obs);

inline constexpr char kCgroupsCheck[] = "cgroups";
inline const ProbeSpec kCgroupsSpec{
    .name = kCgroupsCheck,
    .summary = "cpu, cpuset, memory, io/blkio, pids controllers (devices on v1)",
    .triggers = kTriggerTimer | kTriggerMounts,
    .condition = "",
    .default_required = false,
    .settings = {},
};

class CgroupsProbe final : public Probe {
 public:
  const ProbeSpec& spec() const override { return kCgroupsSpec; }
  CheckResult run(const ProbeContext& ctx) override;
};

}  // namespace nodegate
