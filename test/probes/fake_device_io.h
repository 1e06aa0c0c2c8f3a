// FakeDeviceIo: a faithful stand-in for the kernel's device nodes, which cannot live in git.
// It simulates char/block nodes of a given major:minor, stat/open errors (EACCES, ENOENT,
// ENXIO...), and ioctl answers. Answers to _IOR ioctls are written into the caller's buffer
// with the size encoded in the request number, exactly as the kernel's copy_to_user would.
// It tracks open fds and mappings so tests can assert that probes release everything.
//
// A KVM node with a FakeGuest also models what the test guest needs, at the kernel's ABI: VM
// and vCPU fds (an ioctl on the wrong kind of fd is ENOTTY, as in virt/kvm/kvm_main.c), the
// memory slot (its userspace address must be a live mapping), the vCPU's kvm_run area (each
// KVM_RUN writes the next scripted exit into it: exit_reason, io.direction/size/port/count and
// the data byte at io.data_offset, where the kernel puts it) and the registers at the end. The
// scripts are exit sequences the real guest produces: stages 1-7 then hlt on a correct x86-64
// (QEMU TCG, kvm_guest_peer_test), 1-4 then KVM_EXIT_SHUTDOWN on this build machine's kvm_pvm
// (kvm_guest_root_test).
#pragma once

#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvm_device.h"
#include "kvm_guest.h"
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

// One scripted KVM_RUN result.
struct FakeExit {
  enum class Kind { Out, In, Hlt, Shutdown, InternalError, FailEntry, Mmio, Errno, Timeout };
  Kind kind = Kind::Out;
  int value = 0;  // Out/In: the byte on the port; Errno: the errno KVM_RUN fails with
  std::uint16_t port = kGuestPort;
  std::uint8_t size = 1;
  std::uint32_t count = 1;
  std::uint64_t data_offset = 4096;  // KVM_PIO_PAGE_OFFSET pages into the area, as on x86
};

// The exits of a guest that reports stages 1..n on the port.
inline std::vector<FakeExit> stagesThen(int n, FakeExit::Kind end) {
  std::vector<FakeExit> v;
  for (int i = 1; i <= n; ++i) v.push_back({FakeExit::Kind::Out, i});
  v.push_back({end, 0});
  return v;
}

struct FakeGuest {
  bool present = false;         // the node models VMs with a vCPU that runs
  int mmap_size = 12288;        // KVM_GET_VCPU_MMAP_SIZE on x86 (Linux 6.x: 3 pages)
  std::vector<FakeExit> exits;  // successive KVM_RUNs; after the last the guest is stuck
  GuestRegisters at_exit;       // KVM_GET_SREGS once the guest has run
  int map_errno = 0;            // map() fails with this
  int runs = 0;                 // state: KVM_RUNs so far (add() starts a node afresh)
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
  FakeGuest guest;
};

class FakeDeviceIo final : public DeviceIo {
 public:
  enum class FdKind { Node, Vm, Vcpu };

  void add(const std::string& path, FakeNode node) { nodes_[path] = std::move(node); }
  void remove(const std::string& path) { nodes_.erase(path); }

  Result<struct stat> statPath(const std::string& path) override {
    auto it = nodes_.find(path);
    if (it == nodes_.end()) {
      // The directories the nodes are in exist, as they do on a real /dev.
      for (const auto& [p, n] : nodes_)
        if (p.size() > path.size() + 1 && p.compare(0, path.size(), path) == 0 &&
            p[path.size()] == '/') {
          struct stat st {};
          st.st_mode = S_IFDIR | 0755;
          return st;
        }
      return errnoError(ENOENT, "stat " + path);
    }
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
    return newFd(path, FdKind::Node);
  }

  Result<int> ioctl(int fd, unsigned long request, void* arg) override {
    auto f = open_.find(fd);
    if (f == open_.end()) return errnoError(EBADF, "ioctl " + std::to_string(request));
    calls_.push_back(f->second.path + " " + std::to_string(request));
    auto n = nodes_.find(f->second.path);
    if (n == nodes_.end()) return errnoError(ENOTTY, "ioctl " + std::to_string(request));
    FakeNode& node = n->second;
    if (!kindAccepts(f->second.kind, request))
      return errnoError(ENOTTY, "ioctl " + std::to_string(request) + " on the wrong fd");
    if (node.value_request && request == node.value_request) {
      auto a = node.value_answers.find(reinterpret_cast<std::uintptr_t>(arg));
      return a == node.value_answers.end() ? node.value_default : a->second;
    }
    auto a = node.ioctls.find(request);
    if (a == node.ioctls.end()) {
      if (node.guest.present) return guestIoctl(fd, node, request, arg);
      return errnoError(ENOTTY, "ioctl " + std::to_string(request));
    }
    if (a->second.err) return errnoError(a->second.err, "ioctl " + std::to_string(request));
    if ((_IOC_DIR(request) & _IOC_READ) && arg) {
      std::size_t size = _IOC_SIZE(request);
      std::uint64_t v = a->second.out;
      std::memcpy(arg, &v, size < sizeof v ? size : sizeof v);
    }
    if (a->second.returns_fd) return newFd(f->second.path, FdKind::Vm);
    return a->second.rc;
  }

