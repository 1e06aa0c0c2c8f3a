// The local-pv probe over a built kubelet tree (a temp host root), with a fake lvm run and a fake
// BLKROGET; the real-mount cases are in local_pv_real_fs_test.sh.
#include "local_pv.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "storage_fakes.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;
using testing::FakeDeviceIo;
using testing::FakeExec;
using testing::readFixture;

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// The API's view as the agent's source would hand it over.
class FakeApiSource final : public PvSource {
 public:
  Result<PvListing> answer = PvListing{{}, "fake api: test listing", std::nullopt};
  std::string_view name() const override { return "api"; }
  Result<PvListing> list(const HostRoot&, const Config&) override { return answer; }
};

LocalPv apiPv(const std::string& name, const std::string& handle, const std::string& claim,
              const std::string& vm, const std::string& phase = "Bound") {
  LocalPv pv;
  pv.name = name;
  pv.driver = "topolvm.io";
  pv.volume_handle = handle;
  pv.block = true;
  pv.attached = false;
  pv.from_api = true;
  pv.phase = phase;
  pv.reclaim = "Retain";
  pv.claim = claim;
  pv.claim_phase = claim.empty() ? "" : "Bound";
  pv.vm = vm;
  return pv;
}

std::string evidenceOf(const CheckResult& r, const std::string& source) {
  for (const auto& e : r.evidence)
    if (e.source == source) return e.observed;
  return "<no evidence " + source + ">";
}

double metricValue(const CheckResult& r, const std::string& name, const std::string& pv) {
  for (const auto& m : r.metrics)
    if (m.name == name && m.labels.count("pv") && m.labels.at("pv") == pv) return m.value;
  return -1;
}

// A host root with a kubelet dir, one filesystem PV (pvc-aaa) and one block PV (pvc-bbb).
class KubeletTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("nodegate-localpv-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc/1");
    exec_ = std::make_shared<FakeExec>();
    exec_->reply(readFixture("healthy.json"));
    dev_ = std::make_shared<FakeDeviceIo>();
  }
  void TearDown() override { fs::remove_all(root_); }

  // A real kubelet directory always holds the agent's own pod (a DaemonSet pod on this node):
  // with API PVs pinned here and no pod at all, local-pv says the directory is the wrong one.
  void addAgentPod() { fs::create_directories(root_ / "var/lib/kubelet/pods/uid-nodegate-agent"); }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  void addFsPv(const std::string& uid, const std::string& pv, const std::string& handle,
               const std::string& mount_opts = "rw,relatime", const std::string& super = "rw") {
    const std::string dir = "var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~csi/" + pv;
    fs::create_directories(root_ / dir / "mount");
    write(dir + "/vol_data.json", R"({"driverName":"topolvm.io","specVolID":")" + pv +
                                      R"(","volumeHandle":")" + handle + R"("})");
    mountinfo_ += "100 1 253:3 / /" + dir + "/mount " + mount_opts + " shared:1 - xfs " +
                  "/dev/topolvm/" + handle + " " + super + "\n";
  }
  void addBlockPv(const std::string& uid, const std::string& pv, const std::string& handle,
                  int read_only, bool dangling = false) {
    const std::string link =
        "var/lib/kubelet/pods/" + uid + "/volumeDevices/kubernetes.io~csi/" + pv;
    const std::string global = "var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/" + pv;
    write(global + "/data/vol_data.json", R"({"driverName":"local.csi.openebs.io","specVolID":")" +
                                              pv + R"(","volumeHandle":")" + handle + R"("})");
    fs::create_directories((root_ / link).parent_path());
    fs::create_symlink("/" + global + "/dev/" + uid, root_ / link);
    if (!dangling) {
      write(global + "/dev/" + uid, "");
      dev_->read_only[(root_ / global / "dev" / uid).string()] = read_only;
    }
  }
  CheckResult run(Config cfg = {}) {
    write("proc/1/mountinfo", mountinfo_);
    // The filesystem PVs are directories on whatever disk the test runs on; its fill level is
    // not ours to assert, so usage thresholds stay out of the way unless a test sets them.
    if (!cfg.has(kLocalPvUsedWarnSetting)) {
      cfg.set("local-pv", "used_warn_percent", 100);
      cfg.set("local-pv", "used_fail_percent", 100);
    }
    HostRoot host(root_.string());
    ProbeContext ctx{host, cfg};
    LocalPvProbe probe(std::make_shared<LvmReportSource>(exec_), dev_,
                       std::make_unique<KubeletDirPvSource>(), api_);
    return probe.run(ctx);
  }
  std::shared_ptr<FakeApiSource> useApi(std::vector<LocalPv> pvs) {
    auto api = std::make_shared<FakeApiSource>();
    api->answer = PvListing{std::move(pvs), "fake api: test listing", std::nullopt};
    api_ = api;
    return api;
  }
  static Config withVg() {
    Config cfg;
    cfg.set("lvm", "volume_group", "vmdata");
    return cfg;
  }

  fs::path root_;
  std::string mountinfo_ = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";
  std::shared_ptr<FakeExec> exec_;
  std::shared_ptr<FakeDeviceIo> dev_;
  std::shared_ptr<PvSource> api_;  // null: kubelet-only discovery
};

