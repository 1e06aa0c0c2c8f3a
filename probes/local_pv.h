// local-pv: the node-local persistent volumes bound to this node — are they filling up, did any
// come up read-only (the seed incident: a VolumeSnapshot restored into a PV that came up
// read-only and QEMU reported a read-only root filesystem), and is anything orphaned?
//
// Discovery goes through PvSource. The kubelet directory on the host sees the volumes of pods
// running here; the agent adds a second source when it has an API connection
// (agent/kube/pv_source.h): every PersistentVolume whose node affinity pins it to this node, with
// its claim and the VM that owns the claim, so a stopped VM's disk is known and an LV that no PV
// references is an orphan for certain. mergePvViews() joins the two.
#pragma once

#include <sys/statvfs.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lvm.h"
#include "lvm_source.h"
#include "mountinfo.h"
#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

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

  // From the API (the PersistentVolume and its claim); empty with kubelet-only discovery.
  bool attached = true;      // a pod on this node uses it (the kubelet dir lists it)
  bool from_api = false;     // the API lists it as pinned to this node by its node affinity
  std::string phase;         // PV status.phase: Bound, Released, Available, Pending, Failed
  std::string reclaim;       // spec.persistentVolumeReclaimPolicy
  std::string claim;         // "namespace/name" from spec.claimRef
  std::string claim_phase;   // the PVC's status.phase; "Missing" when the claim is gone
  std::string vm;            // "namespace/name" of the KubeVirt VirtualMachine owning the claim
  std::string owner;         // the claim's owner when no VM is known ("DataVolume ns/name")
  std::string local_path;    // kubernetes.io/local volumes: spec.local.path, a host path
  std::string volume_group;  // the VG the driver names (lvm-localpv's openebs.io/volgroup)
};

// What a source found, and a line about how it found it for the result's evidence.
struct PvListing {
  std::vector<LocalPv> pvs;
  std::string detail;
  // Pod directories the source looked through (the kubelet's view); nullopt for a source that
  // does not list pods (the API's).
  std::optional<std::size_t> pods;
};

// Where the list of PVs comes from. Errors keep an errno-style code: EACCES means the source is
// not allowed to look (RBAC), EAGAIN that it has no answer yet, ENOENT that there is nothing
// to look at.
class PvSource {
 public:
  virtual ~PvSource() = default;
  virtual std::string_view name() const = 0;
  virtual Result<PvListing> list(const HostRoot& host, const Config& cfg) = 0;
};

// The kubelet's view (what pods here use) joined with the API's (what is pinned here): a PV in
// both keeps the kubelet's paths and gains the API's claim and VM; a PV only the API knows is
// added with attached = false; a PV only the kubelet knows (not local, or listed before the
// API saw it) stays as it is.
std::vector<LocalPv> mergePvViews(std::vector<LocalPv> kubelet, const std::vector<LocalPv>& api);

// <kubelet>/pods/*/volumes/kubernetes.io~csi/*/mount (filesystem) and
// <kubelet>/pods/*/volumeDevices/kubernetes.io~csi/* (block), with each volume's vol_data.json.
// kubelet dir: checks.local-pv.kubelet_dir (host path, default /var/lib/kubelet). ENOENT only
// when the host's root is readable and the directory is not there (a node without a kubelet);
// a missing or unreadable host root, or a kubelet directory that cannot be read, is another
// error.
class KubeletDirPvSource final : public PvSource {
 public:
  std::string_view name() const override { return "kubelet-dir"; }
  Result<PvListing> list(const HostRoot& host, const Config& cfg) override;
};

struct FsUsage {
  std::uint64_t capacity_bytes = 0, used_bytes = 0;
  std::uint64_t inodes = 0, inodes_used = 0;
};
FsUsage fsUsageOf(const struct statvfs& st);