  void close(int fd) override {
    if (open_.erase(fd) == 0) bad_closes_++;
  }

  Result<void*> map(int fd, std::size_t len) override {
    FakeNode* node = nullptr;
    if (fd >= 0) {
      auto f = open_.find(fd);
      if (f == open_.end()) return errnoError(EBADF, "map");
      if (f->second.kind != FdKind::Vcpu) return errnoError(ENODEV, "map");
      node = &nodes_.at(f->second.path);
      if (len > static_cast<std::size_t>(node->guest.mmap_size)) return errnoError(EINVAL, "map");
    } else {
      // Anonymous memory is the guest's RAM: it fails as the KVM node's scenario says.
      for (auto& [p, nd] : nodes_)
        if (nd.guest.present) node = &nd;
    }
    if (node && node->guest.map_errno) return errnoError(node->guest.map_errno, "map");
    auto buf = std::make_unique<std::uint8_t[]>(len);  // zeroed, as fresh pages are
    void* p = buf.get();
    maps_[p] = {std::move(buf), len, fd};
    return p;
  }

  void unmap(void* addr, std::size_t len) override {
    auto m = maps_.find(addr);
    if (m == maps_.end() || m->second.len != len) {
      bad_unmaps_++;
      return;
    }
    maps_.erase(m);
  }

  Result<int> runVcpu(int vcpu_fd, std::chrono::steady_clock::time_point) override {
    auto f = open_.find(vcpu_fd);
    if (f == open_.end()) return errnoError(EBADF, "KVM_RUN");
    if (f->second.kind != FdKind::Vcpu) return errnoError(ENOTTY, "KVM_RUN on the wrong fd");
    FakeGuest& g = nodes_.at(f->second.path).guest;
    if (g.runs == 0) snapshotGuestMemory();
    if (static_cast<std::size_t>(g.runs) >= g.exits.size())
      return Error{ETIMEDOUT, "failed to run the guest: its deadline passed"};
    const FakeExit e = g.exits[g.runs++];
    if (e.kind == FakeExit::Kind::Timeout)
      return Error{ETIMEDOUT, "failed to run the guest: its deadline passed"};
    if (e.kind == FakeExit::Kind::Errno) return errnoError(e.value, "run the vcpu (KVM_RUN)");
    for (auto& [addr, m] : maps_)
      if (m.fd == vcpu_fd) writeExit(static_cast<std::uint8_t*>(addr), m.len, e);
    return 0;
  }

  std::size_t openCount() const { return open_.size(); }
  std::size_t mapCount() const { return maps_.size(); }
  int badCloses() const { return bad_closes_; }
  int badUnmaps() const { return bad_unmaps_; }
  const std::vector<std::string>& calls() const { return calls_; }
  // What the vCPU was given: its entry registers and the guest memory at its first KVM_RUN
  // from the load address on.
  std::optional<kvm_regs> regs_set;
  std::optional<kvm_sregs> sregs_set;
  std::optional<kvm_userspace_memory_region> region;
  std::vector<std::uint8_t> memory_at_load_address;

 private:
  struct FdInfo {
    std::string path;
    FdKind kind;
  };
  struct Mapping {
    std::unique_ptr<std::uint8_t[]> buf;
    std::size_t len;
    int fd;
  };

  int newFd(const std::string& path, FdKind kind) {
    int fd = next_fd_++;
    open_[fd] = {path, kind};
    return fd;
  }

  // Which fd kind takes which KVM ioctl (kvm_dev_ioctl, kvm_vm_ioctl, kvm_vcpu_ioctl); other
  // requests (tun, vhost) go to node fds.
  static bool kindAccepts(FdKind kind, unsigned long request) {
    switch (request) {
      case KVM_GET_API_VERSION:
      case KVM_CREATE_VM:
      case KVM_GET_VCPU_MMAP_SIZE:
        return kind == FdKind::Node;
      case KVM_CHECK_EXTENSION:
        return kind == FdKind::Node || kind == FdKind::Vm;
      case KVM_SET_TSS_ADDR:
      case KVM_SET_USER_MEMORY_REGION:
      case KVM_CREATE_VCPU:
        return kind == FdKind::Vm;
      case KVM_GET_SREGS:
      case KVM_SET_SREGS:
      case KVM_GET_REGS:
      case KVM_SET_REGS:
      case KVM_RUN:
        return kind == FdKind::Vcpu;
      default:
        return kind == FdKind::Node;
    }
  }

