// kvm-device and its test guest through FakeDeviceIo: the PASS path, every stage at which a
// guest can stop, each set-up step failing, timeouts, and release of every fd and mapping on
// each of those paths. The exit scripts are what the real guest produces (see fake_device_io.h);
// kvm_guest_root_test runs the same code against this machine's /dev/kvm, kvm_guest_peer_test
// the same bytes under QEMU.
#include <gtest/gtest.h>

#include <cstring>

#include "fake_device_io.h"
#include "kvm_backend.h"
#include "kvm_device.h"
#include "kvm_guest.h"
#include "tun.h"
#include "vhost_net.h"

namespace nodegate {
namespace {

using testing::FakeDeviceIo;
using testing::FakeExit;
using testing::FakeNode;
using testing::stagesThen;
using K = FakeExit::Kind;

std::string evidenceOf(const CheckResult& r, const std::string& source) {
  for (const auto& e : r.evidence)
    if (e.source == source) return e.observed;
  return {};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- decodeGuestExit on kvm_run areas laid out as the kernel writes them ---

struct RunArea {
  alignas(kvm_run) std::uint8_t bytes[12288] = {};
  kvm_run* run() { return reinterpret_cast<kvm_run*>(bytes); }
  void out(std::uint16_t port, std::uint8_t value, std::uint8_t size = 1,
           std::uint64_t offset = 4096) {
    run()->exit_reason = KVM_EXIT_IO;
    run()->io.direction = KVM_EXIT_IO_OUT;
    run()->io.port = port;
    run()->io.size = size;
    run()->io.count = 1;
    run()->io.data_offset = offset;
    if (offset < sizeof bytes) bytes[offset] = value;
  }
};

TEST(DecodeGuestExit, StagesHaltAndEverythingElse) {
  RunArea a;
  a.out(kGuestPort, 5);
  auto e = decodeGuestExit(a.bytes, sizeof a.bytes);
  EXPECT_EQ(e.kind, GuestExit::Kind::Stage);
  EXPECT_EQ(e.stage, 5);
  a.out(0x80, 5);  // a POST code port: not ours
  e = decodeGuestExit(a.bytes, sizeof a.bytes);
  EXPECT_EQ(e.kind, GuestExit::Kind::Other);
  EXPECT_TRUE(has(e.what, "port 0x80")) << e.what;
  a.out(kGuestPort, 5, 2);  // a word, not the byte the guest writes
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).kind, GuestExit::Kind::Other);
  a.out(kGuestPort, 5);
  a.run()->io.direction = KVM_EXIT_IO_IN;
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).kind, GuestExit::Kind::Other);
  // A data offset outside the area is reported, never followed.
  a.out(kGuestPort, 5, 1, 1u << 30);
  e = decodeGuestExit(a.bytes, sizeof a.bytes);
  EXPECT_EQ(e.kind, GuestExit::Kind::Other);
  EXPECT_TRUE(has(e.what, "outside")) << e.what;
  EXPECT_EQ(decodeGuestExit(a.bytes, 100).kind, GuestExit::Kind::Other);  // area too small

  a.run()->exit_reason = KVM_EXIT_HLT;
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).kind, GuestExit::Kind::Halt);
  a.run()->exit_reason = KVM_EXIT_SHUTDOWN;
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).what, "KVM_EXIT_SHUTDOWN (triple fault)");
  a.run()->exit_reason = KVM_EXIT_INTERNAL_ERROR;
  a.run()->internal.suberror = 1;
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).what, "KVM_EXIT_INTERNAL_ERROR suberror 1");
  a.run()->exit_reason = 999;
  EXPECT_EQ(decodeGuestExit(a.bytes, sizeof a.bytes).what, "exit reason 999");
}

TEST(BuiltinGuest, FitsAndStartsInRealMode) {
  auto g = builtinGuest();
  ASSERT_FALSE(g.empty());
  EXPECT_LE(g.size(), kGuestMemoryBytes - kGuestLoadAddress);
  EXPECT_EQ(g[0], 0xfa);             // cli
  EXPECT_EQ(g[g.size() - 6], 0x1f);  // the GDTR's limit: four descriptors
  EXPECT_EQ(g[g.size() - 4], 0xb8);  // and its base, 0x7cb8, inside the image
  EXPECT_EQ(g[g.size() - 3], 0x7c);
}

// --- runGuest and the probe through the fake ---

#if defined(__x86_64__)