TEST_F(KubeletTree, HealthyVolumes) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  addBlockPv("uid-2", "pvc-bbb", "pvc-bbb", 0);
  auto r = run();
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_EQ(r.reason, "LocalVolumesHealthy");
  EXPECT_TRUE(contains(r.message, "2 local volumes"));
  EXPECT_EQ(metricValue(r, "nodegate_local_pv_read_only", "pvc-aaa"), 0);
  EXPECT_EQ(metricValue(r, "nodegate_local_pv_read_only", "pvc-bbb"), 0);
  // Block usage = the thin LV's data percent x its size: 10 % of 10 GiB.
  EXPECT_DOUBLE_EQ(metricValue(r, "nodegate_local_pv_used_bytes", "pvc-bbb"), 1.0 * (1u << 30));
  EXPECT_DOUBLE_EQ(metricValue(r, "nodegate_local_pv_capacity_bytes", "pvc-bbb"),
                   10.0 * (1u << 30));
  // Filesystem usage comes from statvfs on the mount dir (here the test's own filesystem).
  EXPECT_GT(metricValue(r, "nodegate_local_pv_capacity_bytes", "pvc-aaa"), 0);
  EXPECT_GE(metricValue(r, "nodegate_local_pv_inodes_used", "pvc-aaa"), 0);
}

TEST_F(KubeletTree, ReadOnlyMountIsFlagged) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa", "ro,relatime");
  auto r = run();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeReadOnly");
  EXPECT_TRUE(contains(r.message, "PV pvc-aaa is read-only: mounted ro")) << r.message;
  EXPECT_EQ(metricValue(r, "nodegate_local_pv_read_only", "pvc-aaa"), 1);
}

TEST_F(KubeletTree, SuperblockRemountedReadOnlyIsFlagged) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa", "rw,relatime", "ro,errors=remount-ro");
  auto r = run();
  EXPECT_EQ(r.reason, "VolumeReadOnly");
}

TEST_F(KubeletTree, ReadOnlyBlockDeviceIsFlagged) {
  addBlockPv("uid-2", "pvc-bbb", "pvc-bbb", 1);
  auto r = run();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeReadOnly");
  EXPECT_TRUE(contains(r.message, "BLKROGET")) << r.message;
  EXPECT_EQ(metricValue(r, "nodegate_local_pv_read_only", "pvc-bbb"), 1);
}

