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
    auto results = t.run(/*devices=*/false);
    for (const auto& [check, r] : results) {
      SCOPED_TRACE(t.name + " " + check + ": " + r.reason + " " + r.message);
      if (check == "local-pv" && !missing) {
        // The root is there without a kubelet directory: a node without volumes, a value.
        EXPECT_EQ(r.reason, "NoLocalVolumes");
        continue;
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
  const std::set<std::string> device_seam = {"kvm-device", "vhost-net", "tun"};
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
      } else if (device_seam.count(check)) {
        // The device itself answers through the seam; sysfs only adds evidence.
        EXPECT_NE(r.reason, "ProbeError");
      } else {
        EXPECT_NE(r.status, Status::Pass);
      }
    }
  }
}

}  // namespace
}  // namespace nodegate