struct KvmFixture : ::testing::Test {
  HostRoot host{"/nonexistent-nodegate-root"};
  Config cfg;
  std::shared_ptr<FakeDeviceIo> io = std::make_shared<FakeDeviceIo>();

  static FakeNode kvmNode(std::vector<FakeExit> exits = stagesThen(7, K::Hlt)) {
    FakeNode n;
    n.major = 10;
    n.minor = 232;
    n.ioctls[KVM_GET_API_VERSION] = {0, 12, 0, false};
    n.ioctls[KVM_CREATE_VM] = {0, 0, 0, true};
    n.value_request = KVM_CHECK_EXTENSION;
    n.value_default = 1;
    n.guest.present = true;
    n.guest.exits = std::move(exits);
    n.guest.at_exit = {0x80000011, 0x1000, 0x20, 0x500};
    return n;
  }
  CheckResult runKvm() { return KvmDeviceProbe(io).run(ProbeContext{host, cfg}); }
  CheckResult runWith(FakeNode n) {
    io = std::make_shared<FakeDeviceIo>();
    io->add(host.dev("kvm"), std::move(n));
    return runKvm();
  }
  void expectReleased() {
    EXPECT_EQ(io->openCount(), 0u) << "an fd was left open";
    EXPECT_EQ(io->mapCount(), 0u) << "a mapping was left";
    EXPECT_EQ(io->badCloses(), 0);
    EXPECT_EQ(io->badUnmaps(), 0);
  }
};

TEST_F(KvmFixture, GuestInLongModeIsPass) {
  auto r = runWith(kvmNode());
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_EQ(r.reason, "KvmUsable");
  EXPECT_TRUE(has(r.message, "long mode")) << r.message;
  EXPECT_EQ(r.labels.at("kvm"), "true");
  EXPECT_EQ(evidenceOf(r, "test guest"), "entered 64-bit long mode (stage 7 of 7), then hlt");
  EXPECT_EQ(evidenceOf(r, "test guest registers at exit"),
            "cr0=0x80000011 cr3=0x1000 cr4=0x20 efer=0x500");
  // The vCPU was started where the image was put, in real mode at 0000:7c00.
  ASSERT_TRUE(io->regs_set && io->sregs_set && io->region);
  EXPECT_EQ(io->regs_set->rip, kGuestLoadAddress);
  EXPECT_EQ(io->sregs_set->cs.base, 0u);
  EXPECT_EQ(io->sregs_set->cs.selector, 0u);
  EXPECT_EQ(io->region->guest_phys_addr, 0u);
  EXPECT_EQ(io->region->memory_size, kGuestMemoryBytes);
  auto img = builtinGuest();
  ASSERT_GE(io->memory_at_load_address.size(), img.size());
  EXPECT_EQ(std::memcmp(io->memory_at_load_address.data(), img.data(), img.size()), 0);
  expectReleased();
}

TEST_F(KvmFixture, EveryStageAGuestCanStopAt) {
  for (int n = 0; n < kGuestStages; ++n) {
    SCOPED_TRACE("stopped after stage " + std::to_string(n));
    auto r = runWith(kvmNode(stagesThen(n, K::Shutdown)));
    EXPECT_EQ(r.status, Status::Fail) << r.message;
    EXPECT_EQ(r.reason, n == 0 ? "GuestDoesNotRun" : "GuestCannotEnterLongMode");
    EXPECT_TRUE(has(r.message, "KVM_EXIT_SHUTDOWN (triple fault)")) << r.message;
    const auto stage = static_cast<GuestStage>(n);
    if (n > 0) {
      EXPECT_TRUE(has(r.message, std::string(guestStageName(stage)))) << r.message;
      EXPECT_TRUE(has(r.message, std::string(guestNextStep(stage)))) << r.message;
      EXPECT_TRUE(has(r.message, "(stage " + std::to_string(n) + " of 7)")) << r.message;
    }
    EXPECT_FALSE(r.hint.empty());
    EXPECT_EQ(r.labels.at("kvm"), "false");
    expectReleased();
  }
  // Long mode reached but no hlt: not the guest we wrote.
  auto r = runWith(kvmNode(stagesThen(7, K::Mmio)));
  EXPECT_EQ(r.reason, "GuestDidNotHalt");
  EXPECT_TRUE(has(r.message, "KVM_EXIT_MMIO")) << r.message;
  expectReleased();
}

