#include "local_pv.h"

#include <fcntl.h>
#include <linux/fs.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "text.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCheck = "local-pv";
// A node runs a few hundred pods at most; the walk stops well above that so a corrupt or
// hostile kubelet dir cannot make one cycle unbounded.
constexpr std::size_t kMaxEntries = 20000;

std::string unescapeMount(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool hasOption(std::string_view options, std::string_view opt) {
  while (!options.empty()) {
    auto comma = options.find(',');
    if (options.substr(0, comma) == opt) return true;
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return false;
}

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

const LvmLv* backingLv(const LvmReport& rep, const LocalPv& pv, const std::string& vg) {
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

}  // namespace

std::vector<MountEntry> parseMountInfo(std::string_view text) {
  std::vector<MountEntry> out;
  forEachLine(text, [&](std::string_view line) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    std::vector<std::string_view> f;
    forEachWord(line, [&](std::string_view w) { f.push_back(w); });
    std::size_t sep = 0;
    for (std::size_t i = 6; i < f.size(); ++i)
      if (f[i] == "-") {
        sep = i;
        break;
      }
    if (sep == 0 || f.size() < sep + 3) return;
    MountEntry m;
    m.root = unescapeMount(f[3]);
    m.mount_point = unescapeMount(f[4]);
    m.options = std::string(f[5]);
    m.fstype = std::string(f[sep + 1]);
    m.source = unescapeMount(f[sep + 2]);
    m.super_options = sep + 3 < f.size() ? std::string(f[sep + 3]) : std::string();
    // The superblock's "ro" matters as much as the mount's: ext4 errors=remount-ro flips only
    // the superblock, and every mount of it turns read-only at once.
    m.read_only = hasOption(m.options, "ro") || hasOption(m.super_options, "ro");
    out.push_back(std::move(m));
  });
  return out;
}

Result<std::vector<LocalPv>> KubeletDirPvSource::list(const HostRoot& host, const Config& cfg) {
  const std::string kubelet = cfg.text("local-pv", "kubelet_dir", "/var/lib/kubelet");
  const std::string pods_host = kubelet + "/pods";
  std::error_code ec;
  if (!fs::is_directory(host.root(pods_host), ec))
    return Error{ENOENT, "failed to list " + host.root(pods_host) + ": no such directory"};
  std::vector<LocalPv> out;
  std::size_t budget = kMaxEntries;
  for (const auto& uid : subdirs(host.root(pods_host), &budget)) {
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
  return out;
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
  p.used_warn = cfg.number("local-pv", "used_warn_percent", p.used_warn);
  p.used_fail = cfg.number("local-pv", "used_fail_percent", p.used_fail);
  p.volume_group = cfg.text("local-pv", "volume_group", cfg.text("lvm", "volume_group", ""));
  p.expected_read_only = cfg.list("local-pv", "expected_read_only", {});
  p.max_pv_series =
      static_cast<std::size_t>(std::max(0.0, cfg.number("local-pv", "max_pv_series", 512)));
  p.lvm = lvmPolicy(cfg);
  return p;
}

CheckResult evaluateLocalPv(const std::vector<PvObservation>& pvs, const LvmFetch* lvm,
                            const LocalPvPolicy& policy, std::string_view source) {
  std::vector<StorageFinding> findings;
  std::vector<Evidence> evidence;
  std::vector<MetricSample> metrics;
  evidence.push_back({"pv discovery", std::string(source)});
  const LvmReport* rep = lvm && lvm->failure == LvmRunFailure::None ? &lvm->report : nullptr;
  if (!rep && lvm)
    evidence.push_back({"lvm report", "unavailable (" + lvm->error +
                                          "): block usage, LV "
                                          "permissions and orphans not checked"});

  std::set<std::string> seen, referenced, pools, vgs;
  std::size_t series = 0;
  for (const auto& o : pvs) {
    const LocalPv& pv = o.pv;
    if (!seen.insert(pv.name).second) continue;  // one PV used by several pods: once
    if (!o.path_exists) continue;                // the pod went away between listing and looking
    const LvmLv* lv = rep ? backingLv(*rep, pv, policy.volume_group) : nullptr;
    if (lv) {
      referenced.insert(lv->vg + "/" + lv->name);
      vgs.insert(lv->vg);
      if (!lv->pool_lv.empty()) pools.insert(lv->vg + "/" + lv->pool_lv);
    }
    std::string what = pv.block ? "block" : "filesystem";
    if (lv) what += ", LV " + lv->full_name + " " + lv->attr_text;
    if (!pv.driver.empty()) what += ", driver " + pv.driver;

    // Read-only, from every place that can say so.
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
      findings.push_back(
          {Status::Fail, "VolumeReadOnly", "PV " + pv.name + " is read-only: " + why,
           "a VM on it cannot write its disk. If it was restored from a VolumeSnapshot, make the "
           "LV writable (lvchange -p rw VG/LV); if the filesystem went read-only after errors, "
           "fsck it; then restart the VM"});
    }

    // Usage.
    std::optional<std::uint64_t> used, capacity;
    if (!pv.block) {
      if (!o.mount && o.error.empty())
        findings.push_back({Status::Warn, "VolumeNotMounted",
                            "PV " + pv.name + " is not mounted at " + pv.path,
                            "the pod writes into the kubelet directory instead of the volume: "
                            "check the CSI node plugin's logs and restart the pod"});
      if (o.usage) {
        used = o.usage->used_bytes;
        capacity = o.usage->capacity_bytes;
        if (o.usage->inodes > 0) {
          const double ip = 100.0 * static_cast<double>(o.usage->inodes_used) /
                            static_cast<double>(o.usage->inodes);
          if (ip >= policy.used_warn)
            findings.push_back({ip >= policy.used_fail ? Status::Fail : Status::Warn,
                                "VolumeNearlyFull",
                                "PV " + pv.name + " inodes " + percent(ip) + " used",
                                "delete files on the volume or expand the PVC"});
        }
      }
    } else if (pv.device.empty()) {
      findings.push_back({Status::Fail, "VolumeBackingMissing",
                          "PV " + pv.name + " block device " + pv.path + " is missing",
                          "the pod's device link dangles: check the CSI node plugin and the LV"});
    } else if (lv && lv->size) {
      capacity = *lv->size;
      // Neither kubelet nor the CSI drivers know a block volume's use; a thin LV's data
      // percent is the only honest figure. A thick LV is fully allocated by construction.
      if (lv->attr.isThinVolume() && lv->data_percent)
        used =
            static_cast<std::uint64_t>(static_cast<double>(*lv->size) * *lv->data_percent / 100.0);
    }
    if (used && capacity && *capacity > 0) {
      const double p = 100.0 * static_cast<double>(*used) / static_cast<double>(*capacity);
      what += ", used " + percent(p);
      if (p >= policy.used_warn)
        findings.push_back({p >= policy.used_fail ? Status::Fail : Status::Warn, "VolumeNearlyFull",
                            "PV " + pv.name + " is " + percent(p) + " full",
                            pv.block ? "grow the PVC (the guest must then grow its filesystem) "
                                       "or free space inside the guest"
                                     : "delete data on the volume or expand the PVC"});
    }
    if (rep && !lv && !policy.volume_group.empty() && lvmDriver(pv.driver))
      findings.push_back({Status::Fail, "VolumeBackingMissing",
                          "PV " + pv.name + ": backing LV " +
                              (pv.volume_handle.empty() ? pv.name : pv.volume_handle) +
                              " is not in volume group " + policy.volume_group,
                          "the LV was removed or never created here: check the CSI driver's "
                          "LogicalVolume/LVMVolume resource and the PV's node affinity"});
    if (!o.error.empty()) what += ", " + o.error;
    evidence.push_back({"PV " + pv.name, what});

    if (series++ < policy.max_pv_series) {
      metrics.push_back(gauge("nodegate_local_pv_read_only",
                              "1 when the local PV is read-only (mount, LV permission or block "
                              "device).",
                              pv.name, ro ? 1 : 0));
      if (used)
        metrics.push_back(gauge("nodegate_local_pv_used_bytes",
                                "Used bytes of the local PV (thin LV allocation for block).",
                                pv.name, static_cast<double>(*used)));
      if (capacity)
        metrics.push_back(gauge("nodegate_local_pv_capacity_bytes", "Size of the local PV.",
                                pv.name, static_cast<double>(*capacity)));
      if (o.usage)
        metrics.push_back(gauge("nodegate_local_pv_inodes_used", "Used inodes of the local PV.",
                                pv.name, static_cast<double>(o.usage->inodes_used)));
    }
  }

  if (rep) {
    if (!policy.volume_group.empty()) vgs.insert(policy.volume_group);
    for (const auto& vg : rep->vgs)
      if (vgs.count(vg.name) && (vg.partial || vg.missing_pv_count > 0))
        findings.push_back({Status::Fail, "VolumeGroupDegraded",
                            "volume group " + vg.name + " under the local PVs is partial (" +
                                std::to_string(vg.missing_pv_count) + " PVs missing)",
                            "see the lvm check; a disk under " + vg.name + " is gone"});
    for (const auto& lv : rep->lvs)
      if (lv.attr.isThinPool() && pools.count(lv.vg + "/" + lv.name))
        thinPoolFindings(lv, policy.lvm, &findings);
    if (!policy.volume_group.empty()) {
      std::vector<std::string> orphans;
      std::size_t snapshots = 0;
      for (const auto& lv : rep->lvs) {
        if (lv.vg != policy.volume_group || lv.hidden() || lv.attr.isThinPool() ||
            referenced.count(lv.vg + "/" + lv.name))
          continue;
        // Snapshots back VolumeSnapshots, not PVs.
        if (!lv.origin.empty() || lv.attr.isSnapshot()) {
          ++snapshots;
          continue;
        }
        orphans.push_back(lv.name);
      }
      if (!orphans.empty()) {
        std::string names;
        for (std::size_t i = 0; i < orphans.size() && i < 5; ++i)
          names += (i ? ", " : "") + orphans[i];
        if (orphans.size() > 5) names += ", ...";
        // WARN, not FAIL: a leftover LV wastes space but breaks nothing, and a stopped VM's
        // disk is unreferenced too when discovery can only see running pods.
        findings.push_back({Status::Warn, "OrphanedVolumes",
                            std::to_string(orphans.size()) + " LVs in " + policy.volume_group +
                                " are not used by any PV on this node (" + names + ")",
                            "check each against its PV (kubectl get pv -o wide); delete LVs left "
                            "behind by Retain PVs with lvremove once their data is not needed"});
      }
      evidence.push_back({"volume group " + policy.volume_group,
                          std::to_string(orphans.size()) + " unreferenced LVs, " +
                              std::to_string(snapshots) + " snapshots skipped"});
    }
  }

  CheckResult r;
  if (seen.empty() && findings.empty()) {
    r = makeResult(kCheck, Status::Pass, "NoLocalVolumes", "no local volumes on this node");
  } else {
    r = combineFindings(kCheck, findings, "LocalVolumesHealthy",
                        std::to_string(seen.size()) +
                            " local volumes: none read-only, none "
                            "over thresholds, nothing orphaned");
  }
  r.evidence = std::move(evidence);
  r.metrics = std::move(metrics);
  return r;
}

CheckResult LocalPvProbe::run(const ProbeContext& ctx) {
  const auto policy = localPvPolicy(ctx.config);
  auto listed = source_->list(ctx.host, ctx.config);
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
  const std::string mi_pid = ctx.config.text("local-pv", "mountinfo_pid", "1");
  auto mi = readFile(ctx.host.proc(mi_pid + "/mountinfo"), 16u << 20);
  std::map<std::string, MountEntry> mounts;
  if (mi) {
    for (auto& m : parseMountInfo(*mi)) mounts[m.mount_point] = std::move(m);  // last one wins
  }

  std::vector<PvObservation> obs;
  for (auto& pv : *listed) {
    PvObservation o;
    o.pv = std::move(pv);
    const std::string local = ctx.host.root(o.pv.path);
    std::error_code ec;
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
  if (ctx.config.flag("local-pv", "use_lvm", true)) {
    const auto max_age = std::chrono::milliseconds(
        static_cast<long long>(ctx.config.number("local-pv", "lvm_max_age_seconds", 30) * 1000));
    lvm = lvm_->get(ctx.config, max_age);
  }
  auto r = evaluateLocalPv(
      obs, lvm && lvm->failure != LvmRunFailure::NotFound ? lvm.get() : nullptr, policy,
      std::string(source_->name()) + " " +
          ctx.host.root(ctx.config.text("local-pv", "kubelet_dir", "/var/lib/kubelet")));
  if (!mi) r.evidence.push_back({"mountinfo", mi.error().message});
  return r;
}

}  // namespace nodegate
