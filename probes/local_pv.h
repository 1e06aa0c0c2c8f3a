// local-pv: the node-local persistent volumes bound to this node — are they filling up, did any
// come up read-only (the seed incident: a VolumeSnapshot restored into a PV that came up
// read-only and QEMU reported a read-only root filesystem), and is anything orphaned?
//
// Discovery goes through PvSource. Implemented: the kubelet directory on the host, which sees
// the volumes of pods running here. Not implemented yet: discovery from the API server (PVs whose
// node affinity selects this node, with claim and VMI); it belongs beside the kube client and
// plugs in as another PvSource.
#pragma once

#include <sys/statvfs.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lvm.h"
#include "lvm_report.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

// One mount from a mountinfo file (proc(5)). Paths are unescaped (\040 -> ' ').
struct MountEntry {
  std::string mount_point, root, fstype, source;
  std::string options, super_options;
  bool read_only = false;  // "ro" in the per-mount or the superblock options
};

// Parses mountinfo text; malformed lines are skipped.
std::vector<MountEntry> parseMountInfo(std::string_view text);

// A volume bound to this node, as discovered. Paths are host paths (as the host's mountinfo
// shows them), not yet prefixed with --host-root.
struct LocalPv {
  std::string name;           // PV name (kubelet's specVolID)
  std::string driver;         // CSI driver ("topolvm.io", "local.csi.openebs.io")
  std::string volume_handle;  // the driver's volume id: the LV name for TopoLVM and lvm-localpv
  std::string pod_uid;
  bool block = false;
  std::string path;    // filesystem: the pod's mount dir; block: the pod's device symlink
  std::string device;  // block: the symlink's target (host path), "" if dangling or unreadable
};

// Where the list of PVs comes from.
class PvSource {
 public:
  virtual ~PvSource() = default;
  virtual std::string_view name() const = 0;
  virtual Result<std::vector<LocalPv>> list(const HostRoot& host, const Config& cfg) = 0;
};

// <kubelet>/pods/*/volumes/kubernetes.io~csi/*/mount (filesystem) and
// <kubelet>/pods/*/volumeDevices/kubernetes.io~csi/* (block), with each volume's vol_data.json.
// kubelet dir: checks.local-pv.kubelet_dir (host path, default /var/lib/kubelet).
class KubeletDirPvSource final : public PvSource {
 public:
  std::string_view name() const override { return "kubelet-dir"; }
  Result<std::vector<LocalPv>> list(const HostRoot& host, const Config& cfg) override;
};

struct FsUsage {
  std::uint64_t capacity_bytes = 0, used_bytes = 0;
  std::uint64_t inodes = 0, inodes_used = 0;
};
FsUsage fsUsageOf(const struct statvfs& st);

// What the collector saw about one PV; the evaluator decides from this alone.
struct PvObservation {
  LocalPv pv;
  bool path_exists = true;
  std::optional<MountEntry> mount;      // filesystem: the mount at pv.path, if mounted
  std::optional<FsUsage> usage;         // filesystem: statvfs
  std::optional<bool> block_read_only;  // block: BLKROGET
  std::string error;                    // why something above could not be read
};

struct LocalPvPolicy {
  double used_warn = 85, used_fail = 95;        // percent of capacity (bytes and inodes)
  std::string volume_group;                     // managed VG for orphan detection
  std::vector<std::string> expected_read_only;  // PV names allowed to be read-only
  std::size_t max_pv_series = 512;
  LvmPolicy lvm;
};
LocalPvPolicy localPvPolicy(const Config& cfg);

// Pure evaluation. lvm may be null (lvm not run); a failed fetch leaves block usage unknown.
CheckResult evaluateLocalPv(const std::vector<PvObservation>& pvs, const LvmFetch* lvm,
                            const LocalPvPolicy& policy, std::string_view source);

class LocalPvProbe final : public Probe {
 public:
  LocalPvProbe(std::shared_ptr<LvmReportSource> lvm, std::shared_ptr<DeviceIo> device,
               std::unique_ptr<PvSource> source = std::make_unique<KubeletDirPvSource>())
      : lvm_(std::move(lvm)), device_(std::move(device)), source_(std::move(source)) {}
  std::string_view name() const override { return "local-pv"; }
  std::uint32_t triggers() const override {
    return kTriggerTimer | kTriggerUdevBlock | kTriggerMounts;
  }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<LvmReportSource> lvm_;
  std::shared_ptr<DeviceIo> device_;
  std::unique_ptr<PvSource> source_;
};

}  // namespace nodegate