TEST_F(KvmFixture, ThisMachinesStopNamesWrmsr) {
  // kvm_pvm here: stages 1-4, then KVM_EXIT_SHUTDOWN at the EFER write (kvm_guest_root_test
  // asserts the same on the real /dev/kvm).
  auto r = runWith(kvmNode(stagesThen(4, K::Shutdown)));
  EXPECT_EQ(r.message,
            "KVM answers, but a standard guest cannot enter long mode: the test guest reached "
            "EFER read (stage 4 of 7) and stopped at setting EFER.LME (wrmsr) with "
            "KVM_EXIT_SHUTDOWN (triple fault); KVM backend: unknown (failed to read sysfs at "
            "/nonexistent-nodegate-root/sys (/nonexistent-nodegate-root/sys/kernel): No such "
            "file or directory)")
      << "this fixture's host root does not exist: no backend seen is not \"none loaded\"";
}

TEST_F(KvmFixture, OtherExitsAndMisbehaviour) {
  for (auto end : {K::InternalError, K::FailEntry, K::Mmio}) {
    auto r = runWith(kvmNode(stagesThen(2, end)));
    EXPECT_EQ(r.reason, "GuestCannotEnterLongMode") << r.message;
    expectReleased();
  }
  auto r = runWith(kvmNode({{K::Out, 1}, {K::Out, 3}}));  // a stage skipped
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_TRUE(has(r.message, "stage 3 reported after stage 1")) << r.message;
  r = runWith(kvmNode({{K::Out, 1}, {K::In, 2}}));
  EXPECT_TRUE(has(r.message, "KVM_EXIT_IO in port 0xe9")) << r.message;
  FakeExit wrong_port{K::Out, 2};
  wrong_port.port = 0x80;
  r = runWith(kvmNode({{K::Out, 1}, wrong_port}));
  EXPECT_TRUE(has(r.message, "port 0x80")) << r.message;
  expectReleased();
}

TEST_F(KvmFixture, StuckGuestIsUnknownNotPassOrHang) {
  // No exit after stage 3: the deadline ends the run (the fake answers ETIMEDOUT as the real
  // seam does when its timer fires; kvm_guest_root_test proves that timer on the kernel).
  auto r = runWith(kvmNode({{K::Out, 1}, {K::Out, 2}, {K::Out, 3}}));
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_EQ(r.reason, "GuestTimedOut");
  EXPECT_TRUE(has(r.message, "within 50 ms")) << r.message;
  EXPECT_TRUE(has(r.message, "PAE and CR3 (stage 3 of 7)")) << r.message;
  EXPECT_EQ(r.labels.count("kvm"), 0u) << "an UNKNOWN publishes no kvm label";
  expectReleased();
}

TEST_F(KvmFixture, InterruptedRunsGoOn) {
  auto exits = stagesThen(7, K::Hlt);
  exits.insert(exits.begin() + 3, FakeExit{K::Errno, EINTR});
  EXPECT_EQ(runWith(kvmNode(exits)).status, Status::Pass);
  expectReleased();
}

TEST_F(KvmFixture, KvmRunErrors) {
  auto r = runWith(kvmNode({{K::Out, 1}, {K::Errno, EFAULT}}));
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "GuestRunFailed");
  EXPECT_TRUE(has(r.message, "KVM_RUN: Bad address")) << r.message;
  r = runWith(kvmNode({{K::Errno, ENOMEM}}));
  EXPECT_EQ(r.status, Status::Unknown) << "out of memory is the host's state, not a verdict";
  expectReleased();
}

TEST_F(KvmFixture, EverySetupStepCanFailAndReleases) {
  const unsigned long steps[] = {KVM_SET_TSS_ADDR,
                                 KVM_SET_USER_MEMORY_REGION,
                                 KVM_GET_VCPU_MMAP_SIZE,
                                 KVM_CREATE_VCPU,
                                 KVM_GET_SREGS,
                                 KVM_SET_SREGS,
                                 KVM_SET_REGS};
  for (unsigned long step : steps) {
    SCOPED_TRACE(step);
    auto n = kvmNode();
    n.ioctls[step] = {EINVAL, 0, 0, false};
    auto r = runWith(n);
    EXPECT_EQ(r.status, Status::Fail) << r.message;
    EXPECT_EQ(r.reason, "GuestSetupFailed");
    EXPECT_TRUE(has(r.message, "Invalid argument")) << r.message;
    EXPECT_TRUE(has(evidenceOf(r, "test guest"), "set-up failed at KVM_")) << r.message;
    expectReleased();
  }
  auto n = kvmNode();
  n.guest.map_errno = ENOMEM;
  auto r = runWith(n);
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_TRUE(has(r.message, "map the guest's memory")) << r.message;
  expectReleased();
  n = kvmNode();
  n.guest.mmap_size = 64;  // smaller than struct kvm_run: not a kernel we understand
  r = runWith(n);
  EXPECT_EQ(r.reason, "GuestSetupFailed");
  EXPECT_TRUE(has(r.message, "KVM_GET_VCPU_MMAP_SIZE")) << r.message;
  expectReleased();
}