TEST_F(KubeletTree, ReadOnlyLvIsFlaggedButInactiveIsNot) {
  exec_->reply(readFixture("read-only-lv.std.json"));
  addBlockPv("uid-2", "pvc-aaa", "pvc-aaa", 0);
  auto r = run();
  EXPECT_EQ(r.reason, "VolumeReadOnly");
  EXPECT_TRUE(contains(r.message, "LV permission read-only")) << r.message;

  // The same PV on an inactive writable LV ("unknown" permission) is not read-only.
  exec_->reply(readFixture("snapshots.json"));  // pvc-aaa-snap is inactive, permission unknown
  Config cfg;
  cfg.set("local-pv", "lvm_max_age_seconds", 0);
  fs::remove_all(root_ / "var");
  addBlockPv("uid-3", "pvc-aaa-snap", "pvc-aaa-snap", 0);
  auto r2 = run(cfg);
  EXPECT_NE(r2.reason, "VolumeReadOnly") << r2.message;
}

TEST_F(KubeletTree, ExpectedReadOnlyIsAllowed) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa", "ro");
  Config cfg;
  cfg.set("local-pv", "expected_read_only", nlohmann::json::array({"pvc-aaa"}));
  EXPECT_EQ(run(cfg).status, Status::Pass);
}

TEST_F(KubeletTree, UnattachedLvsWithoutTheApi) {
  // Kubelet-only: pvc-bbb may be a stopped VM's disk or a leftover; the reason says which
  // it cannot tell.
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "UnattachedVolumes");
  EXPECT_TRUE(contains(r.message, "1 LVs in vmdata are used by no pod on this node (pvc-bbb)"))
      << r.message;
}

TEST_F(KubeletTree, StoppedVmDiskIsNotAnOrphan) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  useApi({apiPv("pvc-aaa", "pvc-aaa", "vms/disk-a", "vms/alice"),
          apiPv("pvc-bbb", "pvc-bbb", "vms/disk-b", "vms/bob")});
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_EQ(r.reason, "LocalVolumesHealthy");
  EXPECT_TRUE(contains(r.message, "2 local volumes")) << r.message;
  const auto bbb = evidenceOf(r, "PV pvc-bbb");
  EXPECT_TRUE(contains(bbb, "claim vms/disk-b Bound, VM vms/bob")) << bbb;
  EXPECT_TRUE(contains(bbb, "not in use by a pod on this node")) << bbb;
  // The running one keeps its kubelet facts and gains the API's.
  const auto aaa = evidenceOf(r, "PV pvc-aaa");
  EXPECT_TRUE(contains(aaa, "VM vms/alice")) << aaa;
  EXPECT_FALSE(contains(aaa, "not in use")) << aaa;
  EXPECT_TRUE(contains(evidenceOf(r, "pv discovery api"), "fake api")) << r.message;
  EXPECT_TRUE(contains(evidenceOf(r, "volume group vmdata"), "0 LVs without a PersistentVolume"));
  // Block usage of the stopped VM's thin LV is still known: 10 % of 10 GiB.
  EXPECT_DOUBLE_EQ(metricValue(r, "nodegate_local_pv_used_bytes", "pvc-bbb"), 1.0 * (1u << 30));
}

TEST_F(KubeletTree, LvWithoutAnyPvIsAnOrphan) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  useApi({apiPv("pvc-aaa", "pvc-aaa", "vms/disk-a", "vms/alice")});
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "OrphanedVolumes");
  EXPECT_TRUE(
      contains(r.message, "1 LVs in vmdata have no PersistentVolume in the cluster (pvc-bbb)"))
      << r.message;
}

TEST_F(KubeletTree, ReleasedPvIsNotAnOrphanButIsNoted) {
  addAgentPod();
  useApi({apiPv("pvc-aaa", "pvc-aaa", "vms/disk-a", "", "Released"),
          apiPv("pvc-bbb", "pvc-bbb", "vms/disk-b", "vms/bob")});
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_TRUE(contains(evidenceOf(r, "released PVs"), "(pvc-aaa)")) << r.message;
  EXPECT_TRUE(contains(evidenceOf(r, "not in use"), "2 PVs pinned here")) << r.message;
}

