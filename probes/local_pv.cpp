#include "local_pv.h"

#include <fcntl.h>
#include <linux/fs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "text.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCheck = kLocalPvCheck;
// A node runs a few hundred pods at most; the walk stops well above that so a corrupt or
// hostile kubelet dir cannot make one cycle unbounded.
constexpr std::size_t kMaxEntries = 20000;

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", v);
  return buf;
}

// Host path -> path under --host-root; relative symlink targets resolve against their link.
std::string hostPathOfLink(const std::string& link_host_path, const std::string& target) {
  if (!target.empty() && target.front() == '/') return target;
  return (fs::path(link_host_path).parent_path() / target).lexically_normal().string();
}

struct VolData {
  std::string spec_vol_id, driver, volume_handle;
};

VolData readVolData(const std::string& path) {
  VolData v;
  auto text = readFile(path, 64 << 10);
  if (!text) return v;
  try {
    auto j = nlohmann::json::parse(*text);
    if (!j.is_object()) return v;
    auto str = [&](const char* k) {
      auto it = j.find(k);
      return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    v.spec_vol_id = str("specVolID");
    v.driver = str("driverName");
    v.volume_handle = str("volumeHandle");
  } catch (const std::exception&) {
    // An unreadable vol_data.json leaves the names to the directory; not worth failing over.
  }
  return v;
}

std::vector<std::string> subdirs(const std::string& dir, std::size_t* budget) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (*budget == 0) break;
    --*budget;
    out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const LvmLv* backingLv(const LvmReport& rep, const LocalPv& pv, const std::string& managed_vg) {
  // The driver's own VG (lvm-localpv names it) beats the configured one.
  const std::string& vg = pv.volume_group.empty() ? managed_vg : pv.volume_group;
  const LvmLv* found = nullptr;
  for (const auto& lv : rep.lvs) {
    if (lv.hidden() || (!vg.empty() && lv.vg != vg)) continue;
    if ((!pv.volume_handle.empty() && lv.name == pv.volume_handle) || lv.name == pv.name) {
      found = &lv;
      break;
    }
  }
  return found;
}

bool lvmDriver(std::string_view driver) {
  return driver.find("lvm") != std::string_view::npos ||
         driver.find("topolvm") != std::string_view::npos;
}

MetricSample gauge(const char* name, const char* help, const std::string& pv, double v) {
  return MetricSample{name, help, {{"pv", pv}}, v};
}

// "PV pvc-1 (claim vms/disk-a, VM vms/alice)": who to ask before touching the volume.
std::string pvLabel(const LocalPv& pv) {
  std::string who;
  if (!pv.claim.empty()) who = "claim " + pv.claim;
  if (!pv.vm.empty())
    who += (who.empty() ? "" : ", ") + ("VM " + pv.vm);
  else if (!pv.owner.empty())
    who += (who.empty() ? "" : ", ") + pv.owner;
  return "PV " + pv.name + (who.empty() ? "" : " (" + who + ")");
}

std::string firstNames(const std::vector<std::string>& names, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < n; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > n) out += ", ...";
  return out;
}

}  // namespace

