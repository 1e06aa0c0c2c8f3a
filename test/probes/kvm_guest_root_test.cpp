// The test guest against this machine's real KVM, through the production DeviceIo: the verdict
// kvm-device gives here, the deadline that stops a guest that never exits, and release of every
// fd and mapping. This machine (ENVIRONMENT.md) has /dev/kvm backed by kvm_pvm: a vCPU runs
// real-mode code and a guest's own switch to protected mode, and a guest that goes on to PAE,
// CR3 and EFER.LME dies with KVM_EXIT_SHUTDOWN. The test asserts that story on whatever backend
// the kernel really has; a hardware backend must give the PASS.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kvm_backend.h"
#include "kvm_device.h"
#include "kvm_guest.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;

std::size_t openFds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

std::size_t mappings() {
  std::ifstream maps("/proc/self/maps");
  return std::count(std::istreambuf_iterator<char>(maps), {}, '\n');
}

class KvmGuestRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to mknod the kvm node and open it";
    // A node of our own in a temporary /dev, so the test depends on the kernel's driver and
    // not on whether someone created /dev/kvm; procfs and sysfs are the real ones.
    char tmpl[] = "/tmp/nodegate-kvmroot-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ + "/dev");
    ASSERT_EQ(::mknod((root_ + "/dev/kvm").c_str(), S_IFCHR | 0600, makedev(10, 232)), 0);
    host_.setProcfs("/proc");
    host_.setSysfs("/sys");
    host_.setDevfs(root_ + "/dev");
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // Opens the real KVM and makes a VM for a guest of the test's own.
  struct Vm {
    int kvm = -1, vm = -1;
    ~Vm() {
      if (vm >= 0) ::close(vm);
      if (kvm >= 0) ::close(kvm);
    }
  };
  void makeVm(Vm& v) {
    v.kvm = ::open(host_.dev("kvm").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(v.kvm, 0) << std::strerror(errno);
    v.vm = ::ioctl(v.kvm, KVM_CREATE_VM, 0);
    ASSERT_GE(v.vm, 0) << std::strerror(errno);
  }

  std::string root_;
  HostRoot host_{"/nonexistent"};
  Seams seams_ = productionSeams();
};

TEST_F(KvmGuestRoot, VerdictFollowsTheRealBackend) {
  const auto backend = readKvmBackend(host_);
  const std::size_t fds = openFds(), maps = mappings();
  auto o = observeKvmDevice(*seams_.device, host_);
  auto r = evaluateKvmDevice(o);
  EXPECT_EQ(openFds(), fds) << "an fd was left open";
  EXPECT_EQ(mappings(), maps) << "a mapping was left";
  if (!fs::exists("/sys/class/misc/kvm")) {
    EXPECT_EQ(r.reason, "NoDriver") << r.message;  // a kernel without KVM at all
    return;
  }
  ASSERT_TRUE(o.create_vm_ok) << r.message;
  ASSERT_TRUE(o.guest.has_value());
  const auto& g = *o.guest;
  std::cout << "backend " << describeBackend(backend) << ": " << r.reason << ": " << r.message
            << "\n";
  if (backend.primary() == "kvm_intel" || backend.primary() == "kvm_amd") {
    EXPECT_EQ(r.status, Status::Pass) << r.message;
    EXPECT_TRUE(g.enteredLongMode());
    ASSERT_TRUE(g.registers);
    EXPECT_EQ(g.registers->efer & 0x500, 0x500u) << "LME and LMA set";
    return;
  }
  ASSERT_EQ(backend.primary(), "kvm_pvm") << "this machine's kind (ENVIRONMENT.md)";
  // What ENVIRONMENT.md measured: real mode and the switch to protected mode run, the way on
  // to long mode (PAE, CR3, EFER.LME) ends in a triple fault.
  EXPECT_EQ(r.status, Status::Fail) << r.message;
  EXPECT_EQ(r.reason, "GuestCannotEnterLongMode");
  EXPECT_GE(g.reached, GuestStage::ProtectedMode);
  EXPECT_LT(g.reached, GuestStage::EferLme);
  EXPECT_EQ(g.last.reason, static_cast<std::uint32_t>(KVM_EXIT_SHUTDOWN));
  // Measured by this probe: EFER is read, the wrmsr setting LME is what the backend refuses.
  EXPECT_EQ(g.reached, GuestStage::EferRead);
  EXPECT_NE(r.message.find("kvm_pvm"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("EFER read"), std::string::npos) << r.message;
  EXPECT_EQ(r.labels.at("kvm"), "false");
  ASSERT_TRUE(g.registers);
  EXPECT_EQ(g.registers->cr4 & 0x20, 0x20u) << "CR4.PAE was set before the fault";
  EXPECT_EQ(g.registers->cr3, 0x1000u);
  EXPECT_EQ(g.registers->efer & 0x100, 0u) << "EFER.LME never took";
}

TEST_F(KvmGuestRoot, RepeatedRunsLeakNothing) {
  if (!fs::exists("/sys/class/misc/kvm")) GTEST_SKIP() << "this kernel has no KVM";
  auto first = evaluateKvmDevice(observeKvmDevice(*seams_.device, host_));
  const std::size_t fds = openFds(), maps = mappings();
  for (int i = 0; i < 20; ++i) {
    auto r = evaluateKvmDevice(observeKvmDevice(*seams_.device, host_));
    EXPECT_EQ(r.reason, first.reason) << "run " << i << ": " << r.message;
  }
  EXPECT_EQ(openFds(), fds);
  EXPECT_EQ(mappings(), maps);
}

TEST_F(KvmGuestRoot, DeadlineStopsAGuestThatNeverExits) {
  if (!fs::exists("/sys/class/misc/kvm")) GTEST_SKIP() << "this kernel has no KVM";
  Vm v;
  makeVm(v);
  // Real mode: report stage 1, then jump to itself forever (cli; out 1; jmp $).
  const std::uint8_t spin[] = {0xfa, 0xb0, 0x01, 0xe6, 0xe9, 0xeb, 0xfe};
  sigset_t before{}, after{};
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
  GuestLimits limits;
  limits.run = std::chrono::milliseconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  auto g = runGuest(*seams_.device, v.kvm, v.vm, spin, limits);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(g.timed_out) << g.failed_step << " " << g.error.message << " " << g.unexpected;
  EXPECT_EQ(g.reached, GuestStage::RealMode) << "real-mode code runs here";
  EXPECT_GE(took, std::chrono::milliseconds(20));
  EXPECT_LT(took, std::chrono::milliseconds(1000)) << "the timer must cut KVM_RUN short";
  // Nothing left behind in the thread: its mask is as it was and no deadline signal pends.
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &after), 0);
  for (int s = 1; s < SIGRTMAX; ++s)
    EXPECT_EQ(sigismember(&before, s), sigismember(&after, s)) << "signal " << s;
  sigset_t pending{};
  sigpending(&pending);
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) EXPECT_FALSE(sigismember(&pending, s)) << s;
}

TEST_F(KvmGuestRoot, DeadlineAlreadyPassedDoesNotRun) {
  if (!fs::exists("/sys/class/misc/kvm")) GTEST_SKIP() << "this kernel has no KVM";
  Vm v;
  makeVm(v);
  GuestLimits limits;
  limits.run = std::chrono::milliseconds(0);
  auto g = runGuest(*seams_.device, v.kvm, v.vm, builtinGuest(), limits);
  EXPECT_TRUE(g.timed_out);
  EXPECT_EQ(g.exits, 0);
}

}  // namespace
}  // namespace nodegate
