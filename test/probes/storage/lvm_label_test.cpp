// The LVM2 label scan that lets the lvm probe skip `lvm fullreport` on hosts without any PV:
// the pure label parser on literal sectors, the scan over a sysfs tree with a fake DeviceIo that
// serves device bytes, and the report source's choice between skipping and running lvm.
#include "lvm_label.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "lvm.h"
#include "storage_fakes.h"

namespace nodegate {
namespace {

using testing::FakeExec;
using testing::readFixture;

// A label header as pvcreate writes it: "LABELONE", sector number, crc, offset, "LVM2 001".
std::string labelSector(const char* type = "LVM2 001") {
  std::string s(kLvmSectorSize, '\0');
  std::memcpy(s.data(), "LABELONE", 8);
  std::memcpy(s.data() + 24, type, 8);
  return s;
}

std::string headWithLabelAt(std::size_t sector, const char* type = "LVM2 001") {
  std::string head(kLvmLabelScanBytes, '\0');
  head.replace(sector * kLvmSectorSize, kLvmSectorSize, labelSector(type));
  return head;
}

TEST(LvmLabelParse, FindsTheLabelInEachOfTheFourSectors) {
  for (std::size_t sector = 0; sector < 4; ++sector) {
    auto at = findLvm2Label(headWithLabelAt(sector));
    ASSERT_TRUE(at.has_value()) << "sector " << sector;
    EXPECT_EQ(*at, sector);
  }
}

TEST(LvmLabelParse, RealPvcreateOutput) {
  // The first 2048 bytes of a loop device after `pvcreate` (lvm 2.03, Debian 12), kept as a fuzz
  // seed.
  std::ifstream in(std::string(NODEGATE_TEST_DIR) + "/fuzz/corpus/lvm_label/pvcreate-real-lvm2.03",
                   std::ios::binary);
  std::string head((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(head.size(), kLvmLabelScanBytes);
  EXPECT_EQ(findLvm2Label(head), 1u);
}

TEST(LvmLabelParse, RejectsWhatIsNotAnLvm2Label) {
  EXPECT_FALSE(findLvm2Label(std::string(kLvmLabelScanBytes, '\0')));
  EXPECT_FALSE(findLvm2Label(""));
  // Another labeller's type, a damaged id, the type without the id.
  EXPECT_FALSE(findLvm2Label(headWithLabelAt(1, "LVM1 001")));
  std::string bad_id = headWithLabelAt(2);
  bad_id[kLvmSectorSize * 2 + 7] = 'X';
  EXPECT_FALSE(findLvm2Label(bad_id));
  std::string type_only(kLvmLabelScanBytes, '\0');
  std::memcpy(type_only.data() + 24, "LVM2 001", 8);
  EXPECT_FALSE(findLvm2Label(type_only));
  // lvm looks at sector starts only: a header 8 bytes into a sector is not one.
  std::string shifted(kLvmLabelScanBytes, '\0');
  shifted.replace(8, 32, labelSector().substr(0, 32));
  EXPECT_FALSE(findLvm2Label(shifted));
  // A fifth sector is beyond what lvm reads.
  std::string fifth(kLvmLabelScanBytes + kLvmSectorSize, '\0');
  fifth.replace(kLvmLabelScanBytes, kLvmSectorSize, labelSector());
  EXPECT_FALSE(findLvm2Label(fifth));
}

TEST(LvmLabelParse, TruncatedInput) {
  // The header (32 bytes) of sector 1 complete: found; one byte short: not.
  std::string head = headWithLabelAt(1);
  EXPECT_EQ(findLvm2Label(std::string_view(head).substr(0, kLvmSectorSize + 32)), 1u);
  EXPECT_FALSE(findLvm2Label(std::string_view(head).substr(0, kLvmSectorSize + 31)));
  EXPECT_FALSE(findLvm2Label(std::string_view(head).substr(0, 7)));
}

// Block devices behind a fake DeviceIo: bytes per node, plus injected errors.
struct FakeBlock {
  unsigned major = 0, minor = 0;
  std::string bytes;
  int open_errno = 0;
  int read_errno = 0;
  mode_t type = S_IFBLK;
};
FakeBlock withBytes(std::string bytes) {
  FakeBlock b;
  b.bytes = std::move(bytes);
  return b;
}
FakeBlock refusingOpen(int err) {
  FakeBlock b;
  b.open_errno = err;
  return b;
}

class BlockDeviceIo final : public DeviceIo {
 public:
  std::map<std::string, FakeBlock> nodes;
  std::vector<std::string> opened;
  int open_flags = 0;

  Result<struct stat> statPath(const std::string& path) override {
    auto it = nodes.find(path);
    if (it == nodes.end()) return errnoError(ENOENT, "stat " + path);
    struct stat st {};
    st.st_mode = it->second.type | 0600;
    st.st_rdev = makedev(it->second.major, it->second.minor);
    return st;
  }
  Result<int> open(const std::string& path, int flags) override {
    auto it = nodes.find(path);
    if (it == nodes.end()) return errnoError(ENOENT, "open " + path);
    if (it->second.open_errno) return errnoError(it->second.open_errno, "open " + path);
    open_flags = flags;
    opened.push_back(path);
    fds_[next_] = path;
    return next_++;
  }
  Result<int> ioctl(int, unsigned long, void*) override { return errnoError(ENOTTY, "ioctl"); }
  void close(int fd) override { fds_.erase(fd); }
  Result<std::size_t> pread(int fd, void* buf, std::size_t len, std::uint64_t off) override {
    const FakeBlock& b = nodes.at(fds_.at(fd));
    if (b.read_errno) return errnoError(b.read_errno, "read");
    if (off >= b.bytes.size()) return std::size_t{0};
    std::size_t n = std::min<std::size_t>(len, b.bytes.size() - off);
    std::memcpy(buf, b.bytes.data() + off, n);
    return n;
  }
  std::size_t openFds() const { return fds_.size(); }

 private:
  std::map<int, std::string> fds_;
  int next_ = 50;
};

// A host root with <root>/sys/class/block/<name>/{size,dev}; nodes live in the fake at
// <root>/dev/<name>.
class LabelScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodegate-lvmlabel-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/sys/class/block");
    host_ = HostRoot(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void addDevice(const std::string& name, unsigned major, unsigned minor, std::uint64_t sectors,
                 FakeBlock block = {}) {
    const std::string dir = root_ + "/sys/class/block/" + name;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/size") << sectors << "\n";
    std::ofstream(dir + "/dev") << major << ":" << minor << "\n";
    block.major = major;
    block.minor = minor;
    std::string node = name;
    std::replace(node.begin(), node.end(), '!', '/');
    io_->nodes[host_.dev(node)] = std::move(block);
  }

  std::string root_;
  HostRoot host_{"/"};
  std::shared_ptr<BlockDeviceIo> io_ = std::make_shared<BlockDeviceIo>();
};

TEST_F(LabelScanTest, NoLabelOnAnyDevice) {
  addDevice("vda", 254, 0, 1 << 20, withBytes(std::string(4096, 'x')));
  addDevice("vda1", 254, 1, 1 << 19, withBytes(std::string(4096, '\0')));
  addDevice("loop0", 7, 0, 0);  // unused loop device: size 0, never opened
  addDevice("cciss!c0d0", 104, 0, 100, withBytes("tiny"));
  auto scan = scanLvmLabels(host_, *io_);
  EXPECT_TRUE(scan.noLabels()) << scan.error;
  EXPECT_EQ(scan.scanned, 3u);
  EXPECT_EQ(scan.empty, 1u);
  EXPECT_EQ(io_->openFds(), 0u);
  EXPECT_EQ(std::count(io_->opened.begin(), io_->opened.end(), host_.dev("cciss/c0d0")), 1);
  EXPECT_EQ(io_->open_flags & O_ACCMODE, O_RDONLY);
  EXPECT_TRUE(io_->open_flags & O_NONBLOCK);
}

TEST_F(LabelScanTest, FindsAPartitionCarryingALabel) {
  addDevice("sda", 8, 0, 1 << 20, withBytes(std::string(4096, '\0')));
  addDevice("sda2", 8, 2, 1 << 20, withBytes(headWithLabelAt(1)));
  auto scan = scanLvmLabels(host_, *io_);
  EXPECT_FALSE(scan.noLabels());
  ASSERT_EQ(scan.labelled.size(), 1u);
  EXPECT_EQ(scan.labelled[0], "sda2 (sector 1)");
}

TEST_F(LabelScanTest, AnythingUnreadableLeavesTheAnswerOpen) {
  addDevice("vda", 254, 0, 1 << 20, withBytes(std::string(4096, '\0')));
  addDevice("vdb", 254, 16, 1 << 20, refusingOpen(EACCES));
  auto scan = scanLvmLabels(host_, *io_);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("Permission denied"), std::string::npos) << scan.error;

  io_->nodes[host_.dev("vdb")] = {254, 16, "", 0, EIO};
  scan = scanLvmLabels(host_, *io_);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("Input/output error"), std::string::npos) << scan.error;
  EXPECT_EQ(io_->openFds(), 0u) << "a failed read must still close the device";

  // The node is some other device than the one sysfs describes.
  io_->nodes[host_.dev("vdb")] = {8, 16, std::string(4096, '\0')};
  scan = scanLvmLabels(host_, *io_);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("not the block device 254:16"), std::string::npos) << scan.error;

