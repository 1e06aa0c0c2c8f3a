// Link events inside the network namespaces the DNS tracer works in. The agent's rtnetlink source
// (agent/triggers/kernel_events.h) hears only its own netns; in a virt-launcher pod's netns,
// virt-handler creates k6t-eth0 and tap0 after the launcher process started, and no host-side event
// tells of them. An rtnetlink socket opened inside a netns stays bound to it, so one socket per
// traced netns hears them. Like an open netns file, a socket keeps its netns alive: remove() a
// netns when it is no longer traced, together with closing its file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "nodegate/result.h"

namespace nodegate::dns {

class NetnsLinkWatch {
 public:
  // A link changed (or link events were lost) in the netns watched under `key`: the caller re-reads
  // that netns alone.
  using Sink = std::function<void(std::uint64_t key)>;

  static Result<std::unique_ptr<NetnsLinkWatch>> start(Sink sink);
  ~NetnsLinkWatch();  // closes every socket and joins the thread
  NetnsLinkWatch(const NetnsLinkWatch&) = delete;
  NetnsLinkWatch& operator=(const NetnsLinkWatch&) = delete;

  // Watches the netns netns_fd refers to under key (idempotent per key); netns_fd stays the
  // caller's.
  Result<void> add(std::uint64_t key, int netns_fd);
  void remove(std::uint64_t key);
  std::size_t size() const;

  struct Impl;

 private:
  NetnsLinkWatch() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodegate::dns