// What the collector saw about one PV; the evaluator decides from this alone.
struct PvObservation {
  LocalPv pv;
  bool path_exists = true;  // attached: the pod's path; API-only local volume: spec.local.path
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

// How the PVs were found. api_state tells what the orphan verdict may rely on.
enum class ApiDiscovery {
  Off,      // no API source: kubelet view only
  Pending,  // the first list has not finished: orphans are not judged yet
  Ok,       // the API's PVs were merged: an LV no PV references is an orphan
  Failed,   // listing failed (api_error says why): UNKNOWN for the discovery part
};
struct PvDiscovery {
  std::vector<Evidence> evidence;  // one line per source
  ApiDiscovery api = ApiDiscovery::Off;
  Error api_error{0, ""};
  // Pods the kubelet directory shows (0 when it is absent); nullopt when it was not listed.
  // None while the API pins PVs here means the directory is the wrong one: UNKNOWN.
  std::optional<std::size_t> kubelet_pods;
  std::string kubelet_dir;    // as looked at, for the message
  std::string kubelet_error;  // the kubelet directory could not be read (not: is absent)
};

// Pure evaluation. lvm may be null (lvm not run); a failed fetch leaves block usage unknown.
CheckResult evaluateLocalPv(const std::vector<PvObservation>& pvs, const LvmFetch* lvm,
                            const LocalPvPolicy& policy, const PvDiscovery& discovery);

inline constexpr char kLocalPvCheck[] = "local-pv";
inline const SettingSpec kLocalPvKubeletDirSetting =
    textSetting(kLocalPvCheck, "kubelet_dir", "/var/lib/kubelet",
                "the kubelet's root directory on the host (k0s, microk8s keep it elsewhere)");
inline const SettingSpec kLocalPvUsedWarnSetting =
    numberSetting(kLocalPvCheck, "used_warn_percent", 85, 0, 100,
                  "volume use (bytes or inodes) at which the result is WARN, %");
inline const SettingSpec kLocalPvUsedFailSetting =
    numberSetting(kLocalPvCheck, "used_fail_percent", 95, 0, 100,
                  "volume use (bytes or inodes) at which the result is FAIL, %");
inline const SettingSpec kLocalPvVolumeGroupSetting = derivedDefault(
    textSetting(kLocalPvCheck, "volume_group", "", "the managed VG for orphan detection", {}, 128),
    "checks.lvm.volume_group");
inline const SettingSpec kLocalPvExpectedReadOnlySetting = listSetting(
    kLocalPvCheck, "expected_read_only", {}, "PV names allowed to be read-only", {}, 4096);
inline const SettingSpec kLocalPvMaxSeriesSetting =
    integerSetting(kLocalPvCheck, "max_pv_series", 512, 0, 100000, "bound on per-PV metric series");
inline const SettingSpec kLocalPvMountinfoPidSetting =
    textSetting(kLocalPvCheck, "mountinfo_pid", "1",
                "whose <proc>/<pid>/mountinfo is the host's mount table", {}, 16);
inline const SettingSpec kLocalPvUseLvmSetting = flagSetting(
    kLocalPvCheck, "use_lvm", true, "read the lvm report for block volumes and thin pools");
inline const SettingSpec kLocalPvLvmMaxAgeSetting =
    numberSetting(kLocalPvCheck, "lvm_max_age_seconds", 30, 0, 3600,
                  "reuse an lvm report this recent (the lvm check's of the same cycle), seconds");
inline const SettingSpec kLocalPvApiDiscoverySetting =
    flagSetting(kLocalPvCheck, "api_discovery", true,
                "also list the PersistentVolumes the API pins to this node");
inline const SettingSpec kLocalPvApiPageSizeSetting = integerSetting(
    kLocalPvCheck, "api_page_size", 500, 1, 5000, "PersistentVolumes per list request");
inline const SettingSpec kLocalPvApiTimeoutSetting = numberSetting(
    kLocalPvCheck, "api_timeout_seconds", 20, 1, 300, "bound on one API request, seconds");
inline const SettingSpec kLocalPvApiMaxAgeSetting = derivedDefault(
    numberSetting(kLocalPvCheck, "api_max_age_seconds", 0, 0, 7 * 86400,
                  "a failed refresh keeps serving the last API view this long, seconds"),
    "3 × --resync");
inline const SettingSpec kLocalPvApiNodeKeysSetting =
    listSetting(kLocalPvCheck, "api_node_keys",
                {"kubernetes.io/hostname", "topology.topolvm.io/node",
                 "topology.topolvm.cybozu.com/node", "openebs.io/nodename"},
                "node-affinity keys that pin a PV to a node", {}, 64);
inline const ProbeSpec kLocalPvSpec{
    .name = kLocalPvCheck,
    .summary =
        "local PVs bound here under their use thresholds, none read-only, none missing "
        "or orphaned",
    .triggers = kTriggerTimer | kTriggerUdevBlock | kTriggerMounts,
    .condition = "LocalStorageHealthy",
    .default_required = false,
    .settings = {&kLocalPvKubeletDirSetting, &kLocalPvUsedWarnSetting, &kLocalPvUsedFailSetting,
                 &kLocalPvVolumeGroupSetting, &kLocalPvExpectedReadOnlySetting,
                 &kLocalPvMaxSeriesSetting, &kLocalPvMountinfoPidSetting, &kLocalPvUseLvmSetting,
                 &kLocalPvLvmMaxAgeSetting, &kLocalPvApiDiscoverySetting,
                 &kLocalPvApiPageSizeSetting, &kLocalPvApiTimeoutSetting, &kLocalPvApiMaxAgeSetting,
                 &kLocalPvApiNodeKeysSetting},
};

class LocalPvProbe final : public Probe {
 public:
  // api: the agent's API source (null without an API connection or with
  // checks.local-pv.api_discovery off).
  LocalPvProbe(std::shared_ptr<LvmReportSource> lvm, std::shared_ptr<DeviceIo> device,
               std::unique_ptr<PvSource> source = std::make_unique<KubeletDirPvSource>(),
               std::shared_ptr<PvSource> api = nullptr)
      : lvm_(std::move(lvm)),
        device_(std::move(device)),
        source_(std::move(source)),
        api_(std::move(api)) {}
  const ProbeSpec& spec() const override { return kLocalPvSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<LvmReportSource> lvm_;
  std::shared_ptr<DeviceIo> device_;
  std::unique_ptr<PvSource> source_;
  std::shared_ptr<PvSource> api_;
};

}  // namespace nodegate
