// Real device nodes, made with mknod in a temporary root and opened through the production
// DeviceIo against the real kernel of this machine. Device nodes cannot live in git and the
// fake only says what we believe the kernel does; this says what it does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>

#include "kvm_device.h"
#include "tun.h"
#include "vhost_net.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;

bool hostHas(const char* misc) {
  return fs::exists(std::string("/sys/class/misc/") + misc);
}

std::string evidenceOf(const CheckResult& r, const std::string& source) {
  for (const auto& e : r.evidence)
    if (e.source == source) return e.observed;
  return {};
}

class DeviceNodesRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to mknod device nodes";
    char tmpl[] = "/tmp/nodegate-devroot-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // mkdtemp makes the root 0700; the unprivileged case below must reach the node itself.
    ::chmod(root_.c_str(), 0755);
    fs::create_directories(root_ + "/dev/net");
    // The real procfs and sysfs: whether a driver is registered is the kernel's truth.
    host_.setProcfs("/proc");
    host_.setSysfs("/sys");
    host_.setDevfs(root_ + "/dev");
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void node(const std::string& rel, unsigned major, unsigned minor, mode_t mode = 0666) {
    auto p = host_.dev(rel);
    ::unlink(p.c_str());
    ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | mode, makedev(major, minor)), 0) << p;
    ::chmod(p.c_str(), mode);
  }
  CheckResult run(Probe& p) { return p.run(ProbeContext{host_, cfg_}); }

  std::string root_;
  HostRoot host_{"/nonexistent"};
  Config cfg_;
  Seams seams_ = productionSeams();
};

TEST_F(DeviceNodesRoot, VhostNetNodeWithoutDriverIsNeverPass) {
  node("vhost-net", 10, 238);
  VhostNetProbe p(seams_.device);
  auto r = run(p);
  if (hostHas("vhost-net")) {
    EXPECT_EQ(r.status, Status::Pass) << r.message;
  } else {
    // No driver behind 10:238: the kernel answers ENODEV/ENXIO to open.
    EXPECT_EQ(r.status, Status::Warn) << r.message;
    EXPECT_EQ(r.reason, "NoDriver") << r.message;
    EXPECT_FALSE(r.hint.empty());
  }
}

TEST_F(DeviceNodesRoot, KvmNodeFollowsTheKernel) {
  node("kvm", 10, 232);
  KvmDeviceProbe p(seams_.device);
  auto r = run(p);
  if (hostHas("kvm")) {
    // The driver is registered: the real ioctls run and answer for themselves.
    EXPECT_EQ(evidenceOf(r, "ioctl KVM_GET_API_VERSION"), "12") << r.message;
    EXPECT_FALSE(evidenceOf(r, "ioctl KVM_CHECK_EXTENSION present").empty());
    if (r.status != Status::Pass) {
      EXPECT_FALSE(r.hint.empty());
    }
  } else {
    EXPECT_EQ(r.status, Status::Fail) << r.message;
    EXPECT_EQ(r.reason, "NoDriver");
  }
}

TEST_F(DeviceNodesRoot, WrongNumberAndPlainFileFail) {
  node("kvm", 1, 3);  // /dev/null's number
  KvmDeviceProbe p(seams_.device);
  auto r = run(p);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "WrongDeviceNode");
  ::unlink(host_.dev("kvm").c_str());
  FILE* f = std::fopen(host_.dev("kvm").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_EQ(run(p).reason, "WrongDeviceNode");
}

TEST_F(DeviceNodesRoot, PermissionDeniedIsUnknown) {
  node("kvm", 10, 232, 0600);
  node("net/tun", 10, 200, 0600);
  KvmDeviceProbe kvm(seams_.device);
  TunProbe tun(seams_.device);
  // Drop to nobody for the effective uid only; root's DAC override goes with it.
  ASSERT_EQ(::seteuid(65534), 0);
  auto rk = run(kvm);
  auto rt = run(tun);
  ASSERT_EQ(::seteuid(0), 0);
  EXPECT_EQ(rk.status, Status::Unknown) << rk.message;
  EXPECT_EQ(rk.reason, "PermissionDenied");
  EXPECT_EQ(rt.status, Status::Unknown) << rt.message;
  EXPECT_NE(rk.hint.find("kvm group"), std::string::npos);
}

// An absent node means something only in a device filesystem (#17): this root's dev/ has no
// null device until the test makes one, like an empty mount point or a wrong --path.devfs.
TEST_F(DeviceNodesRoot, AbsentNodesCountOnlyInADeviceFilesystem) {
  KvmDeviceProbe kvm(seams_.device);
  VhostNetProbe vhost(seams_.device);
  TunProbe tun(seams_.device);
  const std::pair<Probe*, const char*> probes[] = {
      {&kvm, "kvm"}, {&vhost, "vhost-net"}, {&tun, "tun"}};
  for (auto [p, misc] : probes) {
    auto r = run(*p);
    SCOPED_TRACE(std::string(misc) + ": " + r.reason + " " + r.message);
    EXPECT_EQ(r.status, Status::Unknown);
    EXPECT_EQ(r.reason, "DevfsUnreadable");
    EXPECT_TRUE(r.labels.empty());
  }
  node("null", 1, 3);
  // Now the absence is a fact; the real sysfs tells which one: a registered driver without its
  // node, or no driver at all.
  for (auto [p, misc] : probes) {
    auto r = run(*p);
    SCOPED_TRACE(std::string(misc) + ": " + r.reason + " " + r.message);
    EXPECT_EQ(r.reason, hostHas(misc) ? "DeviceNodeMissing" : "DeviceMissing");
    EXPECT_NE(r.status, Status::Unknown);
    EXPECT_NE(r.status, Status::Pass);
    EXPECT_FALSE(r.labels.empty());
  }
}

TEST_F(DeviceNodesRoot, RealTunAnswersFeatures) {
  if (!hostHas("tun")) GTEST_SKIP() << "this kernel has no tun driver";
  node("net/tun", 10, 200);
  TunProbe p(seams_.device);
  auto r = run(p);
  EXPECT_NE(r.status, Status::Fail) << r.message;
  EXPECT_NE(evidenceOf(r, "ioctl TUNGETFEATURES").find("IFF_TAP"), std::string::npos);
}

}  // namespace
}  // namespace nodegate
