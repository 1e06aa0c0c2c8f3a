#include "lvm.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "device_node.h"

namespace nodegate {
namespace {

constexpr const char* kCheck = kLvmCheck;
constexpr const char* kContainerHint =
    "lvm ran without the host's /dev and /run/lvm (typical inside a container): run it in the "
    "host's mount namespace with --lvm-command 'nsenter -t 1 -m -- lvm' (needs hostPID), or "
    "mount the host's /dev and /run/lvm into the container";

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %%", v);
  return buf;
}

std::string bytes(std::optional<std::uint64_t> v) {
  if (!v) return "?";
  static const char* kUnit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double d = static_cast<double>(*v);
  int u = 0;
  while (d >= 1024 && u < 5) {
    d /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", d, kUnit[u]);
  return buf;
}

MetricSample gauge(std::string name, std::string help, std::map<std::string, std::string> labels,
                   double value) {
  return MetricSample{std::move(name), std::move(help), std::move(labels), value};
}

// Health problems of one LV other than thin-pool space (which thinPoolFindings covers).
void lvHealthFindings(const LvmLv& lv, std::vector<StorageFinding>* out) {
  const std::string who = "LV " + lv.full_name;
  const LvAttr& a = lv.attr;
  const LvHealth h = lv.effectiveHealth();
  // A thin pool's space states are reported by thinPoolFindings with the pool's own reasons.
  const bool pool_space =
      a.isThinPool() && (h == LvHealth::OutOfData || h == LvHealth::MetadataReadOnly);
  if (h == LvHealth::MismatchesExist) {
    out->push_back(
        {Status::Warn, "LogicalVolumeMismatches", who + " has raid mismatches (copies differ)",
         "run lvchange --syncaction repair " + lv.full_name + " and check the disks' SMART data"});
    return;
  }
  if (isProblem(h) && !pool_space) {
    const std::string word = h == LvHealth::Other ? lv.health_text : std::string(toString(h));
    std::string hint = "check the disks under " + lv.vg + " (dmesg, pvs -o+pv_missing)";
    if (h == LvHealth::Partial)
      hint = "a PV under " + lv.full_name +
             " is missing: bring the disk back or replace it "
             "(vgreduce --removemissing / lvconvert --repair)";
    else if (h == LvHealth::RefreshNeeded)
      hint = "a raid image failed and returned: lvchange --refresh " + lv.full_name;
    else if (h == LvHealth::Failed && a.isThinPool())
      hint = "the thin pool failed: deactivate it and run lvconvert --repair " + lv.full_name +
             " (thin_check); every thin LV in it is affected";
    out->push_back({Status::Fail, "LogicalVolumeUnhealthy", who + " health: " + word, hint});
    return;
  }
  switch (a.state) {
    case 'I':
    case 'S':
      out->push_back(
          {Status::Fail, "LogicalVolumeUnhealthy", who + " is an invalid snapshot (it overflowed)",
           "remove the snapshot (lvremove " + lv.full_name + ") and size the next one larger"});
      break;
    case 'm':
    case 'M':
      out->push_back({Status::Fail, "LogicalVolumeUnhealthy", who + " snapshot merge failed",
                      "check dmesg and retry with lvconvert --merge " + lv.full_name});
      break;
    case 'c':
    case 'C':
      out->push_back({Status::Fail, "LogicalVolumeUnhealthy", who + " thin pool check needed",
                      "deactivate the pool and run lvconvert --repair " + lv.full_name});
      break;
    case 's':
    case 'd':
    case 'i':
      out->push_back({Status::Warn, "LogicalVolumeStateAbnormal", who + " is " + describeLvAttr(a),
                      "inspect with dmsetup info and dmsetup table; a suspended device blocks "
                      "every write to it"});
      break;
    default:
      break;
  }
}

}  // namespace

LvmPolicy lvmPolicy(const Config& cfg) {
  LvmPolicy p;
  p.data_warn = cfg.number(kLvmDataWarnSetting);
  p.data_fail = cfg.number(kLvmDataFailSetting);
  p.metadata_warn = cfg.number(kLvmMetadataWarnSetting);
  p.metadata_fail = cfg.number(kLvmMetadataFailSetting);
  p.volume_group = cfg.text(kLvmVolumeGroupSetting);
  p.max_lv_series = static_cast<std::size_t>(cfg.number(kLvmMaxLvSeriesSetting));
  return p;
}

CheckResult combineFindings(std::string check, const std::vector<StorageFinding>& findings,
                            std::string pass_reason, std::string pass_message) {
  const StorageFinding* worst = nullptr;
  for (const auto& f : findings)
    if (f.status != Status::Pass && (!worst || severity(f.status) > severity(worst->status)))
      worst = &f;
  if (!worst)
    return makeResult(std::move(check), Status::Pass, std::move(pass_reason),
                      std::move(pass_message));
  // The worst finding leads; others of any non-PASS status follow so one line tells it all.
  std::string message = worst->message;
  int shown = 1, hidden = 0;
  for (const auto& f : findings) {
    if (&f == worst || f.status == Status::Pass) continue;
    if (shown < 3) {
      message += "; " + f.message;
      ++shown;
    } else {
      ++hidden;
    }
  }
  if (hidden > 0) message += " (+" + std::to_string(hidden) + " more)";
  return makeResult(std::move(check), worst->status, worst->reason, message, worst->hint);
}

void thinPoolFindings(const LvmLv& pool, const LvmPolicy& policy,
                      std::vector<StorageFinding>* out) {
  const std::string who = "thin pool " + pool.full_name;
  // lv_when_full=queue means a full pool makes writes hang (VMs pause) instead of failing.
  const std::string full_effect = pool.when_full == "queue"
                                      ? "writes queue when it is full (VMs pause)"
                                      : "writes fail when it is full";
  const bool out_of_data = pool.effectiveHealth() == LvHealth::OutOfData;
  const bool meta_ro = pool.effectiveHealth() == LvHealth::MetadataReadOnly;
  const std::string extend = "extend it (lvextend -L +SIZE " + pool.full_name +
                             ", after vgextend if the VG has no free space) or free space in "
                             "it (delete unused thin LVs and snapshots, fstrim inside guests)";
  if (out_of_data) {
    out->push_back({Status::Fail, "ThinPoolDataPressure",
                    who + " is out of data space: " + full_effect, extend});
  } else if (pool.data_percent) {
    const double d = *pool.data_percent;
    if (d >= policy.data_fail)
      out->push_back(
          {Status::Fail, "ThinPoolDataPressure",
           who + " data " + percent(d) + " >= " + percent(policy.data_fail) + "; " + full_effect,
           extend});
    else if (d >= policy.data_warn)
      out->push_back(
          {Status::Warn, "ThinPoolDataPressure",
           who + " data " + percent(d) + " >= " + percent(policy.data_warn) + "; " + full_effect,
           extend});
  }
  const std::string meta_hint =
      "extend the pool's metadata (lvextend --poolmetadatasize +SIZE " + pool.full_name + ")";
  if (meta_ro) {
    out->push_back({Status::Fail, "ThinPoolMetadataPressure",
                    who + " metadata is read-only (full or damaged): no new blocks can be "
                          "allocated",
                    meta_hint +
                        "; if it stays read-only, deactivate it and run lvconvert "
                        "--repair " +
                        pool.full_name});
  } else if (pool.metadata_percent) {
    const double m = *pool.metadata_percent;
    if (m >= policy.metadata_fail)
      out->push_back({Status::Fail, "ThinPoolMetadataPressure",
                      who + " metadata " + percent(m) + " >= " + percent(policy.metadata_fail),
                      meta_hint});
    else if (m >= policy.metadata_warn)
      out->push_back({Status::Warn, "ThinPoolMetadataPressure",
                      who + " metadata " + percent(m) + " >= " + percent(policy.metadata_warn),
                      meta_hint});
  }
}

namespace {

CheckResult withCommand(const LvmFetch& fetch, CheckResult r) {
  const std::string command = fetch.lvm_skipped ? fetch.command + " (not run)" : fetch.command;
  r.evidence.insert(r.evidence.begin(), {"lvm command", command});
  if (!fetch.label_scan.empty())
    r.evidence.insert(r.evidence.begin() + 1, {"lvm label scan", fetch.label_scan});
  if (!fetch.run_error.empty()) r.evidence.push_back({"lvm exit", fetch.run_error});
  for (const auto& w : fetch.report.warnings) r.evidence.push_back({"lvm warning", w});
  return r;
}

// The verdict of a run that left no report to judge; nullopt when there is one.
std::optional<CheckResult> noReportResult(const LvmFetch& fetch, const LvmPolicy& policy) {
  const bool managed = !policy.volume_group.empty();
  switch (fetch.failure) {
    case LvmRunFailure::None:
      return std::nullopt;
    case LvmRunFailure::NotFound:
      if (!managed) {
        auto r = makeResult(kCheck, Status::Pass, "NoLocalLvm",
                            "lvm is not installed on this host: no local LVM storage to check");
        r.evidence.push_back({"lvm", fetch.error});
        return r;
      }
      return makeResult(kCheck, Status::Unknown, "LvmNotFound", fetch.error,
                        "volume group " + policy.volume_group +
                            " is configured but lvm is not reachable: install lvm2 on the host, "
                            "or in a container use --lvm-command 'nsenter -t 1 -m -- lvm'");
    case LvmRunFailure::TimedOut:
      return makeResult(
          kCheck, Status::Unknown, "LvmTimeout", fetch.error,
          "lvm hung: look for a stuck device or lock (dmesg, dmsetup info, /run/lock/lvm); raise "
          "checks.lvm.timeout_seconds only if the host is merely slow");
    case LvmRunFailure::Failed:
      return makeResult(kCheck, Status::Unknown, "LvmCommandFailed", fetch.error,
                        "run the lvm command by hand on the node and fix what it reports; check "
                        "--lvm-command");
    case LvmRunFailure::Unparsable:
      return makeResult(
          kCheck, Status::Unknown, "LvmReportUnparsable", fetch.error,
          "check that --lvm-command runs lvm itself (lvm2 >= 2.02.158 for JSON reports)");
    case LvmRunFailure::HelperUnavailable:
      return makeResult(kCheck, Status::Unknown, "DeviceProbeUnavailable", fetch.error,
                        "the device-probe helper does the block-device work: check its "
                        "container (kubectl logs POD -c device-probe) and --device-probe");
  }
  return std::nullopt;
}

// What judging one report produces.
struct LvmJudgement {
  std::vector<StorageFinding> findings;
  std::vector<MetricSample> metrics;
  std::vector<Evidence> evidence;
};

// Why the report may not show every volume group: a failed lvm run, block devices the device
// cgroup refused. Each is UNKNOWN, so an empty or partial report can never read as healthy.
void judgeBlindSpots(const LvmFetch& fetch, LvmJudgement* j) {
  if (!fetch.run_error.empty())
    j->findings.push_back(
        {Status::Unknown, "LvmCommandFailed",
         "lvm failed (" + fetch.run_error +
             ") after printing a report: what it shows is not "
             "a proof of health",
         "run the lvm command by hand on the node as root and fix what it reports; check "
         "--lvm-command (run as a non-root user, lvm prints an empty report and exits 5)"});
  if (!fetch.refused.empty()) {
    std::string names;
    for (std::size_t i = 0; i < fetch.refused.size() && i < 5; ++i)
      names += (names.empty() ? "" : ", ") + fetch.refused[i];
    if (fetch.refused.size() > 5) names += ", ...";
    j->findings.push_back(
        {Status::Unknown, "BlockDevicesRefused",
         "opening " + std::to_string(fetch.refused.size()) + " block devices (" + names +
             ") was refused (EPERM: the device cgroup or a security policy), to nodegate and to "
             "the lvm it runs: volume groups on them cannot be seen",
         deviceCgroupHint("block devices")});
  }
}

void judgeVolumeGroups(const LvmFetch& fetch, const LvmPolicy& policy, LvmJudgement* j) {
  const LvmReport& rep = fetch.report;
  bool managed_seen = false;
  for (const auto& vg : rep.vgs) {
    managed_seen |= vg.name == policy.volume_group;
    std::map<std::string, std::string> l{{"vg", vg.name}};
    if (vg.size)
      j->metrics.push_back(gauge("nodegate_lvm_vg_size_bytes", "Size of the LVM volume group.", l,
                                 static_cast<double>(*vg.size)));
    if (vg.free)
      j->metrics.push_back(gauge("nodegate_lvm_vg_free_bytes",
                                 "Unallocated space in the LVM volume group.", l,
                                 static_cast<double>(*vg.free)));
    std::uint64_t missing = vg.missing_pv_count;
    std::string missing_names;
    for (const auto& pv : rep.pvs) {
      if (pv.vg != vg.name || !pv.missing) continue;
      if (missing == 0) missing = 1;
      missing_names += (missing_names.empty() ? "" : ", ") + pv.uuid;
    }
    j->metrics.push_back(gauge("nodegate_lvm_pv_missing",
                               "Physical volumes of the volume group that lvm cannot find.", l,
                               static_cast<double>(missing)));
    j->evidence.push_back({"volume group " + vg.name,
                           "attr " + vg.attr + ", " + std::to_string(vg.pv_count) + " PVs, size " +
                               bytes(vg.size) + ", free " + bytes(vg.free)});
    if (vg.partial || missing > 0)
      j->findings.push_back({Status::Fail, "VolumeGroupDegraded",
                             "volume group " + vg.name + " is partial: " + std::to_string(missing) +
                                 " of " + std::to_string(vg.pv_count) + " PVs missing" +
                                 (missing_names.empty() ? "" : " (uuid " + missing_names + ")"),
                             "a disk under " + vg.name +
                                 " is gone: check dmesg and cabling; restore it, or "
                                 "replace it and run vgreduce --removemissing " +
                                 vg.name + " (data on the missing PV is lost)"});
  }
  if (rep.vgs.empty()) j->evidence.push_back({"volume groups", "none"});
  if (policy.volume_group.empty() || managed_seen) return;
  // Not in a report that may miss disks (refused devices, a failed run): not known to be gone.
  const bool blind = !fetch.refused.empty() || !fetch.run_error.empty();
  j->findings.push_back(
      {blind ? Status::Unknown : Status::Fail, blind ? "VolumeGroupNotSeen" : "VolumeGroupMissing",
       "volume group " + policy.volume_group +
           (blind ? " is not in a report that cannot see every disk" : " is not on this node"),
       blind ? deviceCgroupHint("block devices")
             : "create it (vgcreate " + policy.volume_group +
                   " DISK...) or fix checks.lvm.volume_group; the local CSI driver cannot "
                   "provision without it"});
}

void judgeLogicalVolumes(const LvmReport& rep, const LvmPolicy& policy, LvmJudgement* j) {
  std::size_t unknown_state = 0, inactive = 0, series = 0, dropped = 0;
  std::string unknown_example;
  for (const auto& lv : rep.lvs) {
    if (lv.attr.stateUnknown() || lv.effectiveHealth() == LvHealth::Unknown) {
      if (unknown_state++ == 0) unknown_example = lv.full_name + " " + lv.attr_text;
    } else if (lv.attr.valid && lv.attr.state == '-') {
      ++inactive;
    }
    if (lv.attr.isThinPool()) {
      thinPoolFindings(lv, policy, &j->findings);
      std::map<std::string, std::string> l{{"vg", lv.vg}, {"lv", lv.name}};
      if (lv.data_percent)
        j->metrics.push_back(gauge("nodegate_lvm_thin_pool_data_ratio",
                                   "Used fraction of the thin pool's data space (0-1).", l,
                                   *lv.data_percent / 100.0));
      if (lv.metadata_percent)
        j->metrics.push_back(gauge("nodegate_lvm_thin_pool_metadata_ratio",
                                   "Used fraction of the thin pool's metadata space (0-1).", l,
                                   *lv.metadata_percent / 100.0));
      std::string seen = lv.data_percent ? "data " + percent(*lv.data_percent)
                                         : std::string("data usage unknown (inactive?)");
      seen += lv.metadata_percent ? ", metadata " + percent(*lv.metadata_percent) : "";
      seen += ", size " + bytes(lv.size);
      if (!lv.when_full.empty()) seen += ", lv_when_full=" + lv.when_full;
      if (lv.when_full == "queue") seen += " (writes hang when full)";
      j->evidence.push_back({"thin pool " + lv.full_name, seen});
    }
    if (lv.hidden()) continue;
    lvHealthFindings(lv, &j->findings);
    if (series < policy.max_lv_series) {
      ++series;
      const std::string status =
          lv.attr.stateUnknown() ? "unknown" : std::string(toString(lv.effectiveHealth()));
      j->metrics.push_back(gauge("nodegate_lvm_lv_health",
                                 "Health of the logical volume: 1 for its current "
                                 "lv_health_status (ok, partial, out_of_data, "
                                 "metadata_read_only, failed, ...).",
                                 {{"vg", lv.vg}, {"lv", lv.name}, {"status", status}}, 1));
    } else {
      ++dropped;
    }
  }
  if (unknown_state > 0)
    j->findings.push_back({Status::Unknown, "LvmStateUnknown",
                           std::to_string(unknown_state) + " LVs report unknown state (" +
                               unknown_example + "): lvm could not ask device-mapper",
                           kContainerHint});
  for (const auto& e : rep.log)
    if (e.type == "error") j->evidence.push_back({"lvm log error", e.object + ": " + e.message});
  j->evidence.push_back({"logical volumes", std::to_string(rep.lvs.size()) + " (" +
                                                std::to_string(inactive) +
                                                " inactive; inactive is not read-only)"});
  if (dropped > 0)
    j->evidence.push_back(
        {"nodegate_lvm_lv_health",
         std::to_string(dropped) + " LVs over checks.lvm.max_lv_series not exported"});
}

}  // namespace

CheckResult evaluateLvm(const LvmFetch& fetch, const LvmPolicy& policy) {
  if (auto failed = noReportResult(fetch, policy)) return withCommand(fetch, std::move(*failed));
  const LvmReport& rep = fetch.report;
  LvmJudgement j;
  if (!fetch.lvm_skipped) j.evidence.push_back({"lvm report format", rep.format});
  judgeBlindSpots(fetch, &j);
  judgeVolumeGroups(fetch, policy, &j);
  judgeLogicalVolumes(rep, policy, &j);

  CheckResult r;
  if (rep.vgs.empty() && policy.volume_group.empty() && j.findings.empty()) {
    r = makeResult(kCheck, Status::Pass, "NoVolumeGroups",
                   fetch.lvm_skipped ? "no block device lvm could read carries an LVM2 label: "
                                       "this host has no volume groups"
                                     : "lvm is installed but this host has no volume groups");
  } else {
    r = combineFindings(kCheck, j.findings, "VolumeGroupsHealthy",
                        std::to_string(rep.vgs.size()) + " volume groups complete, " +
                            "thin pools under thresholds, no unhealthy LV");
  }
  r.evidence = std::move(j.evidence);
  r.metrics = std::move(j.metrics);
  return withCommand(fetch, std::move(r));
}

CheckResult LvmProbe::run(const ProbeContext& ctx) {
  // max_age 0: the lvm probe always looks afresh (label scan, then lvm when needed); local-pv
  // reuses this look.
  auto fetch = source_->get(ctx.host, ctx.config, std::chrono::milliseconds(0));
  return evaluateLvm(*fetch, lvmPolicy(ctx.config));
}

}  // namespace nodegate