  Result<int> guestIoctl(int fd, FakeNode& node, unsigned long request, void* arg) {
    switch (request) {
      case KVM_GET_VCPU_MMAP_SIZE:
        return node.guest.mmap_size;
      case KVM_SET_TSS_ADDR:
        return 0;
      case KVM_SET_USER_MEMORY_REGION: {
        auto r = *static_cast<const kvm_userspace_memory_region*>(arg);
        auto m = maps_.find(reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.userspace_addr)));
        if (m == maps_.end() || m->second.len < r.memory_size)
          return errnoError(EFAULT, "KVM_SET_USER_MEMORY_REGION");
        region = r;
        return 0;
      }
      case KVM_CREATE_VCPU:
        return newFd(open_.at(fd).path, FdKind::Vcpu);
      case KVM_GET_SREGS: {
        kvm_sregs s{};
        // x86 reset state (the reset vector's CS) until the guest has run.
        s.cs.selector = 0xf000;
        s.cs.base = 0xffff0000;
        s.cs.limit = 0xffff;
        s.cr0 = 0x60000010;
        if (node.guest.runs > 0) {
          s.cr0 = node.guest.at_exit.cr0;
          s.cr3 = node.guest.at_exit.cr3;
          s.cr4 = node.guest.at_exit.cr4;
          s.efer = node.guest.at_exit.efer;
        }
        *static_cast<kvm_sregs*>(arg) = s;
        return 0;
      }
      case KVM_SET_SREGS:
        sregs_set = *static_cast<const kvm_sregs*>(arg);
        return 0;
      case KVM_SET_REGS:
        regs_set = *static_cast<const kvm_regs*>(arg);
        return 0;
      default:
        return errnoError(ENOTTY, "ioctl " + std::to_string(request));
    }
  }

  void snapshotGuestMemory() {
    if (!region) return;
    auto m =
        maps_.find(reinterpret_cast<void*>(static_cast<std::uintptr_t>(region->userspace_addr)));
    if (m == maps_.end() || m->second.len <= kGuestLoadAddress) return;
    memory_at_load_address.assign(m->second.buf.get() + kGuestLoadAddress,
                                  m->second.buf.get() + m->second.len);
  }

  static void writeExit(std::uint8_t* area, std::size_t len, const FakeExit& e) {
    if (len < sizeof(kvm_run)) return;
    auto* run = reinterpret_cast<kvm_run*>(area);
    std::memset(area, 0, sizeof(kvm_run));
    switch (e.kind) {
      case FakeExit::Kind::Out:
      case FakeExit::Kind::In:
        run->exit_reason = KVM_EXIT_IO;
        run->io.direction = e.kind == FakeExit::Kind::Out ? KVM_EXIT_IO_OUT : KVM_EXIT_IO_IN;
        run->io.size = e.size;
        run->io.port = e.port;
        run->io.count = e.count;
        run->io.data_offset = e.data_offset;
        if (e.data_offset < len) area[e.data_offset] = static_cast<std::uint8_t>(e.value);
        break;
      case FakeExit::Kind::Hlt:
        run->exit_reason = KVM_EXIT_HLT;
        break;
      case FakeExit::Kind::Shutdown:
        run->exit_reason = KVM_EXIT_SHUTDOWN;
        break;
      case FakeExit::Kind::InternalError:
        run->exit_reason = KVM_EXIT_INTERNAL_ERROR;
        run->internal.suberror = KVM_INTERNAL_ERROR_EMULATION;
        break;
      case FakeExit::Kind::FailEntry:
        run->exit_reason = KVM_EXIT_FAIL_ENTRY;
        run->fail_entry.hardware_entry_failure_reason = 0x80000021;  // invalid guest state
        break;
      case FakeExit::Kind::Mmio:
        run->exit_reason = KVM_EXIT_MMIO;
        run->mmio.phys_addr = 0xfee00000;
        break;
      case FakeExit::Kind::Errno:
      case FakeExit::Kind::Timeout:
        break;
    }
  }

  std::map<std::string, FakeNode> nodes_;
  std::map<int, FdInfo> open_;
  std::map<void*, Mapping> maps_;
  std::vector<std::string> calls_;
  int next_fd_ = 100;
  int bad_closes_ = 0;
  int bad_unmaps_ = 0;
};