  io_->nodes[host_.dev("vdb")] = {254, 16, std::string(4096, '\0'), 0, 0, S_IFREG};
  EXPECT_FALSE(scanLvmLabels(host_, *io_).noLabels());

  // No node at all (a container without the host's /dev).
  io_->nodes.erase(host_.dev("vdb"));
  scan = scanLvmLabels(host_, *io_);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("No such file"), std::string::npos) << scan.error;
}

TEST_F(LabelScanTest, DeviceCgroupRefusalIsWhatLvmSeesToo) {
  addDevice("vda", 254, 0, 1 << 20, refusingOpen(EPERM));
  addDevice("loop3", 7, 3, 2048, withBytes(std::string(4096, '\0')));
  auto scan = scanLvmLabels(host_, *io_);
  EXPECT_TRUE(scan.noLabels()) << scan.error;
  EXPECT_EQ(scan.scanned, 1u);
  EXPECT_EQ(scan.denied, std::vector<std::string>{"vda"});
}

TEST_F(LabelScanTest, NoSysfsOrAnEmptyOneIsNotAHostWithoutDisks) {
  EXPECT_FALSE(scanLvmLabels(host_, *io_).noLabels());  // class/block exists but is empty
  HostRoot nowhere("/nonexistent-nodegate-root");
  auto scan = scanLvmLabels(nowhere, *io_);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("failed to list"), std::string::npos) << scan.error;
}