TEST_F(KvmFixture, ExitBudget) {
  FakeDeviceIo fake;
  fake.add("/dev/kvm", kvmNode());
  auto kvm = fake.open("/dev/kvm", 0);
  ASSERT_TRUE(kvm.ok());
  auto vm = fake.ioctl(*kvm, KVM_CREATE_VM, nullptr);
  ASSERT_TRUE(vm.ok());
  GuestLimits limits;
  limits.max_exits = 3;
  auto g = runGuest(fake, *kvm, *vm, builtinGuest(), limits);
  EXPECT_FALSE(g.enteredLongMode());
  EXPECT_EQ(g.reached, GuestStage::PaeAndCr3);
  EXPECT_TRUE(has(g.unexpected, "3 exits")) << g.unexpected;
  fake.close(*vm);
  fake.close(*kvm);
  EXPECT_EQ(fake.openCount(), 0u);
  EXPECT_EQ(fake.mapCount(), 0u);
}

TEST_F(KvmFixture, BeforeTheGuestFailuresStayAsTheyWere) {
  EXPECT_EQ(runKvm().reason, "DevfsUnreadable");  // nothing at all, not even a /dev
  auto n = kvmNode();
  n.open_errno = EACCES;
  auto r = runWith(n);
  EXPECT_EQ(r.status, Status::Unknown);  // permission denied is not FAIL
  EXPECT_NE(r.hint.find("kvm group"), std::string::npos);
  EXPECT_EQ(r.labels.count("kvm"), 0u);
  for (int err : {ENXIO, ENODEV}) {
    n.open_errno = err;
    EXPECT_EQ(runWith(n).reason, "NoDriver");
  }
  n.open_errno = 0;
  n.minor = 3;
  EXPECT_EQ(runWith(n).reason, "WrongDeviceNode");
  n = kvmNode();
  n.ioctls[KVM_GET_API_VERSION].rc = 11;
  EXPECT_EQ(runWith(n).reason, "ApiVersionMismatch");
  n = kvmNode();
  n.ioctls.erase(KVM_GET_API_VERSION);  // the guest model does not answer it: ENOTTY
  EXPECT_EQ(runWith(n).reason, "NotKvm");
  n = kvmNode();
  n.value_answers[KVM_CAP_IRQFD] = 0;
  r = runWith(n);
  EXPECT_EQ(r.reason, "MissingCapabilities");
  EXPECT_NE(r.message.find("KVM_CAP_IRQFD"), std::string::npos);
  EXPECT_FALSE(io->region) << "no guest without the capabilities";
  n = kvmNode();
  n.ioctls[KVM_CREATE_VM] = {EBUSY, 0, 0, false};
  r = runWith(n);
  EXPECT_EQ(r.reason, "CreateVmFailed");
  EXPECT_NE(r.hint.find("another hypervisor"), std::string::npos);
  expectReleased();
}

#endif  // __x86_64__

// --- the pure evaluator: backends, arm64, labels ---

KvmObservation openedKvm() {
  KvmObservation o;
  o.arch = "x86";
  o.node.path = "/dev/kvm";
  o.node.state = DeviceNode::State::Open;
  o.node.want_major = 10;
  o.node.want_minor = 232;
  o.api_version = 12;
  o.create_vm_tried = o.create_vm_ok = true;
  o.guest.emplace();
  return o;
}

TEST(EvaluateKvmDevice, PvmBackendGetsItsOwnHint) {
  auto o = openedKvm();
  o.backend = pickKvmBackend(std::nullopt, {"kvm", "kvm_pvm"}, "/proc/modules", "/sys/module");
  o.guest->reached = GuestStage::EferRead;
  o.guest->exits = 5;
  o.guest->last.what = "KVM_EXIT_SHUTDOWN (triple fault)";
  auto r = evaluateKvmDevice(o);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_TRUE(has(r.message, "KVM backend: kvm_pvm (paravirtual)")) << r.message;
  EXPECT_TRUE(has(r.hint, "kvm_pvm is a paravirtual backend")) << r.hint;
  EXPECT_EQ(evidenceOf(r, "kvm backend"), "kvm_pvm built in (/sys/module/kvm_pvm)");
}