// One guest exit of a devices.json script (see loadFakeDevices).
inline std::optional<FakeExit> parseFakeExit(const std::string& s,
                                             const std::map<std::string, int>& errnos) {
  using K = FakeExit::Kind;
  static const std::map<std::string, K> kPlain = {{"hlt", K::Hlt},
                                                  {"shutdown", K::Shutdown},
                                                  {"internal-error", K::InternalError},
                                                  {"fail-entry", K::FailEntry},
                                                  {"mmio", K::Mmio},
                                                  {"timeout", K::Timeout}};
  if (auto p = kPlain.find(s); p != kPlain.end()) return FakeExit{p->second, 0};
  if (s.rfind("io:", 0) == 0) return FakeExit{K::Out, std::stoi(s.substr(3))};
  if (s.rfind("errno:", 0) == 0) {
    auto e = errnos.find(s.substr(6));
    if (e != errnos.end()) return FakeExit{K::Errno, e->second};
  }
  return std::nullopt;
}

// The null device every devtmpfs (and every container's /dev) has: with it <dev> is a device
// directory to judge absent nodes by (devfsProblem in probes/device_node.h).
inline FakeNode nullDeviceNode() {
  FakeNode n;
  n.major = 1;
  n.minor = 3;
  return n;
}

// Builds a FakeDeviceIo from a scenario's devices.json (test/fixtures/hosts/<s>/devices.json):
//   { "kvm": { "char": "10:232", "open_errno": "EACCES",
//              "ioctls": { "KVM_GET_API_VERSION": {"rc": 12}, "KVM_CREATE_VM": {"fd": true} },
//              "extensions": { "default": 1, "KVM_CAP_IRQFD": 0, "KVM_CAP_MAX_VCPUS": 1024 },
//              "guest": { "exits": ["io:1", ..., "io:7", "hlt"],
//                         "registers": { "cr0": "0x80000011", "cr3": "0x1000", ... } } },
//     "net/tun": { "char": "10:200", "ioctls": { "TUNGETFEATURES": {"out": 28930} } } }
// Keys are paths below the host's /dev; the scenarios list "null": {"char": "1:3"} as every real
// /dev has it (nullDeviceNode). Unknown names are an error, not ignored. Guest exits:
// "io:N" (out N on the guest port), "hlt", "shutdown", "internal-error", "fail-entry", "mmio",
// "timeout", "errno:ENAME".
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
      {"ENOMEM", ENOMEM}, {"EIO", EIO},     {"EFAULT", EFAULT}};
  static const std::map<std::string, unsigned long> kIoctls = {
      {"KVM_GET_API_VERSION", KVM_GET_API_VERSION},
      {"KVM_CREATE_VM", KVM_CREATE_VM},
      {"VHOST_GET_FEATURES", kVhostGetFeatures},
      {"TUNGETFEATURES", TUNGETFEATURES},
      {"KVM_SET_TSS_ADDR", KVM_SET_TSS_ADDR},
      {"KVM_SET_USER_MEMORY_REGION", KVM_SET_USER_MEMORY_REGION},
      {"KVM_GET_VCPU_MMAP_SIZE", KVM_GET_VCPU_MMAP_SIZE},
      {"KVM_CREATE_VCPU", KVM_CREATE_VCPU},
      {"KVM_GET_SREGS", KVM_GET_SREGS},
      {"KVM_SET_SREGS", KVM_SET_SREGS},
      {"KVM_SET_REGS", KVM_SET_REGS}};
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
      if (spec.contains("guest")) {
        const auto& g = spec["guest"];
        n.guest.present = true;
        n.guest.mmap_size = g.value("mmap_size", n.guest.mmap_size);
        for (const auto& x : g.value("exits", nlohmann::json::array())) {
          auto e = parseFakeExit(x.get<std::string>(), kErrnos);
          if (!e) return bad("unknown guest exit " + x.get<std::string>() + " for " + rel);
          n.guest.exits.push_back(*e);
        }
        const auto regs = g.value("registers", nlohmann::json::object());
        auto reg = [&](const char* name) -> std::uint64_t {
          return regs.contains(name) ? std::stoull(regs[name].get<std::string>(), nullptr, 0) : 0;
        };
        n.guest.at_exit = {reg("cr0"), reg("cr3"), reg("cr4"), reg("efer")};
      }
      fake->add(host.dev(rel), std::move(n));
    }
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  return fake;
}

}  // namespace nodegate::testing