TEST_F(LabelScanTest, ADeviceIoThatCannotReadMeansRunLvm) {
  // The seam's default pread (fakes that do not model reads) must never read as "no label".
  class NoRead final : public DeviceIo {
   public:
    Result<struct stat> statPath(const std::string&) override {
      struct stat st {};
      st.st_mode = S_IFBLK;
      st.st_rdev = makedev(254, 0);
      return st;
    }
    Result<int> open(const std::string&, int) override { return 7; }
    Result<int> ioctl(int, unsigned long, void*) override { return 0; }
    void close(int) override {}
  } noread;
  addDevice("vda", 254, 0, 100);
  auto scan = scanLvmLabels(host_, noread);
  EXPECT_FALSE(scan.noLabels());
  EXPECT_NE(scan.error.find("does not read"), std::string::npos) << scan.error;
}

// The report source: skip lvm only when the scan is certain and nothing else needs lvm.
class LabelSourceTest : public LabelScanTest {
 protected:
  void SetUp() override {
    LabelScanTest::SetUp();
    // An installed "lvm": any executable named by path does (the fake Exec never runs it).
    cfg_.set("lvm", "command", "/bin/sh");
    exec_->reply(readFixture("no-vgs.json"));
  }
  std::shared_ptr<FakeExec> exec_ = std::make_shared<FakeExec>();
  Config cfg_;
};

TEST_F(LabelSourceTest, SkipsLvmWithoutLabelsAndSaysSo) {
  addDevice("vda", 254, 0, 1 << 20, withBytes(std::string(4096, '\0')));
  addDevice("loop0", 7, 0, 0);
  auto source = std::make_shared<LvmReportSource>(exec_, io_);
  LvmProbe probe(source);
  ProbeContext ctx{host_, cfg_};
  auto r = probe.run(ctx);
  EXPECT_EQ(exec_->calls, 0);
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.reason, "NoVolumeGroups");
  EXPECT_TRUE(r.metrics.empty());
  std::map<std::string, std::string> ev;
  for (const auto& e : r.evidence) ev[e.source] = e.observed;
  EXPECT_EQ(ev["lvm command"], "/bin/sh (not run)");
  EXPECT_EQ(ev["lvm label scan"],
            "1 block devices read (1 of size 0 skipped); none carries an LVM2 label");
  EXPECT_EQ(ev["volume groups"], "none");
  // local-pv, later in the same cycle, reuses the answer instead of running lvm.
  auto reused = source->get(cfg_, std::chrono::seconds(30));
  EXPECT_TRUE(reused->lvm_skipped);
  EXPECT_EQ(exec_->calls, 0);
}

