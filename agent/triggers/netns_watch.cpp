#include "triggers/netns_watch.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "nodegate/log.h"

namespace nodegate::dns {
namespace {

// A link-event socket inside the netns of netns_fd, made on a thread of its own: setns() moves
// only that thread, and the socket keeps the netns it was created in.
Result<int> linkSocketIn(int netns_fd) {
  Result<int> out = Error{0, "not run"};
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      out = errnoError(errno, "enter netns to watch its links");
      return;
    }
    int s = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (s < 0) {
      out = errnoError(errno, "open rtnetlink socket in netns");
      return;
    }
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = RTMGRP_LINK;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      out = errnoError(errno, "subscribe to link events in netns");
      ::close(s);
      return;
    }
    out = s;
  });
  t.join();
  return out;
}

}  // namespace

struct NetnsLinkWatch::Impl {
  Sink sink;
  int wake_fd = -1;
  mutable std::mutex mu;  // the two below
  std::map<std::uint64_t, int> sockets;
  std::vector<int> to_close;  // removed, closed by the thread once it no longer polls them
  bool stopping = false;
  std::thread thread;

  void wake() {
    std::uint64_t one = 1;
    if (::write(wake_fd, &one, sizeof one) < 0) {
      // Only fails when the counter is saturated, and then the thread is awake anyway.
    }
  }

  // True when the socket held a link add/remove (or overflowed: changes were lost). Each message
  // is logged at debug level, so what asked for a pass can be told afterwards.
  static bool drain(int s, std::uint64_t key) {
    bool changed = false;
    alignas(nlmsghdr) char buf[8192];
    for (;;) {
      ssize_t n = ::recv(s, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == ENOBUFS)
          log::debug("netns link events lost", {{"netns", std::to_string(key)}});
        return changed || errno == ENOBUFS;
      }
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
           h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
        const auto* ifi = h->nlmsg_len >= NLMSG_LENGTH(sizeof(ifinfomsg))
                              ? static_cast<const ifinfomsg*>(NLMSG_DATA(h))
                              : nullptr;
        // A bridge's report on one of its ports (AF_BRIDGE): port state, which the bridge sends
        // again when the port's forward-delay timer expires, 15 s after the port came up, STP or
        // not; a launcher's k6t-eth0 does it for tap0 after every VM start. Which links exist,
        // their names, masters and peers come with the link's own (AF_UNSPEC) messages.
        if (ifi && ifi->ifi_family == AF_BRIDGE) continue;
        changed = true;
        if (!ifi) continue;
        log::debug("netns link event",
                   {{"netns", std::to_string(key)},
                    {"message", h->nlmsg_type == RTM_NEWLINK ? "newlink" : "dellink"},
                    {"ifindex", std::to_string(ifi->ifi_index)},
                    {"flags", std::to_string(ifi->ifi_flags)},
                    {"change", std::to_string(ifi->ifi_change)}});
      }
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::uint64_t> keys;  // keys[i] is the netns of fds[i + 1]
    for (;;) {
      {
        std::lock_guard lock(mu);
        for (int s : to_close) ::close(s);
        to_close.clear();
        if (stopping) return;
        fds.assign(1, {wake_fd, POLLIN, 0});
        keys.clear();
        for (const auto& [k, s] : sockets) {
          fds.push_back({s, POLLIN, 0});
          keys.push_back(k);
        }
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        log::error("failed to poll netns link events", {{"error", std::strerror(errno)}});
        return;
      }
      if (fds[0].revents) {
        std::uint64_t v;
        if (::read(wake_fd, &v, sizeof v) < 0) {
          // Non-blocking and already drained by an earlier wakeup: nothing to do.
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents && drain(fds[i].fd, keys[i - 1])) sink(keys[i - 1]);
    }
  }

  ~Impl() {
    for (const auto& [k, s] : sockets) ::close(s);
    for (int s : to_close) ::close(s);
    if (wake_fd >= 0) ::close(wake_fd);
  }
};

Result<std::unique_ptr<NetnsLinkWatch>> NetnsLinkWatch::start(Sink sink) {
  auto w = std::unique_ptr<NetnsLinkWatch>(new NetnsLinkWatch());
  w->impl_ = std::make_unique<Impl>();
  w->impl_->sink = std::move(sink);
  w->impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->impl_->wake_fd < 0) return errnoError(errno, "create eventfd");
  Impl* im = w->impl_.get();
  im->thread = std::thread([im] { im->loop(); });
  return w;
}

NetnsLinkWatch::~NetnsLinkWatch() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<void> NetnsLinkWatch::add(std::uint64_t key, int netns_fd) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->sockets.count(key)) return {};
  }
  auto s = linkSocketIn(netns_fd);
  if (!s) return s.error();
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->sockets.emplace(key, *s).second) ::close(*s);
  }
  impl_->wake();
  return {};
}

void NetnsLinkWatch::remove(std::uint64_t key) {
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->sockets.find(key);
    if (it == impl_->sockets.end()) return;
    impl_->to_close.push_back(it->second);
    impl_->sockets.erase(it);
  }
  impl_->wake();
}

std::size_t NetnsLinkWatch::size() const {
  std::lock_guard lock(impl_->mu);
  return impl_->sockets.size();
}

}  // namespace nodegate::dns
