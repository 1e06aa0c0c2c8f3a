// The storage probes' collector: one `lvm fullreport` per cycle for both lvm and local-pv, after
// an LVM2 label scan of the block devices (lvm_label.h) that lets it skip lvm on a host without
// any physical volume. Where that block-device work happens is an LvmAccess: in this process
// (LocalLvmAccess: the DeviceIo and Exec seams), or in the privileged device-probe helper
// (device_probe/client.h), which the device cgroup of an unprivileged container leaves able to
// read the disks.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lvm_label.h"
#include "lvm_report.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/seams.h"

namespace nodegate {

// The lvm check's settings that govern the run itself (the thresholds are in lvm.h), read
// here because local-pv shares the run.
inline constexpr char kLvmCheck[] = "lvm";
inline const SettingSpec kLvmCommandSetting =
    textSetting(kLvmCheck, "command", "lvm",
                "the lvm command line (no shell); the --lvm-command flag wins over it");
inline const SettingSpec kLvmVolumeGroupSetting =
    textSetting(kLvmCheck, "volume_group", "",
                "the managed VG (TopoLVM, lvm-localpv): it must exist; \"\" names none", {}, 128);
inline const SettingSpec kLvmMaxOutputSetting = integerSetting(
    kLvmCheck, "max_output_bytes", 16 << 20, 4096, 1 << 30, "bound on what lvm may print, bytes");

// Why a run of lvm produced no report; kept apart from parse errors so the probe can say
// "lvm is not installed" (a value) rather than "lvm is broken" (unknown). HelperUnavailable: the
// device-probe helper that does the work did not answer.
enum class LvmRunFailure { None, NotFound, TimedOut, Failed, Unparsable, HelperUnavailable };

struct LvmFetch {
  LvmRunFailure failure = LvmRunFailure::None;
  std::string error;  // "failed to run lvm: ..."
  std::string command;
  LvmReport report;
  std::chrono::steady_clock::time_point at;
  // lvm was not run: no readable block device carries an LVM2 label.
  bool lvm_skipped = false;
  std::string label_scan;  // what the label scan saw, for evidence; empty when none was made
  // Block devices whose open the device cgroup refused (EPERM), to the scan and so to the lvm
  // it starts: volume groups on them are invisible, so "no volume groups" cannot be proven.
  std::vector<std::string> refused;
  // lvm printed a report but failed (non-zero exit, killed by a signal): "exit code 5: ...".
  // Such a report describes what lvm could read and is never a proof of health.
  std::string run_error;
};

// What is known before lvm runs.
struct LvmPrelude {
  std::string command;               // as the evidence shows it
  bool installed = false;            // execvp would find the command's program
  std::optional<LvmLabelScan> scan;  // none when this access has no device access
};

class LvmAccess {
 public:
  virtual ~LvmAccess() = default;
  // The command and, with a host, the label scan of its block devices. An error: the command
  // cannot run at all (an unparsable --lvm-command), or the helper did not answer.
  virtual Result<LvmPrelude> prepare(const HostRoot* host, const Config& cfg) = 0;
  // One `lvm fullreport` (lvmFullreportArgs) under the deadline.
  virtual Result<ExecResult> fullreport(const Config& cfg, std::chrono::milliseconds timeout,
                                        std::size_t max_output) = 0;
  // What an error of this access means for the probe.
  virtual LvmRunFailure failureKind() const { return LvmRunFailure::Failed; }
};

// In this process: checks.lvm.command (--lvm-command) through exec; the scan through device,
// when there is one.
class LocalLvmAccess final : public LvmAccess {
 public:
  LocalLvmAccess(std::shared_ptr<Exec> exec, std::shared_ptr<DeviceIo> device)
      : exec_(std::move(exec)), device_(std::move(device)) {}
  Result<LvmPrelude> prepare(const HostRoot* host, const Config& cfg) override;
  Result<ExecResult> fullreport(const Config& cfg, std::chrono::milliseconds timeout,
                                std::size_t max_output) override;

 private:
  std::shared_ptr<Exec> exec_;
  std::shared_ptr<DeviceIo> device_;
};

// "exit code 5", "killed by SIGSEGV": how a command ended, for messages.
std::string describeExit(const ExecResult& run);

// Runs lvm through an LvmAccess and caches the parsed report, so the local-pv probe reuses the
// lvm probe's run of the same cycle instead of running lvm a second time.
//
// get(host, ...) first scans the host's block devices for LVM2 labels and answers "no volume
// groups" without running lvm when no readable device carries one. It runs lvm whenever that is
// not certain: a device it cannot read, a managed volume group configured
// (checks.lvm.volume_group), or a command whose program is not installed (so that "lvm is not
// installed" stays what the probe reports). Devices the device cgroup refuses are recorded
// (LvmFetch::refused) whatever lvm says.
class LvmReportSource {
 public:
  explicit LvmReportSource(std::shared_ptr<LvmAccess> access) : access_(std::move(access)) {}
  explicit LvmReportSource(std::shared_ptr<Exec> exec, std::shared_ptr<DeviceIo> device = nullptr)
      : access_(std::make_shared<LocalLvmAccess>(std::move(exec), std::move(device))) {}

  // A report no older than max_age, running lvm when the cached one is older (0: always run).
  std::shared_ptr<const LvmFetch> get(const Config& cfg, std::chrono::milliseconds max_age);
  // The same, allowed to skip lvm on a host without any LVM2 label (see above).
  std::shared_ptr<const LvmFetch> get(const HostRoot& host, const Config& cfg,
                                      std::chrono::milliseconds max_age);

 private:
  std::shared_ptr<const LvmFetch> load(const HostRoot* host, const Config& cfg,
                                       std::chrono::milliseconds max_age);
  void interpret(const ExecResult& run, std::chrono::milliseconds timeout, std::size_t max_output,
                 LvmFetch* fetch);
  std::shared_ptr<LvmAccess> access_;
  std::mutex mu_;
  std::shared_ptr<const LvmFetch> last_;
  std::string last_key_;  // checks.lvm.command of last_: a changed command is a new run
};

}  // namespace nodegate