TEST_F(KubeletTree, PinnedPvWithoutItsLvFails) {
  auto pv = apiPv("pvc-ccc", "6b3c1a9e-lost", "vms/disk-c", "vms/carol");
  useApi({apiPv("pvc-aaa", "pvc-aaa", "vms/disk-a", "vms/alice"),
          apiPv("pvc-bbb", "pvc-bbb", "vms/disk-b", "vms/bob"), pv});
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeBackingMissing");
  EXPECT_TRUE(contains(r.message,
                       "PV pvc-ccc (claim vms/disk-c, VM vms/carol): backing LV "
                       "6b3c1a9e-lost is not in volume group vmdata"))
      << r.message;
  // The API's node affinity is enough to expect the LV here, even with no managed VG.
  auto r2 = run();
  EXPECT_EQ(r2.reason, "VolumeBackingMissing");
  EXPECT_TRUE(contains(r2.message, "6b3c1a9e-lost is not on this node")) << r2.message;
  // A claim owned by a DataVolume whose VM is unknown is named by the DataVolume.
  pv.vm.clear();
  pv.owner = "DataVolume vms/disk-c-dv";
  useApi({pv});
  EXPECT_TRUE(contains(run().message, "PV pvc-ccc (claim vms/disk-c, DataVolume vms/disk-c-dv)"));
}

TEST_F(KubeletTree, LocalVolumePathMustExist) {
  auto pv = apiPv("local-pv-1", "", "vms/scratch", "vms/alice");
  pv.driver = "kubernetes.io/local";
  pv.local_path = "/mnt/disks/ssd1";
  pv.block = false;
  addAgentPod();
  useApi({pv});
  auto r = run();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeBackingMissing");
  EXPECT_TRUE(contains(r.message,
                       "PV local-pv-1 (claim vms/scratch, VM vms/alice): local path "
                       "/mnt/disks/ssd1 does not exist"))
      << r.message;
  fs::create_directories(root_ / "mnt/disks/ssd1");
  EXPECT_EQ(run().status, Status::Pass);
}

// #21: a kubelet directory elsewhere (k0s, microk8s) leaves the default one empty or absent;
// with the API pinning PVs here, "no local volumes" would be a PASS on input nobody read.
TEST_F(KubeletTree, ApiPvsWithAnEmptyKubeletDirAreUnknown) {
  useApi({apiPv("pvc-aaa", "pvc-aaa", "vms/disk-a", "vms/alice")});
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_TRUE(contains(r.message, "the API pins 1 PVs to this node but")) << r.message;
  EXPECT_TRUE(contains(r.hint, "checks.local-pv.kubelet_dir")) << r.hint;
  fs::create_directories(root_ / "var/lib/kubelet/pods");  // present but empty: the same
  EXPECT_EQ(run(withVg()).status, Status::Unknown);
  addAgentPod();  // the right directory: judged as before
  EXPECT_NE(run(withVg()).reason, "KubeletDirNotFound");
}

// #22 item 5: a missing host root is not a node without volumes.
TEST_F(KubeletTree, MissingHostRootIsUnknown) {
  fs::remove_all(root_);
  HostRoot host(root_.string());
  Config cfg;
  ProbeContext ctx{host, cfg};
  LocalPvProbe probe(std::make_shared<LvmReportSource>(exec_), dev_);
  auto r = probe.run(ctx);
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_TRUE(contains(r.message, "failed to read the host root")) << r.message;
}

// A volume whose mount table could not be read is undecided, not healthy.
TEST_F(KubeletTree, UnreadableMountTableIsUnknown) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  Config cfg;
  cfg.set("local-pv", "mountinfo_pid", "999999");  // no such process: mountinfo unreadable
  cfg.set("local-pv", "use_lvm", false);
  auto r = run(cfg);
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_EQ(r.reason, "VolumeUnreadable") << r.message;
}

