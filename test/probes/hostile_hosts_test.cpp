// Missing input is not health (#22 item 5): every probe that reads the host tree, on a tree
// that is missing, empty, or whose files are FIFOs, symlink loops or far too large, must not
// PASS on what it could not read, and an UNKNOWN result publishes no label. The starting point
// is a captured host where every check passes (intel-baremetal-vmx).
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "fake_device_io.h"
#include "hostile_hosts.h"
#include "nodegate/registry.h"
#include "nodegate/runner.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;

const std::set<std::string> kDeviceChecks = {"kvm-device", "vhost-net", "tun"};

TEST(HostileHosts, BaselinePasses) {
  HostileTree t("baseline");
  for (const auto& [check, r] : t.run())
    EXPECT_EQ(r.status, Status::Pass) << check << ": " << r.message;
}

// No tree at all, and a tree whose proc/ sys/ dev/ are empty (nothing mounted there).
TEST(HostileHosts, MissingAndEmptyRootsAreNeverPass) {
  for (bool missing : {true, false}) {
    HostileTree t(missing ? "missing" : "empty");
    if (missing) {
      fs::remove_all(t.root);
    } else {
      for (const char* part : {"proc", "sys", "dev", "lib"}) fs::remove_all(t.root / part);
      for (const char* part : {"proc", "sys", "dev"}) fs::create_directories(t.root / part);
    }
    auto results = t.run(/*with_devices=*/false);
    for (const auto& [check, r] : results) {
      SCOPED_TRACE(t.name + " " + check + ": " + r.reason + " " + r.message);
      if (check == "local-pv" && !missing) {
        // The root is there without a kubelet directory: a node without volumes, a value.
        EXPECT_EQ(r.reason, "NoLocalVolumes");
        continue;
      }
      if (kDeviceChecks.count(check)) {
        // No /dev to look in is not a device that is missing (#17).
        EXPECT_EQ(r.status, Status::Unknown);
        EXPECT_EQ(r.reason, "DevfsUnreadable");
      }
      if (check == "kernel-modules" || check == "nested-virt" || check == "cpu-level") {
        EXPECT_EQ(r.status, Status::Unknown);
      }
      EXPECT_NE(r.status, Status::Pass);
      if (r.status == Status::Unknown) {
        EXPECT_TRUE(r.labels.empty());
      }
    }
  }
}

// Every regular file of proc/ and sys/ replaced the same hostile way.
TEST(HostileHosts, UnreadableFilesAreNeverPass) {
  const std::map<std::string, std::function<void(const fs::path&)>> kinds = {
      {"fifo", [](const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p; }},
      {"loop", [](const fs::path& p) { fs::create_symlink(p.filename(), p); }},
      {"huge",
       [](const fs::path& p) {
         std::ofstream(p).close();
         fs::resize_file(p, 5u << 20);  // above every reader's bound (4 MiB)
       }},
  };
  // These only list directories, which stay as they were, or read no file of the tree at all:
  // their verdict must not change.
  const std::set<std::string> dir_only = {"iommu", "local-pv"};
  HostileTree base("base");
  auto baseline = base.run();
  for (const auto& [kind, replace] : kinds) {
    HostileTree t(kind);
    t.replaceFiles(replace);
    for (const auto& [check, r] : t.run()) {
      SCOPED_TRACE(kind + " " + check + ": " + r.reason + " " + r.message);
      if (r.status == Status::Unknown) {
        EXPECT_TRUE(r.labels.empty());
      }
      if (dir_only.count(check)) {
        EXPECT_EQ(r.status, baseline.at(check).status);
      } else if (kDeviceChecks.count(check)) {
        // The device itself answers through the seam; sysfs only adds evidence.
        EXPECT_NE(r.reason, "ProbeError");
      } else {
        EXPECT_NE(r.status, Status::Pass);
      }
    }
  }
}

