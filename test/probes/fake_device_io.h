// FakeDeviceIo: a faithful stand-in for the kernel's device nodes, which cannot live in git.
// It simulates char/block nodes of a given major:minor, stat/open errors (EACCES, ENOENT,
// ENXIO...), and ioctl answers. Answers to _IOR ioctls are written into the caller's buffer
// with the size encoded in the request number, exactly as the kernel's copy_to_user would.
// It tracks open fds so tests can assert that probes close everything they open.
#pragma once

#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvm_device.h"
#include "nodegate/host_root.h"
#include "nodegate/seams.h"
#include "vhost_net.h"

namespace nodegate::testing {

struct FakeIoctl {
  int err = 0;              // errno to fail with; 0 = success
  int rc = 0;               // return value on success
  std::uint64_t out = 0;    // written to *arg for _IOR requests
  bool returns_fd = false;  // the ioctl creates a new fd (KVM_CREATE_VM)
};

struct FakeNode {
  mode_t type = S_IFCHR;  // S_IFCHR, S_IFBLK or S_IFREG
  unsigned major = 0, minor = 0;
  int stat_errno = 0;
  int open_errno = 0;
  std::map<unsigned long, FakeIoctl> ioctls;
  // Requests whose argument is a value, not a pointer (KVM_CHECK_EXTENSION): arg -> rc.
  unsigned long value_request = 0;
  std::map<std::uintptr_t, int> value_answers;
  int value_default = 0;
};

class FakeDeviceIo final : public DeviceIo {
 public:
  void add(const std::string& path, FakeNode node) { nodes_[path] = std::move(node); }

  Result<struct stat> statPath(const std::string& path) override {
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return errnoError(ENOENT, "stat " + path);
    if (it->second.stat_errno) return errnoError(it->second.stat_errno, "stat " + path);
    struct stat st {};
    st.st_mode = it->second.type | 0660;
    if (it->second.type != S_IFREG) st.st_rdev = makedev(it->second.major, it->second.minor);
    return st;
  }

  Result<int> open(const std::string& path, int /*flags*/) override {
    auto it = nodes_.find(path);
    if (it == nodes_.end()) return errnoError(ENOENT, "open " + path);
    if (it->second.open_errno) return errnoError(it->second.open_errno, "open " + path);
    int fd = next_fd_++;
    open_[fd] = path;
    return fd;
  }

  Result<int> ioctl(int fd, unsigned long request, void* arg) override {
    auto f = open_.find(fd);
    if (f == open_.end()) return errnoError(EBADF, "ioctl " + std::to_string(request));
    calls_.push_back(f->second + " " + std::to_string(request));
    auto n = nodes_.find(f->second);
    if (n == nodes_.end()) return errnoError(ENOTTY, "ioctl " + std::to_string(request));
    const FakeNode& node = n->second;
    if (node.value_request && request == node.value_request) {
      auto a = node.value_answers.find(reinterpret_cast<std::uintptr_t>(arg));
      return a == node.value_answers.end() ? node.value_default : a->second;
    }
    auto a = node.ioctls.find(request);
    if (a == node.ioctls.end()) return errnoError(ENOTTY, "ioctl " + std::to_string(request));
    if (a->second.err) return errnoError(a->second.err, "ioctl " + std::to_string(request));
    if ((_IOC_DIR(request) & _IOC_READ) && arg) {
      std::size_t size = _IOC_SIZE(request);
      std::uint64_t v = a->second.out;
      std::memcpy(arg, &v, size < sizeof v ? size : sizeof v);
    }
    if (a->second.returns_fd) {
      int nfd = next_fd_++;
      open_[nfd] = f->second + "#child";
      return nfd;
    }
    return a->second.rc;
  }

  void close(int fd) override {
    if (open_.erase(fd) == 0) bad_closes_++;
  }

  std::size_t openCount() const { return open_.size(); }
  int badCloses() const { return bad_closes_; }
  const std::vector<std::string>& calls() const { return calls_; }