TEST_F(KubeletTree, ApiForbiddenIsUnknownWhileTheKubeletViewStillCounts) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  auto api = useApi({});
  api->answer = Error{EACCES, "failed to list persistentvolumes: HTTP 403: forbidden"};
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "VolumeDiscoveryForbidden");
  EXPECT_TRUE(contains(r.message, "HTTP 403")) << r.message;
  EXPECT_TRUE(contains(r.hint, "list on persistentvolumes")) << r.hint;
  // Orphans fall back to the kubelet's weaker verdict, listed after the UNKNOWN.
  EXPECT_TRUE(contains(r.message, "used by no pod on this node")) << r.message;
  // A read-only volume the kubelet sees is still a FAIL.
  fs::remove_all(root_ / "var");
  mountinfo_ = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa", "ro,relatime");
  auto r2 = run(withVg());
  EXPECT_EQ(r2.status, Status::Fail);
  EXPECT_EQ(r2.reason, "VolumeReadOnly");
  // Other failures (timeouts, 5xx after retries) have their own reason.
  api->answer = Error{ETIMEDOUT, "failed to list persistentvolumes: Timeout was reached"};
  fs::remove_all(root_ / "var");
  mountinfo_ = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  EXPECT_EQ(run().reason, "VolumeDiscoveryFailed");
}

TEST_F(KubeletTree, OrphansWaitForTheFirstApiList) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  auto api = useApi({});
  api->answer = Error{EAGAIN, "waiting for the first list of PersistentVolumes"};
  auto r = run(withVg());
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_TRUE(contains(evidenceOf(r, "pv discovery api"), "waiting")) << r.message;
}

TEST_F(KubeletTree, ApiViewWithoutKubeletDir) {
  // The agent may see the API but not the kubelet dir: the API's PVs are still checked.
  auto api = useApi({apiPv("pvc-ccc", "6b3c1a9e-lost", "vms/disk-c", "vms/carol")});
  auto r = run(withVg());
  EXPECT_EQ(r.reason, "VolumeBackingMissing") << r.message;
  // And a failing API is not hidden behind "no kubelet directory, nothing to check".
  api->answer = Error{EACCES, "failed to list persistentvolumes: HTTP 401: Unauthorized"};
  r = run();
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_EQ(r.reason, "VolumeDiscoveryForbidden");
}

TEST(MergePvViews, JoinsByNameAndKeepsBothSides) {
  LocalPv running;
  running.name = "pvc-a";
  running.path = "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-a/mount";
  running.pod_uid = "u";
  LocalPv other;  // a network volume the API does not pin here
  other.name = "pvc-net";
  auto merged = mergePvViews({running, other}, {apiPv("pvc-a", "lv-a", "ns/a", "ns/vm-a"),
                                                apiPv("pvc-b", "lv-b", "ns/b", "ns/vm-b")});
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].name, "pvc-a");
  EXPECT_TRUE(merged[0].attached);
  EXPECT_TRUE(merged[0].from_api);
  EXPECT_EQ(merged[0].path, running.path);
  EXPECT_EQ(merged[0].vm, "ns/vm-a");
  EXPECT_EQ(merged[0].volume_handle, "lv-a");  // the kubelet had none: the API's fills in
  EXPECT_FALSE(merged[1].from_api);
  EXPECT_EQ(merged[2].name, "pvc-b");
  EXPECT_FALSE(merged[2].attached);
  EXPECT_TRUE(merged[2].path.empty());
}

TEST_F(KubeletTree, MissingBackingLvAndDanglingDevice) {
  addFsPv("uid-1", "pvc-gone", "e6b3a1b2-0000");
  addBlockPv("uid-2", "pvc-dangling", "pvc-dangling", 0, /*dangling=*/true);
  Config cfg;
  cfg.set("lvm", "volume_group", "vmdata");
  auto r = run(cfg);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "VolumeBackingMissing");
  EXPECT_TRUE(contains(r.message,
                       "PV pvc-gone: backing LV e6b3a1b2-0000 is not in volume group "
                       "vmdata"))
      << r.message;
  EXPECT_TRUE(contains(r.message, "pvc-dangling")) << r.message;
}

TEST_F(KubeletTree, PoolPressureUnderTheVolumes) {
  exec_->reply(readFixture("thinpool-100-out-of-data.json"));
  addBlockPv("uid-2", "pvc-bbb", "pvc-bbb", 0);
  auto r = run();
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "ThinPoolDataPressure");
  exec_->reply(readFixture("partial-vg-missing-pv.json"));
  Config cfg;
  cfg.set("local-pv", "lvm_max_age_seconds", 0);
  addBlockPv("uid-3", "pvc-aaa", "pvc-aaa", 0);
  r = run(cfg);
  EXPECT_EQ(r.reason, "VolumeGroupDegraded") << r.message;
}