// A device node is missing only from a /dev that is there to look in, and the driver is "not in
// the kernel" only from a sysfs that could be read. intel-baremetal-vmx registers all three
// drivers (sys/class/misc/{kvm,tun,vhost-net}).
TEST(HostileHosts, DevicesAreMissingOnlyFromAReadableDev) {
  HostileTree t("nodes");
  const std::string dev = t.root.string() + "/dev";
  auto only_null = [&] {
    auto fake = std::make_shared<testing::FakeDeviceIo>();
    fake->add(dev + "/null", testing::nullDeviceNode());
    return fake;
  };
  // A real-looking /dev without the nodes, the drivers registered: FAIL (vhost-net: WARN).
  for (const auto& [check, r] : t.run(only_null())) {
    if (!kDeviceChecks.count(check)) continue;
    SCOPED_TRACE(check + ": " + r.reason + " " + r.message);
    EXPECT_EQ(r.reason, "DeviceNodeMissing");
    EXPECT_EQ(r.status, check == "vhost-net" ? Status::Warn : Status::Fail);
    EXPECT_FALSE(r.labels.empty()) << "an absent node in a readable /dev is a fact";
  }
  // /dev holds something, but not the null device: not a device filesystem (an empty mount
  // point, a directory of the host's root fs, a wrong --path.devfs with a file in it).
  {
    auto fake = std::make_shared<testing::FakeDeviceIo>();
    testing::FakeNode file;
    file.type = S_IFREG;
    fake->add(dev + "/null", file);
    for (const auto& [check, r] : t.run(fake)) {
      if (!kDeviceChecks.count(check)) continue;
      SCOPED_TRACE(check + ": " + r.reason + " " + r.message);
      EXPECT_EQ(r.status, Status::Unknown);
      EXPECT_EQ(r.reason, "DevfsUnreadable");
      EXPECT_NE(r.message.find("no null device"), std::string::npos);
      EXPECT_TRUE(r.labels.empty());
    }
  }
  // /dev is fine, sysfs is gone: the nodes are absent, but whether the kernel has the drivers
  // (DeviceNodeMissing or DeviceMissing, a different fix) cannot be told.
  fs::remove_all(t.root / "sys");
  fs::create_directories(t.root / "sys");
  for (const auto& [check, r] : t.run(only_null())) {
    if (!kDeviceChecks.count(check)) continue;
    SCOPED_TRACE(check + ": " + r.reason + " " + r.message);
    EXPECT_EQ(r.status, Status::Unknown);
    EXPECT_EQ(r.reason, "SysfsUnreadable");
    EXPECT_TRUE(r.labels.empty());
  }
}

// A kernel that really has no such driver, read from a sysfs that is there: DeviceMissing.
TEST(HostileHosts, AnAbsentDriverIsStillAFailure) {
  HostileTree t("no-drivers", "cloud-guest-no-vmx");  // registers tun only
  auto fake = t.devices();
  ASSERT_TRUE(fake);
  auto r = t.run(fake);
  EXPECT_EQ(r.at("kvm-device").reason, "DeviceMissing") << r.at("kvm-device").message;
  EXPECT_EQ(r.at("kvm-device").status, Status::Fail);
  EXPECT_EQ(r.at("kvm-device").labels.at("kvm"), "false");
  EXPECT_EQ(r.at("vhost-net").reason, "DeviceMissing") << r.at("vhost-net").message;
  EXPECT_EQ(r.at("tun").status, Status::Pass);
}

// This build machine's own tree (kvm_pvm built in, no /proc/modules, no /lib/modules) with its
// sysfs gone: the backend is then unknown, and nothing may be judged from its absence.
TEST(HostileHosts, PvmHostWithoutSysfsDecidesNothingFromAbsence) {
  HostileTree t("pvm-no-sys", "kvm-pvm-no-hwvirt");
  auto baseline = t.run();
  EXPECT_EQ(baseline.at("kernel-modules").reason, "ModulesPresent")
      << baseline.at("kernel-modules").message;  // kvm and kvm_pvm seen in sysfs
  fs::remove_all(t.root / "sys");
  auto r = t.run();
  for (const char* check : {"kernel-modules", "nested-virt"}) {
    SCOPED_TRACE(std::string(check) + ": " + r.at(check).reason + " " + r.at(check).message);
    EXPECT_EQ(r.at(check).status, Status::Unknown);
    EXPECT_TRUE(r.at(check).labels.empty());
  }
  // cpu-virt decides from cpuinfo alone (no vmx/svm is read, not guessed), but it no longer
  // says which KVM is there: the backend is unknown, not "none loaded".
  const auto& cpu = r.at("cpu-virt");
  EXPECT_EQ(cpu.reason, "NoHardwareVirtualization");
  EXPECT_EQ(cpu.message.find("kvm_pvm"), std::string::npos) << cpu.message;
  for (const auto& e : cpu.evidence)
    if (e.source == "kvm backend") {
      EXPECT_EQ(e.observed.rfind("unknown", 0), 0u) << e.observed;
    }
  // kvm-device's verdict comes from /dev/kvm itself (the device seam), which still answers.
  EXPECT_EQ(r.at("kvm-device").reason, "GuestCannotEnterLongMode") << r.at("kvm-device").message;
}

}  // namespace
}  // namespace nodegate