TEST(EvaluateKvmDevice, Arm64IsUnknownNeverAnUnprovenPass) {
  auto o = openedKvm();
  o.arch = "arm64";
  o.guest->supported = false;
  auto r = evaluateKvmDevice(o);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "GuestRunUnsupported");
  EXPECT_TRUE(has(r.message, "arm64")) << r.message;
  EXPECT_EQ(r.labels.count("kvm"), 0u);
}

TEST(PickKvmBackend, FromWhatIsLoadedNeverFromTheVendor) {
  auto b = pickKvmBackend(std::set<std::string>{"kvm", "kvm_amd"}, {"kvm", "kvm_amd"}, "/p", "/s");
  EXPECT_EQ(b.primary(), "kvm_amd");
  EXPECT_EQ(b.seen, "kvm_amd loaded (/p)");
  // Built in: in sysfs, not in /proc/modules (or no /proc/modules at all).
  b = pickKvmBackend(std::nullopt, {"kvm", "kvm_pvm"}, "/p", "/s");
  EXPECT_EQ(b.primary(), "kvm_pvm");
  EXPECT_EQ(describeBackend(b), "kvm_pvm (paravirtual)");
  // Hardware first when both are there; an unknown kvm_* still counts, last.
  b = pickKvmBackend(std::set<std::string>{"kvm_pvm", "kvm_intel", "kvm_new"}, {}, "/p", "/s");
  EXPECT_EQ(b.modules, (std::vector<std::string>{"kvm_intel", "kvm_pvm", "kvm_new"}));
  EXPECT_TRUE(
      pickKvmBackend(std::set<std::string>{"kvm", "kvmgt"}, {"kvm"}, "/p", "/s").modules.empty());
  EXPECT_EQ(describeBackend({}), "none loaded");
}

// The three device probes judge an unusable node the same way (one function, one set of
// reasons); only severity and wording of who needs the node differ.
TEST(DeviceNodes, SameStatesSameReasons) {
  using S = DeviceNode::State;
  const std::pair<S, const char*> cases[] = {
      {S::Missing, "DeviceMissing"},       {S::DevfsUnreadable, "DevfsUnreadable"},
      {S::StatFailed, "DeviceUnreadable"}, {S::NotCharDevice, "WrongDeviceNode"},
      {S::WrongNumber, "WrongDeviceNode"}, {S::PermissionDenied, "PermissionDenied"},
      {S::NoDriver, "NoDriver"},           {S::OpenFailed, "OpenFailed"}};
  for (auto [state, reason] : cases) {
    DeviceNode n;
    n.state = state;
    n.error = Error{EIO, "failed to stat: I/O error"};
    KvmObservation k;
    k.node = n;
    k.node.path = "/dev/kvm";
    k.registered = false;
    TunObservation t;
    t.node = n;
    t.node.path = "/dev/net/tun";
    t.registered = false;
    VhostNetObservation v;
    v.node = n;
    v.node.path = "/dev/vhost-net";
    v.registered = false;
    EXPECT_EQ(evaluateKvmDevice(k).reason, reason);
    EXPECT_EQ(evaluateTun(t).reason, reason);
    EXPECT_EQ(evaluateVhostNet(v).reason, reason);
    // vhost-net is optional: what FAILs the others only WARNs it.
    if (evaluateTun(t).status == Status::Fail) {
      EXPECT_EQ(evaluateVhostNet(v).status, Status::Warn);
    }
  }
  TunObservation t;
  t.node.path = "/dev/net/tun";
  t.registered = std::nullopt;  // sysfs unreadable: which of the two below is unknown
  EXPECT_EQ(evaluateTun(t).reason, "SysfsUnreadable");
  EXPECT_EQ(evaluateTun(t).status, Status::Unknown);
  EXPECT_TRUE(evaluateTun(t).labels.empty());
  t.registered = true;
  EXPECT_EQ(evaluateTun(t).reason, "DeviceNodeMissing");
  t.module_support = false;
  t.registered = false;
  auto r = evaluateTun(t);
  EXPECT_TRUE(has(r.hint, "CONFIG_TUN=y")) << r.hint;
  EXPECT_FALSE(has(r.hint, "modprobe")) << r.hint;
}

}  // namespace
}  // namespace nodegate