 private:
  std::map<std::string, FakeNode> nodes_;
  std::map<int, std::string> open_;
  std::vector<std::string> calls_;
  int next_fd_ = 100;
  int bad_closes_ = 0;
};

// Builds a FakeDeviceIo from a scenario's devices.json (test/fixtures/hosts/<s>/devices.json):
//   { "kvm": { "char": "10:232", "open_errno": "EACCES",
//              "ioctls": { "KVM_GET_API_VERSION": {"rc": 12}, "KVM_CREATE_VM": {"fd": true} },
//              "extensions": { "default": 1, "KVM_CAP_IRQFD": 0, "KVM_CAP_MAX_VCPUS": 1024 } },
//     "net/tun": { "char": "10:200", "ioctls": { "TUNGETFEATURES": {"out": 28930} } } }
// Keys are paths below the host's /dev. Unknown names are an error, not ignored.
inline Result<std::shared_ptr<FakeDeviceIo>> loadFakeDevices(const std::string& spec_path,
                                                             const HostRoot& host) {
  auto fake = std::make_shared<FakeDeviceIo>();
  auto text = readFile(spec_path);
  if (!text) {
    if (text.error().code == ENOENT) return fake;  // no devices at all
    return text.error();
  }
  static const std::map<std::string, int> kErrnos = {
      {"EACCES", EACCES}, {"EPERM", EPERM}, {"ENOENT", ENOENT}, {"ENXIO", ENXIO},
      {"ENODEV", ENODEV}, {"EBUSY", EBUSY}, {"ENOTTY", ENOTTY}, {"EINVAL", EINVAL},
      {"ENOMEM", ENOMEM}, {"EIO", EIO}};
  static const std::map<std::string, unsigned long> kIoctls = {
      {"KVM_GET_API_VERSION", KVM_GET_API_VERSION},
      {"KVM_CREATE_VM", KVM_CREATE_VM},
      {"VHOST_GET_FEATURES", kVhostGetFeatures},
      {"TUNGETFEATURES", TUNGETFEATURES}};
  std::map<std::string, int> caps = {{"KVM_CAP_MAX_VCPUS", KVM_CAP_MAX_VCPUS}};
  for (const auto& c : kvmRequiredCapabilities("x86")) caps[std::string(c.name)] = c.number;
  auto bad = [&](const std::string& what) {
    return Error{EINVAL, "failed to load " + spec_path + ": " + what};
  };
  try {
    auto doc = nlohmann::json::parse(*text);
    for (const auto& [rel, spec] : doc.items()) {
      FakeNode n;
      auto number = [&](const std::string& s) -> bool {
        return std::sscanf(s.c_str(), "%u:%u", &n.major, &n.minor) == 2;
      };
      if (spec.contains("char")) {
        if (!number(spec["char"].get<std::string>())) return bad("bad char number for " + rel);
      } else if (spec.contains("block")) {
        n.type = S_IFBLK;
        if (!number(spec["block"].get<std::string>())) return bad("bad block number for " + rel);
      } else if (spec.value("file", false)) {
        n.type = S_IFREG;
      } else {
        return bad(rel + " needs char, block or file");
      }
      for (const char* key : {"stat_errno", "open_errno"}) {
        if (!spec.contains(key)) continue;
        auto e = kErrnos.find(spec[key].get<std::string>());
        if (e == kErrnos.end()) return bad("unknown errno for " + rel);
        (std::string(key) == "stat_errno" ? n.stat_errno : n.open_errno) = e->second;
      }
      const auto ioctls = spec.value("ioctls", nlohmann::json::object());
      for (const auto& [name, a] : ioctls.items()) {
        auto req = kIoctls.find(name);
        if (req == kIoctls.end()) return bad("unknown ioctl " + name);
        FakeIoctl io;
        io.rc = a.value("rc", 0);
        io.returns_fd = a.value("fd", false);
        if (a.contains("out"))
          io.out = a["out"].is_string() ? std::stoull(a["out"].get<std::string>(), nullptr, 0)
                                        : a["out"].get<std::uint64_t>();
        if (a.contains("errno")) {
          auto e = kErrnos.find(a["errno"].get<std::string>());
          if (e == kErrnos.end()) return bad("unknown errno in " + name);
          io.err = e->second;
        }
        n.ioctls[req->second] = io;
      }
      if (spec.contains("extensions")) {
        n.value_request = KVM_CHECK_EXTENSION;
        for (const auto& [name, v] : spec["extensions"].items()) {
          if (name == "default") {
            n.value_default = v.get<int>();
            continue;
          }
          auto c = caps.find(name);
          if (c == caps.end()) return bad("unknown capability " + name);
          n.value_answers[static_cast<std::uintptr_t>(c->second)] = v.get<int>();
        }
      }
      fake->add(host.dev(rel), std::move(n));
    }
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  return fake;
}

}  // namespace nodegate::testing