TEST_F(LabelSourceTest, SameVerdictAsRunningLvmOnAnLvmLessHost) {
  addDevice("vda", 254, 0, 1 << 20, withBytes(std::string(4096, '\0')));
  ProbeContext ctx{host_, cfg_};
  auto skipped = LvmProbe(std::make_shared<LvmReportSource>(exec_, io_)).run(ctx);
  auto ran = LvmProbe(std::make_shared<LvmReportSource>(exec_)).run(ctx);
  EXPECT_EQ(exec_->calls, 1);
  EXPECT_EQ(skipped.status, ran.status);
  EXPECT_EQ(skipped.reason, ran.reason);
}

TEST_F(LabelSourceTest, RunsLvmWhenALabelOrDoubtOrPolicySaysSo) {
  addDevice("vda", 254, 0, 1 << 20, withBytes(std::string(4096, '\0')));
  addDevice("vdb", 254, 16, 1 << 20, withBytes(headWithLabelAt(1)));
  LvmReportSource source(exec_, io_);
  auto f = source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 1);
  EXPECT_FALSE(f->lvm_skipped);
  EXPECT_EQ(f->label_scan, "2 block devices read; vdb (sector 1) carries an LVM2 label");

  io_->nodes[host_.dev("vdb")].bytes = std::string(4096, '\0');
  EXPECT_TRUE(source.get(host_, cfg_, {})->lvm_skipped);
  EXPECT_EQ(exec_->calls, 1);

  // A managed VG: the probe must say VolumeGroupMissing from lvm's own answer.
  cfg_.set("lvm", "volume_group", "vg-local");
  auto managed = source.get(host_, cfg_, {});
  EXPECT_FALSE(managed->lvm_skipped);
  // Still scanned: a device the cgroup refuses must keep a missing VG from reading as gone.
  EXPECT_EQ(managed->label_scan, "2 block devices read; none carries an LVM2 label");
  EXPECT_EQ(exec_->calls, 2);
  EXPECT_EQ(evaluateLvm(*managed, lvmPolicy(cfg_)).reason, "VolumeGroupMissing");
  cfg_.set("lvm", "volume_group", "");

  // lvm not installed: NoLocalLvm stays what the probe says.
  cfg_.set("lvm", "command", "/nonexistent/sbin/lvm");
  exec_->reply("", 127, "No such file or directory");
  auto missing = source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 3);
  EXPECT_EQ(evaluateLvm(*missing, lvmPolicy(cfg_)).reason, "NoLocalLvm");
  cfg_.set("lvm", "command", "no-such-lvm-program-on-path");
  source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 4);

  // A device the scan cannot read.
  cfg_.set("lvm", "command", "/bin/sh");
  exec_->reply(readFixture("no-vgs.json"));
  io_->nodes[host_.dev("vdb")].read_errno = EIO;
  auto doubt = source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 5);
  EXPECT_NE(doubt->label_scan.find("lvm decides"), std::string::npos) << doubt->label_scan;
  auto r = evaluateLvm(*doubt, lvmPolicy(cfg_));
  EXPECT_EQ(r.reason, "NoVolumeGroups");
  EXPECT_EQ(r.message, "lvm is installed but this host has no volume groups");

  // Without a host (the old entry point) or without a DeviceIo, lvm always runs.
  io_->nodes[host_.dev("vdb")].read_errno = 0;
  source.get(cfg_, {});
  EXPECT_EQ(exec_->calls, 6);
  LvmReportSource(exec_).get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 7);
}

// The false PASS: an unprivileged container's device cgroup refuses every block
// device, the scan reads nothing, and "no label anywhere" must not become NoVolumeGroups.
TEST_F(LabelSourceTest, RefusedDevicesMakeLvmUnknownNotNoVolumeGroups) {
  addDevice("vda", 254, 0, 1 << 20, refusingOpen(EPERM));
  addDevice("vdb", 254, 16, 1 << 20, refusingOpen(EPERM));
  LvmReportSource source(exec_, io_);
  auto f = source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 0);  // lvm would be refused the same devices
  EXPECT_EQ(f->refused, (std::vector<std::string>{"vda", "vdb"}));
  auto r = evaluateLvm(*f, lvmPolicy(cfg_));
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "BlockDevicesRefused");
  // One readable device with a label: lvm runs, the refused ones still keep it UNKNOWN.
  addDevice("loop1", 7, 1, 2048, withBytes(headWithLabelAt(1)));
  exec_->reply(readFixture("healthy.json"));
  auto g = source.get(host_, cfg_, {});
  EXPECT_EQ(exec_->calls, 1);
  EXPECT_EQ(evaluateLvm(*g, lvmPolicy(cfg_)).reason, "BlockDevicesRefused");
}

}  // namespace
}  // namespace nodegate
