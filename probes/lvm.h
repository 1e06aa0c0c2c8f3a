// lvm: are the node's volume groups complete, are its thin pools below their data and metadata
// thresholds, and is every LV healthy? One `lvm fullreport` per cycle through the Exec seam,
// skipped on a host where no block device carries an LVM2 label (PASS/NoVolumeGroups at once;
// LvmReportSource says when the skip is allowed).
//
// No lvm on the host at all is a value, not an error: PASS/NoLocalLvm (a node without local LVM
// has no local LVM storage to be unhealthy), unless the config names a managed volume group
// (checks.lvm.volume_group), in which case the node is meant to have LVM and the same situation
// is UNKNOWN/LvmNotFound — most often a chart whose --lvm-command cannot reach the host's lvm.
//
// What lvm could not see is never health: a run that failed after printing a report (exit 5,
// a crash) and block devices the device cgroup refused each make the check UNKNOWN
// (LvmCommandFailed, BlockDevicesRefused) unless an established fault makes it FAIL.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lvm_source.h"
#include "nodegate/probe.h"

namespace nodegate {

// Thresholds and policy, from checks.lvm in the config (percent of the pool).
struct LvmPolicy {
  double data_warn = 80, data_fail = 90;
  double metadata_warn = 70, metadata_fail = 85;
  std::string volume_group;         // the managed VG (TopoLVM / lvm-localpv); empty: none named
  std::size_t max_lv_series = 256;  // bound on per-LV metric series
};
LvmPolicy lvmPolicy(const Config& cfg);

// One thing a storage probe found; the worst decides the result (FAIL > UNKNOWN > WARN > PASS:
// an established fault outranks "could not tell", which outranks "degraded").
struct StorageFinding {
  Status status = Status::Pass;
  std::string reason, message, hint;
};

// Folds findings into a result: worst status, its reason and hint, and the first few messages.
CheckResult combineFindings(std::string check, const std::vector<StorageFinding>& findings,
                            std::string pass_reason, std::string pass_message);

// Thin-pool findings shared by lvm (every pool) and local-pv (the pools under its volumes).
void thinPoolFindings(const LvmLv& pool, const LvmPolicy& policy, std::vector<StorageFinding>* out);

// Pure evaluation of one lvm run.
CheckResult evaluateLvm(const LvmFetch& fetch, const LvmPolicy& policy);

inline const SettingSpec kLvmDataWarnSetting =
    numberSetting(kLvmCheck, "data_warn_percent", 80, 0, 100,
                  "thin-pool data use at which the result is WARN, %");
inline const SettingSpec kLvmDataFailSetting =
    numberSetting(kLvmCheck, "data_fail_percent", 90, 0, 100,
                  "thin-pool data use at which the result is FAIL, %");
inline const SettingSpec kLvmMetadataWarnSetting =
    numberSetting(kLvmCheck, "metadata_warn_percent", 70, 0, 100,
                  "thin-pool metadata use at which the result is WARN, %");
inline const SettingSpec kLvmMetadataFailSetting =
    numberSetting(kLvmCheck, "metadata_fail_percent", 85, 0, 100,
                  "thin-pool metadata use at which the result is FAIL, %");
inline const SettingSpec kLvmMaxLvSeriesSetting =
    integerSetting(kLvmCheck, "max_lv_series", 256, 0, 100000, "bound on per-LV metric series");
inline const ProbeSpec kLvmSpec{
    .name = kLvmCheck,
    .summary =
        "volume groups complete, thin pools under their data and metadata thresholds, "
        "every LV healthy (lvm fullreport)",
    .triggers = kTriggerTimer | kTriggerUdevBlock,
    .condition = "LocalStorageHealthy",
    .default_required = false,
    .settings = {&kLvmDataWarnSetting, &kLvmDataFailSetting, &kLvmMetadataWarnSetting,
                 &kLvmMetadataFailSetting, &kLvmMaxLvSeriesSetting, &kLvmVolumeGroupSetting,
                 &kLvmCommandSetting, &kLvmMaxOutputSetting},
};

class LvmProbe final : public Probe {
 public:
  explicit LvmProbe(std::shared_ptr<LvmReportSource> source) : source_(std::move(source)) {}
  const ProbeSpec& spec() const override { return kLvmSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<LvmReportSource> source_;
};

}  // namespace nodegate
