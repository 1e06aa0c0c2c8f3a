// A copy of a captured host tree to spoil, and a run of every probe on it (hostile_hosts_test,
// hostile_hosts_root_test). lvm is given a command that fails: it runs on the host, not on the
// tree, and is not what these tests judge.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "fake_device_io.h"
#include "nodegate/registry.h"
#include "nodegate/runner.h"

namespace nodegate {

class FailingExec final : public Exec {
 public:
  Result<ExecResult> run(const std::vector<std::string>&, std::chrono::milliseconds,
                         std::size_t) override {
    return Error{ENOENT, "failed to run lvm: not in this test"};
  }
};

struct HostileTree {
  std::string name;
  std::filesystem::path root;
  std::string fixture;

  // A copy of test/fixtures/hosts/<from>.
  explicit HostileTree(std::string n, const std::string& from = "intel-baremetal-vmx")
      : name(std::move(n)), fixture(std::string(NODEGATE_FIXTURES) + "/hosts/" + from) {
    root = std::filesystem::temp_directory_path() /
           ("nodegate-hostile-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(root);
    std::filesystem::copy(fixture, root, std::filesystem::copy_options::recursive);
  }
  ~HostileTree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }

  // Calls replace(path) on every regular file below proc/ and sys/ after removing it.
  void replaceFiles(const std::function<void(const std::filesystem::path&)>& replace) const {
    std::vector<std::filesystem::path> files;
    for (const char* part : {"proc", "sys"})
      for (auto& e : std::filesystem::recursive_directory_iterator(root / part))
        if (e.is_regular_file()) files.push_back(e.path());
    for (const auto& f : files) {
      std::filesystem::remove(f);
      replace(f);
    }
  }

  // The fixture's fake devices (devices.json), as seen under this tree's /dev.
  std::shared_ptr<testing::FakeDeviceIo> devices() const {
    auto fake = testing::loadFakeDevices(fixture + "/devices.json", HostRoot(root.string()));
    return fake ? *fake : nullptr;
  }

  // check -> result. devices: the fixture's fake devices, else none at all.
  std::map<std::string, CheckResult> run(bool with_devices = true) const {
    return run(with_devices ? devices() : std::make_shared<testing::FakeDeviceIo>());
  }
  std::map<std::string, CheckResult> run(std::shared_ptr<testing::FakeDeviceIo> fake) const {
    HostRoot host(root.string());
    Seams seams = productionSeams();
    if (fake) seams.device = std::move(fake);
    seams.exec = std::make_shared<FailingExec>();
    seams.dbus = nullptr;
    Config cfg = defaultConfig();
    std::map<std::string, CheckResult> out;
    for (auto& p : makeProbes(seams)) {
      const std::string check(p->name());
      if (check == "lvm" || check == "time-sync" || check == "node-services" ||
          check == "dns-path" || check == "kubevirt-node")
        continue;  // not read from the tree (a command, D-Bus, the kernel clock, eBPF, the API)
      out[check] = runProbe(*p, ProbeContext{host, cfg});
    }
    return out;
  }
};

}  // namespace nodegate