Result<PvListing> KubeletDirPvSource::list(const HostRoot& host, const Config& cfg) {
  const std::string kubelet = cfg.text(kLocalPvKubeletDirSetting);
  const std::string pods_host = kubelet + "/pods";
  std::error_code ec;
  // The host's root must be there to call a kubelet directory absent (--host-root /nonexistent
  // is not a node without volumes).
  if (!fs::is_directory(host.root(), ec))
    return Error{EIO, "failed to read the host root " + host.root() + ": " +
                          (ec ? ec.message() : std::string("not a directory"))};
  if (!fs::is_directory(host.root(pods_host), ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      return Error{ec.value(), "failed to list " + host.root(pods_host) + ": " + ec.message()};
    return Error{ENOENT, "failed to list " + host.root(pods_host) + ": no such directory"};
  }
  std::vector<LocalPv> out;
  std::size_t budget = kMaxEntries;
  const auto pod_uids = subdirs(host.root(pods_host), &budget);
  for (const auto& uid : pod_uids) {
    const std::string pod = pods_host + "/" + uid;
    const std::string fs_dir = pod + "/volumes/kubernetes.io~csi";
    for (const auto& vol : subdirs(host.root(fs_dir), &budget)) {
      LocalPv pv;
      auto vd = readVolData(host.root(fs_dir + "/" + vol + "/vol_data.json"));
      pv.name = vd.spec_vol_id.empty() ? vol : vd.spec_vol_id;
      pv.driver = vd.driver;
      pv.volume_handle = vd.volume_handle;
      pv.pod_uid = uid;
      pv.path = fs_dir + "/" + vol + "/mount";
      out.push_back(std::move(pv));
    }
    const std::string blk_dir = pod + "/volumeDevices/kubernetes.io~csi";
    for (const auto& vol : subdirs(host.root(blk_dir), &budget)) {
      LocalPv pv;
      pv.block = true;
      pv.pod_uid = uid;
      pv.path = blk_dir + "/" + vol;
      auto vd = readVolData(host.root(kubelet + "/plugins/kubernetes.io/csi/volumeDevices/" + vol +
                                      "/data/vol_data.json"));
      pv.name = vd.spec_vol_id.empty() ? vol : vd.spec_vol_id;
      pv.driver = vd.driver;
      pv.volume_handle = vd.volume_handle;
      auto target = fs::read_symlink(host.root(pv.path), ec);
      if (!ec)
        pv.device = hostPathOfLink(pv.path, target.string());
      else if (fs::exists(host.root(pv.path), ec))
        pv.device = pv.path;  // a device node itself
      out.push_back(std::move(pv));
    }
  }
  std::string detail = std::to_string(out.size()) + " volumes of pods in " + host.root(kubelet);
  return PvListing{std::move(out), std::move(detail), pod_uids.size()};
}

std::vector<LocalPv> mergePvViews(std::vector<LocalPv> kubelet, const std::vector<LocalPv>& api) {
  std::map<std::string, const LocalPv*> by_name;
  for (const auto& pv : api) by_name.emplace(pv.name, &pv);
  std::set<std::string> joined;
  for (auto& pv : kubelet) {
    auto it = by_name.find(pv.name);
    if (it == by_name.end()) continue;
    const LocalPv& a = *it->second;
    joined.insert(pv.name);
    pv.from_api = true;
    pv.phase = a.phase;
    pv.reclaim = a.reclaim;
    pv.claim = a.claim;
    pv.claim_phase = a.claim_phase;
    pv.vm = a.vm;
    pv.owner = a.owner;
    pv.local_path = a.local_path;
    pv.volume_group = a.volume_group;
    if (pv.driver.empty()) pv.driver = a.driver;
    if (pv.volume_handle.empty()) pv.volume_handle = a.volume_handle;
  }
  for (const auto& a : api) {
    if (joined.count(a.name)) continue;
    LocalPv pv = a;
    pv.attached = false;
    pv.from_api = true;
    pv.path.clear();
    pv.device.clear();
    kubelet.push_back(std::move(pv));
  }
  return kubelet;
}

FsUsage fsUsageOf(const struct statvfs& st) {
  FsUsage u;
  const std::uint64_t frsize = st.f_frsize ? st.f_frsize : st.f_bsize;
  u.capacity_bytes = static_cast<std::uint64_t>(st.f_blocks) * frsize;
  // used = blocks - free (not - avail): the root reserve is used space as df counts it.
  u.used_bytes =
      static_cast<std::uint64_t>(st.f_blocks - std::min(st.f_blocks, st.f_bfree)) * frsize;
  u.inodes = st.f_files;
  u.inodes_used = st.f_files - std::min(st.f_files, st.f_ffree);
  return u;
}

LocalPvPolicy localPvPolicy(const Config& cfg) {
  LocalPvPolicy p;
  p.used_warn = cfg.number(kLocalPvUsedWarnSetting);
  p.used_fail = cfg.number(kLocalPvUsedFailSetting);
  p.volume_group = cfg.text(kLocalPvVolumeGroupSetting, cfg.text(kLvmVolumeGroupSetting));
  p.expected_read_only = cfg.list(kLocalPvExpectedReadOnlySetting);
  p.max_pv_series = static_cast<std::size_t>(cfg.number(kLocalPvMaxSeriesSetting));
  p.lvm = lvmPolicy(cfg);
  return p;
}

namespace {

// What the per-PV pass collects, for the result and the node-wide findings after it.
struct PvTally {
  std::vector<StorageFinding> findings;
  std::vector<Evidence> evidence;
  std::vector<MetricSample> metrics;
  std::set<std::string> seen, referenced, pools, vgs;
  std::vector<std::string> released;
  std::size_t series = 0, unattached = 0, api_pinned = 0;
};

// Findings about discovery itself: an API that could not be listed, and a kubelet directory
// that shows no pod at all while the API pins volumes here (the kubelet keeps its directory
// elsewhere: k0s, microk8s; a real kubelet directory holds at least this agent's own pod).
void discoveryFindings(const PvDiscovery& d, PvTally& t) {
  if (d.api == ApiDiscovery::Failed) {
    const bool denied = d.api_error.code == EACCES;
    // The kubelet's view is still judged; only what needs the API is unknown.
    t.findings.push_back(
        {Status::Unknown, denied ? "VolumeDiscoveryForbidden" : "VolumeDiscoveryFailed",
         d.api_error.message +
             "; volumes of stopped VMs, orphans and missing backing volumes are not checked",
         denied ? "grant the agent list on persistentvolumes and get on persistentvolumeclaims "
                  "(chart: rbac.readPersistentVolumes=true, the default, renders the rules), or "
                  "set checks.local-pv.api_discovery to false"
                : "check the API server and the agent's network path to it"});
  }
  if (!d.kubelet_error.empty())
    t.findings.push_back({Status::Unknown, "VolumeDiscoveryFailed",
                          d.kubelet_error + "; volumes pods on this node use are not checked",
                          "mount the host's kubelet directory (--host-root / --path.rootfs) or "
                          "set checks.local-pv.kubelet_dir"});
  if (d.api == ApiDiscovery::Ok && t.api_pinned > 0 && d.kubelet_pods.value_or(0) == 0 &&
      d.kubelet_error.empty()) {
    t.findings.push_back(
        {Status::Unknown, "KubeletDirNotFound",
         "the API pins " + std::to_string(t.api_pinned) + " PVs to this node but " +
             (d.kubelet_dir.empty() ? std::string("the kubelet directory") : d.kubelet_dir) +
             " shows no pod at all: the kubelet's directory is elsewhere, so what pods use is "
             "not known",
         "set checks.local-pv.kubelet_dir (chart: hostPaths.kubeletDir) to the kubelet's "
         "--root-dir, e.g. /var/lib/k0s/kubelet (k0s) or "
         "/var/snap/microk8s/common/var/lib/kubelet (microk8s)"});
  }
}

std::string describePv(const LocalPv& pv, const LvmLv* lv) {
  std::string what = pv.block ? "block" : "filesystem";
  if (lv) what += ", LV " + lv->full_name + " " + lv->attr_text;
  if (!pv.driver.empty()) what += ", driver " + pv.driver;
  if (pv.from_api) {
    what += ", " + (pv.phase.empty() ? std::string("phase unknown") : pv.phase);
    if (!pv.claim.empty())
      what += ", claim " + pv.claim + (pv.claim_phase.empty() ? "" : " " + pv.claim_phase);
    if (!pv.vm.empty())
      what += ", VM " + pv.vm;
    else if (!pv.owner.empty())
      what += ", " + pv.owner;
  }
  // Bound to a claim but used by no pod here: a stopped VM's disk, not an orphan.
  if (!pv.attached) what += ", not in use by a pod on this node";
  return what;
}

// Read-only, from every place that can say so; true when the PV is read-only.
bool readOnlyFindings(const PvObservation& o, const LvmLv* lv, const LocalPvPolicy& policy,
                      PvTally& t) {
  const LocalPv& pv = o.pv;
  std::vector<std::string> ro_why;
  if (o.mount && o.mount->read_only)
    ro_why.push_back("mounted ro (" + o.mount->options + " / " + o.mount->super_options + ")");
  if (o.block_read_only.value_or(false)) ro_why.push_back("block device read-only (BLKROGET)");
  if (lv && (lv->attr.readOnly() || lv->permissions.rfind("read-only", 0) == 0))
    ro_why.push_back("LV permission " +
                     (lv->permissions.empty() ? lv->attr_text : lv->permissions));
  const bool ro = !ro_why.empty();
  const bool ro_ok = std::find(policy.expected_read_only.begin(), policy.expected_read_only.end(),
                               pv.name) != policy.expected_read_only.end();
  if (ro && !ro_ok) {
    std::string why;
    for (const auto& w : ro_why) why += (why.empty() ? "" : ", ") + w;
    t.findings.push_back(
        {Status::Fail, "VolumeReadOnly", pvLabel(pv) + " is read-only: " + why,
         "a VM on it cannot write its disk. If it was restored from a VolumeSnapshot, make the "
         "LV writable (lvchange -p rw VG/LV); if the filesystem went read-only after errors, "
         "fsck it; then restart the VM"});
  }
  return ro;
}

struct PvUsage {
  std::optional<std::uint64_t> used, capacity;
};

// Mounts, missing backing and usage thresholds of one PV.
PvUsage usageFindings(const PvObservation& o, const LvmLv* lv, const LocalPvPolicy& policy,
                      PvTally& t, std::string& what) {
  const LocalPv& pv = o.pv;
  PvUsage u;
  if (!pv.attached && !pv.local_path.empty() && !o.path_exists)
    t.findings.push_back(
        {Status::Fail, "VolumeBackingMissing",
         pvLabel(pv) + ": local path " + pv.local_path + " does not exist on this node",
         "the disk or directory behind the local PV is gone: restore it, or "
         "delete the PV if its data is lost"});
  if (!pv.attached) {
    // No pod path: only the LV can tell usage (below, for block volumes).
  } else if (!o.error.empty()) {
    // What this PV's state is could not be read (mount table, statvfs, device): undecided.
    t.findings.push_back({Status::Unknown, "VolumeUnreadable", pvLabel(pv) + ": " + o.error,
                          "give the agent read access to the host's mount table and the "
                          "volume (--host-root, the chart's host mounts)"});
  } else if (!pv.block) {
    if (!o.mount)
      t.findings.push_back({Status::Warn, "VolumeNotMounted",
                            "PV " + pv.name + " is not mounted at " + pv.path,
                            "the pod writes into the kubelet directory instead of the volume: "
                            "check the CSI node plugin's logs and restart the pod"});
    if (o.usage) {
      u.used = o.usage->used_bytes;
      u.capacity = o.usage->capacity_bytes;
      if (o.usage->inodes > 0) {
        const double ip = 100.0 * static_cast<double>(o.usage->inodes_used) /
                          static_cast<double>(o.usage->inodes);
        if (ip >= policy.used_warn)
          t.findings.push_back({ip >= policy.used_fail ? Status::Fail : Status::Warn,
                                "VolumeNearlyFull",
                                "PV " + pv.name + " inodes " + percent(ip) + " used",
                                "delete files on the volume or expand the PVC"});
      }
    }
  } else if (pv.device.empty()) {
    // Attached block volume whose device link dangles.
    t.findings.push_back({Status::Fail, "VolumeBackingMissing",
                          "PV " + pv.name + " block device " + pv.path + " is missing",
                          "the pod's device link dangles: check the CSI node plugin and the LV"});
  }
  if (pv.block && lv && lv->size && (!pv.attached || !pv.device.empty())) {
    u.capacity = *lv->size;
    // Neither kubelet nor the CSI drivers know a block volume's use; a thin LV's data
    // percent is the only honest figure. A thick LV is fully allocated by construction.
    if (lv->attr.isThinVolume() && lv->data_percent)
      u.used =
          static_cast<std::uint64_t>(static_cast<double>(*lv->size) * *lv->data_percent / 100.0);
  }
  if (u.used && u.capacity && *u.capacity > 0) {
    const double p = 100.0 * static_cast<double>(*u.used) / static_cast<double>(*u.capacity);
    what += ", used " + percent(p);
    if (p >= policy.used_warn)
      t.findings.push_back({p >= policy.used_fail ? Status::Fail : Status::Warn, "VolumeNearlyFull",
                            "PV " + pv.name + " is " + percent(p) + " full",
                            pv.block ? "grow the PVC (the guest must then grow its filesystem) "
                                       "or free space inside the guest"
                                     : "delete data on the volume or expand the PVC"});
  }
  return u;
}

// One PV: its findings, evidence line and metrics.
void judgePv(const PvObservation& o, const LvmReport* rep, const LocalPvPolicy& policy,
             PvTally& t) {
  const LocalPv& pv = o.pv;
  if (!t.seen.insert(pv.name).second) return;  // one PV used by several pods: once
  // An attached path that vanished: the pod went away between listing and looking.
  if (pv.attached && !o.path_exists) return;
  const LvmLv* lv = rep ? backingLv(*rep, pv, policy.volume_group) : nullptr;
  if (lv) {
    t.referenced.insert(lv->vg + "/" + lv->name);
    t.vgs.insert(lv->vg);
    if (!lv->pool_lv.empty()) t.pools.insert(lv->vg + "/" + lv->pool_lv);
  }
  std::string what = describePv(pv, lv);
  if (!pv.attached) ++t.unattached;
  if (pv.phase == "Released") t.released.push_back(pv.name);
  const bool ro = readOnlyFindings(o, lv, policy, t);
  const PvUsage u = usageFindings(o, lv, policy, t, what);
  // The API's node affinity says the LV must be here, so it needs no configured VG to be
  // missed; for kubelet-only volumes a configured VG says where to look.
  const std::string lv_vg = pv.volume_group.empty() ? policy.volume_group : pv.volume_group;
  if (rep && !lv && lvmDriver(pv.driver) && (pv.from_api || !lv_vg.empty()))
    t.findings.push_back(
        {Status::Fail, "VolumeBackingMissing",
         pvLabel(pv) + ": backing LV " + (pv.volume_handle.empty() ? pv.name : pv.volume_handle) +
             (lv_vg.empty() ? " is not on this node" : " is not in volume group " + lv_vg),
         "the LV was removed or never created here: check the CSI driver's "
         "LogicalVolume/LVMVolume resource and the PV's node affinity"});
  if (!o.error.empty()) what += ", " + o.error;
  t.evidence.push_back({"PV " + pv.name, what});

  if (t.series++ >= policy.max_pv_series) return;
  t.metrics.push_back(gauge("nodegate_local_pv_read_only",
                            "1 when the local PV is read-only (mount, LV permission or block "
                            "device).",
                            pv.name, ro ? 1 : 0));
  if (u.used)
    t.metrics.push_back(gauge("nodegate_local_pv_used_bytes",
                              "Used bytes of the local PV (thin LV allocation for block).", pv.name,
                              static_cast<double>(*u.used)));
  if (u.capacity)
    t.metrics.push_back(gauge("nodegate_local_pv_capacity_bytes", "Size of the local PV.", pv.name,
                              static_cast<double>(*u.capacity)));
  if (o.usage)
    t.metrics.push_back(gauge("nodegate_local_pv_inodes_used", "Used inodes of the local PV.",
                              pv.name, static_cast<double>(o.usage->inodes_used)));
}

// LVM across the PVs: degraded VGs and thin pools under them, and LVs no PV references.
void volumeGroupFindings(const LvmReport& rep, const LocalPvPolicy& policy,
                         const PvDiscovery& discovery, PvTally& t) {
  if (!policy.volume_group.empty()) t.vgs.insert(policy.volume_group);
  for (const auto& vg : rep.vgs)
    if (t.vgs.count(vg.name) && (vg.partial || vg.missing_pv_count > 0))
      t.findings.push_back({Status::Fail, "VolumeGroupDegraded",
                            "volume group " + vg.name + " under the local PVs is partial (" +
                                std::to_string(vg.missing_pv_count) + " PVs missing)",
                            "see the lvm check; a disk under " + vg.name + " is gone"});
  for (const auto& lv : rep.lvs)
    if (lv.attr.isThinPool() && t.pools.count(lv.vg + "/" + lv.name))
      thinPoolFindings(lv, policy.lvm, &t.findings);
  if (policy.volume_group.empty() || discovery.api == ApiDiscovery::Pending) return;
  std::vector<std::string> orphans;
  std::size_t snapshots = 0;
  for (const auto& lv : rep.lvs) {
    if (lv.vg != policy.volume_group || lv.hidden() || lv.attr.isThinPool() ||
        t.referenced.count(lv.vg + "/" + lv.name))
      continue;
    // Snapshots back VolumeSnapshots, not PVs.
    if (!lv.origin.empty() || lv.attr.isSnapshot()) {
      ++snapshots;
      continue;
    }
    orphans.push_back(lv.name);
  }
  const bool confirmed = discovery.api == ApiDiscovery::Ok;
  if (!orphans.empty() && confirmed) {
    // WARN, not FAIL: a leftover LV holds space (in a thin pool, space the VMs need), but
    // no VM depends on it and nothing is broken; closing the gate over it would be wrong.
    t.findings.push_back({Status::Warn, "OrphanedVolumes",
                          std::to_string(orphans.size()) + " LVs in " + policy.volume_group +
                              " have no PersistentVolume in the cluster (" +
                              firstNames(orphans, 5) + ")",
                          "usually left behind by a Retain PV that was deleted: copy out what "
                          "is still needed, then lvremove them"});
  } else if (!orphans.empty()) {
    // Without the API the kubelet only sees running pods: a stopped VM's disk looks the
    // same as a leftover, so this is a weaker reason of its own.
    t.findings.push_back({Status::Warn, "UnattachedVolumes",
                          std::to_string(orphans.size()) + " LVs in " + policy.volume_group +
                              " are used by no pod on this node (" + firstNames(orphans, 5) +
                              "); without API discovery a stopped VM's disk looks the same",
                          "check each against its PV (kubectl get pv -o wide), or enable "
                          "checks.local-pv.api_discovery so orphans are told apart"});
  }
  t.evidence.push_back(
      {"volume group " + policy.volume_group,
       std::to_string(orphans.size()) +
           (confirmed ? " LVs without a PersistentVolume, " : " LVs used by no pod here, ") +
           std::to_string(snapshots) + " snapshots skipped"});
}

}  // namespace

CheckResult evaluateLocalPv(const std::vector<PvObservation>& pvs, const LvmFetch* lvm,
                            const LocalPvPolicy& policy, const PvDiscovery& discovery) {
  PvTally t;
  t.evidence = discovery.evidence;
  for (const auto& o : pvs) t.api_pinned += o.pv.from_api ? 1 : 0;
  discoveryFindings(discovery, t);
  const LvmReport* rep = lvm && lvm->failure == LvmRunFailure::None ? &lvm->report : nullptr;
  if (!rep && lvm)
    t.evidence.push_back({"lvm report", "unavailable (" + lvm->error +
                                            "): block usage, LV "
                                            "permissions and orphans not checked"});
  for (const auto& o : pvs) judgePv(o, rep, policy, t);
  if (rep) volumeGroupFindings(*rep, policy, discovery, t);

  if (!t.released.empty())
    t.evidence.push_back(
        {"released PVs", std::to_string(t.released.size()) +
                             " PVs whose claim was deleted keep their data here (" +
                             firstNames(t.released, 5) + ")"});
  if (t.unattached > 0)
    t.evidence.push_back({"not in use", std::to_string(t.unattached) +
                                            " PVs pinned here are used by no pod on this node "
                                            "(stopped VMs keep their disks)"});

  CheckResult r;
  if (t.seen.empty() && t.findings.empty()) {
    r = makeResult(kCheck, Status::Pass, "NoLocalVolumes", "no local volumes on this node");
  } else {
    r = combineFindings(kCheck, t.findings, "LocalVolumesHealthy",
                        std::to_string(t.seen.size()) +
                            " local volumes: none read-only, none "
                            "over thresholds, nothing orphaned");
  }
  r.evidence = std::move(t.evidence);
  r.metrics = std::move(t.metrics);
  return r;
}

CheckResult LocalPvProbe::run(const ProbeContext& ctx) {
  const auto policy = localPvPolicy(ctx.config);
  PvDiscovery disc;
  std::vector<LocalPv> api_pvs;
  if (api_) {
    auto api = api_->list(ctx.host, ctx.config);
    const std::string what = "pv discovery " + std::string(api_->name());
    if (api) {
      disc.api = ApiDiscovery::Ok;
      disc.evidence.push_back({what, api->detail});
      api_pvs = std::move(api->pvs);
    } else if (api.error().code == EAGAIN) {
      disc.api = ApiDiscovery::Pending;
      disc.evidence.push_back({what, api.error().message + "; orphans are judged after it"});
    } else {
      disc.api = ApiDiscovery::Failed;
      disc.api_error = api.error();
      disc.evidence.push_back({what, api.error().message});
    }
  }
  auto listed = source_->list(ctx.host, ctx.config);
  disc.kubelet_dir = ctx.host.root(ctx.config.text(kLocalPvKubeletDirSetting));
  if (listed)
    disc.kubelet_pods = listed->pods;
  else if (listed.error().code == ENOENT)
    disc.kubelet_pods = 0;
  else
    disc.kubelet_error = listed.error().message;
  if (!listed && (disc.api == ApiDiscovery::Ok || disc.api == ApiDiscovery::Failed)) {
    // The API still says what is pinned here (or why it cannot): only what pods use is unknown.
    disc.evidence.push_back(
        {"pv discovery " + std::string(source_->name()), listed.error().message});
    listed = PvListing{};
  } else if (listed) {
    disc.evidence.insert(disc.evidence.begin(),
                         {"pv discovery " + std::string(source_->name()), listed->detail});
  }
  if (!listed) {
    if (listed.error().code == ENOENT && policy.volume_group.empty()) {
      auto r = makeResult(kCheck, Status::Pass, "NoLocalVolumes",
                          "no kubelet directory on this host: no local volumes to check");
      r.evidence.push_back({"pv discovery", listed.error().message});
      return r;
    }
    return makeResult(kCheck, Status::Unknown, "VolumeDiscoveryFailed", listed.error().message,
                      "mount the host's kubelet directory (--host-root / --path.rootfs) or set "
                      "checks.local-pv.kubelet_dir");
  }

  // The host's mount table is PID 1's: kubelet mounts volumes in the host's mount namespace,
  // and the agent's own namespace (a container) need not see them.
  const std::string mi_pid = ctx.config.text(kLocalPvMountinfoPidSetting);
  auto mi = readFile(ctx.host.proc(mi_pid + "/mountinfo"), 16u << 20);
  std::map<std::string, MountEntry> mounts;
  if (mi) {
    for (auto& m : parseMountInfo(*mi)) mounts[m.mount_point] = std::move(m);  // last one wins
  }

  std::vector<PvObservation> obs;
  for (auto& pv : mergePvViews(std::move(listed->pvs), api_pvs)) {
    PvObservation o;
    o.pv = std::move(pv);
    std::error_code ec;
    if (!o.pv.attached) {
      // No pod path to look at; a local volume's own path must still be there.
      if (!o.pv.local_path.empty())
        o.path_exists = fs::exists(fs::symlink_status(ctx.host.root(o.pv.local_path), ec));
      obs.push_back(std::move(o));
      continue;
    }
    const std::string local = ctx.host.root(o.pv.path);
    o.path_exists = fs::exists(fs::symlink_status(local, ec));
    if (!o.pv.block) {
      if (!mi) {
        o.error = mi.error().message;
      } else if (auto it = mounts.find(o.pv.path); it != mounts.end()) {
        o.mount = it->second;
        struct statvfs st {};
        if (::statvfs(local.c_str(), &st) == 0)
          o.usage = fsUsageOf(st);
        else
          o.error = errnoError(errno, "statvfs " + local).message;
      }
    } else if (!o.pv.device.empty()) {
      const std::string dev = ctx.host.root(o.pv.device);
      auto fd = device_->open(dev, O_RDONLY | O_NONBLOCK);
      if (!fd) {
        if (fd.error().code == ENOENT)
          o.pv.device.clear();
        else
          o.error = fd.error().message;
      } else {
        int ro = 0;
        auto rc = device_->ioctl(*fd, BLKROGET, &ro);
        if (rc)
          o.block_read_only = ro != 0;
        else
          o.error = rc.error().message;
        device_->close(*fd);
      }
    }
    obs.push_back(std::move(o));
  }

  // checks.local-pv.use_lvm=false: nodes whose local volumes are not on LVM.
  std::shared_ptr<const LvmFetch> lvm;
  if (ctx.config.flag(kLocalPvUseLvmSetting)) {
    const auto max_age = std::chrono::milliseconds(
        static_cast<long long>(ctx.config.number(kLocalPvLvmMaxAgeSetting) * 1000));
    lvm = lvm_->get(ctx.host, ctx.config, max_age);
  }
  auto r = evaluateLocalPv(
      obs, lvm && lvm->failure != LvmRunFailure::NotFound ? lvm.get() : nullptr, policy, disc);
  if (!mi) r.evidence.push_back({"mountinfo", mi.error().message});
  return r;
}

}  // namespace nodegate