TEST_F(KubeletTree, NearlyFullBlockVolume) {
  exec_->reply(readFixture("healthy.json"));  // pvc-aaa: 50 % of 10 GiB
  addBlockPv("uid-2", "pvc-aaa", "pvc-aaa", 0);
  Config cfg;
  cfg.set("local-pv", "used_warn_percent", 40);
  auto r = run(cfg);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "VolumeNearlyFull");
}

TEST_F(KubeletTree, NotMountedFilesystemVolume) {
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa");
  mountinfo_ = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";  // kubelet dir but no mount
  auto r = run();
  EXPECT_EQ(r.reason, "VolumeNotMounted");
}

TEST_F(KubeletTree, SharesTheLvmProbesRun) {
  addBlockPv("uid-2", "pvc-bbb", "pvc-bbb", 0);
  write("proc/1/mountinfo", mountinfo_);
  auto source = std::make_shared<LvmReportSource>(exec_);
  LvmProbe lvm(source);
  LocalPvProbe local(source, dev_);
  HostRoot host(root_.string());
  Config cfg;
  ProbeContext ctx{host, cfg};
  EXPECT_EQ(lvm.run(ctx).status, Status::Pass);
  EXPECT_EQ(local.run(ctx).status, Status::Pass);
  EXPECT_EQ(exec_->calls, 1);
}

TEST_F(KubeletTree, NoLvmStillChecksFilesystems) {
  exec_->reply("", 127, "No such file or directory");
  addFsPv("uid-1", "pvc-aaa", "pvc-aaa", "ro");
  addBlockPv("uid-2", "pvc-bbb", "pvc-bbb", 0);
  auto r = run();
  EXPECT_EQ(r.reason, "VolumeReadOnly");
  EXPECT_LT(metricValue(r, "nodegate_local_pv_used_bytes", "pvc-bbb"), 0);  // unknown, not 0
}

TEST_F(KubeletTree, NoKubeletDir) {
  auto r = run();
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.reason, "NoLocalVolumes");
  Config cfg;
  cfg.set("lvm", "volume_group", "vmdata");
  r = run(cfg);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "VolumeDiscoveryFailed");
  EXPECT_FALSE(r.hint.empty());
}

TEST(ParseMountInfo, FieldsEscapesAndReadOnly) {
  auto m = parseMountInfo(
      "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
      "37 35 98:0 / /ro ro,relatime - ext4 /dev/sda1 rw\n"
      "38 35 98:0 / /sb rw,relatime shared:2 master:3 - ext4 /dev/sda2 ro,errors=remount-ro\n"
      "39 35 98:0 / /rootfs rw,relatime - ext4 /dev/sda3 rw,errors=remount-ro\n"
      "garbage line\n"
      "40 35 98:0 / /short rw - \n");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].mount_point, "/mnt two");
  EXPECT_EQ(m[0].root, "/mnt1");
  EXPECT_EQ(m[0].fstype, "ext3");
  EXPECT_EQ(m[0].source, "/dev/root");
  EXPECT_FALSE(m[0].read_only);
  EXPECT_TRUE(m[1].read_only);
  EXPECT_TRUE(m[2].read_only);
  EXPECT_FALSE(m[3].read_only);  // "errors=remount-ro" is not "ro"
}

TEST(FsUsage, FromStatvfs) {
  struct statvfs st {};
  st.f_frsize = 4096;
  st.f_blocks = 1000;
  st.f_bfree = 250;
  st.f_files = 100;
  st.f_ffree = 40;
  auto u = fsUsageOf(st);
  EXPECT_EQ(u.capacity_bytes, 4096u * 1000);
  EXPECT_EQ(u.used_bytes, 4096u * 750);
  EXPECT_EQ(u.inodes_used, 60u);
}

}  // namespace
}  // namespace nodegate
