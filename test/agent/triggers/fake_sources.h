// Fake udev and netlink seams: sources whose fd is an eventfd, readable while events wait.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <memory>
#include <mutex>

#include "nodegate/seams.h"

namespace nodegate::testing {

class FakeEventSource final : public KernelEventSource {
 public:
  explicit FakeEventSource(std::string name)
      : name_(std::move(name)), fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~FakeEventSource() override { ::close(fd_); }
  std::string_view name() const override { return name_; }
  int fd() const override { return fd_; }
  std::vector<KernelEvent> drain() override {
    std::uint64_t n;
    while (::read(fd_, &n, sizeof n) > 0) {
    }
    std::lock_guard l(mu_);
    std::vector<KernelEvent> out(queue_.begin(), queue_.end());
    queue_.clear();
    ++drains;
    return out;
  }
  // Queues events and makes the fd readable: one drain() sees them together.
  void push(std::vector<KernelEvent> events) {
    {
      std::lock_guard l(mu_);
      queue_.insert(queue_.end(), events.begin(), events.end());
    }
    std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }
  int drains = 0;

 private:
  std::string name_;
  int fd_;
  std::mutex mu_;
  std::deque<KernelEvent> queue_;
};

// Hands out the sources a test made (or an error when it made none); the test keeps pointers to
// push into them.
class FakeUdev final : public Udev {
 public:
  FakeEventSource* kernel = nullptr;
  FakeEventSource* udev = nullptr;
  bool fail = false;
  Result<std::unique_ptr<KernelEventSource>> monitor(const std::string& source) override {
    if (fail) return Error{EPROTONOSUPPORT, "failed to open udev monitor " + source + ": fake"};
    auto s = std::make_unique<FakeEventSource>(source == "kernel" ? "uevent" : source);
    (source == "kernel" ? kernel : udev) = s.get();
    return std::unique_ptr<KernelEventSource>(std::move(s));
  }
};

class FakeNetlink final : public Netlink {
 public:
  FakeEventSource* events = nullptr;
  bool fail = false;
  std::map<std::string, std::vector<LinkInfo>> links;  // netns path -> links
  Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path, bool) override {
    auto it = links.find(netns_path);
    if (it == links.end()) return Error{ENOENT, "failed to open netns " + netns_path + ": fake"};
    return it->second;
  }
  Result<std::unique_ptr<KernelEventSource>> linkEvents() override {
    if (fail) return Error{0, "failed to subscribe to rtnetlink link events: fake"};
    auto s = std::make_unique<FakeEventSource>("rtnetlink");
    events = s.get();
    return std::unique_ptr<KernelEventSource>(std::move(s));
  }
};

}  // namespace nodegate::testing
