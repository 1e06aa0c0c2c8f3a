#include "triggers/kernel_events.h"

#include <fcntl.h>
#include <libudev.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/counter.h>

#include "nodegate/log.h"
#include "nodegate/probe.h"

namespace nodegate {

std::uint32_t triggerForUevent(const Uevent& ev) {
  if (!ev.subsystem) return 0;
  if (std::strcmp(ev.subsystem, "misc") == 0) {
    // KVM announces every VM created or destroyed on the node as a "change" of the kvm device
    // with EVENT=create|destroy (kvm_uevent_notify_change()): VM lifecycle, not a change of the
    // device. kvm-device's own KVM_CREATE_VM would otherwise re-trigger it without end (90
    // cycles a second measured on a KVM host), and every VM start would re-run the misc probes.
    const bool lifecycle =
        ev.sysname && std::strcmp(ev.sysname, "kvm") == 0 && ev.action &&
        std::strcmp(ev.action, "change") == 0 && ev.kvm_event &&
        (std::strcmp(ev.kvm_event, "create") == 0 || std::strcmp(ev.kvm_event, "destroy") == 0);
    if (lifecycle) return 0;
    return kTriggerUdevMisc;
  }
  if (std::strcmp(ev.subsystem, "block") == 0) return kTriggerUdevBlock;
  if (std::strcmp(ev.subsystem, "net") == 0) return kTriggerNetLink;
  return 0;
}

struct KernelEvents::Impl {
  Sink sink;
  int stop_fd = -1;
  udev* ctx = nullptr;
  udev_monitor* kernel_mon = nullptr;
  udev_monitor* udev_mon = nullptr;
  nl_sock* nl = nullptr;
  int mounts_fd = -1;
  std::uint32_t nl_bits = 0;  // collected by the libnl callback
  prometheus::Family<prometheus::Counter>* counter = nullptr;
  std::mutex listeners_mu;  // held while listeners run, so removal waits for a running one
  std::map<int, Sink> listeners;
  int next_listener = 1;
  std::thread thread;

  void count(const char* source, const char* subsystem) {
    if (counter) counter->Add({{"source", source}, {"subsystem", subsystem}}).Increment();
  }

  // Every series an open source can count exists at 0 from the start, so increase() and rate()
  // see the first event (a counter that appears at 1 has no increase to show).
  void createCounters() {
    if (!counter) return;
    auto add = [this](const char* source, std::initializer_list<const char*> subsystems) {
      for (const char* s : subsystems) counter->Add({{"source", source}, {"subsystem", s}});
    };
    if (kernel_mon) add("kernel", {"misc", "block", "net"});
    if (udev_mon) add("udev", {"misc", "block", "net"});
    if (nl) add("rtnetlink", {"newlink", "dellink", "newnsid", "delnsid"});
    if (mounts_fd >= 0) add("mountinfo", {"mounts"});
  }

  udev_monitor* openMonitor(const char* source) {
    udev_monitor* m = udev_monitor_new_from_netlink(ctx, source);
    if (!m) {
      log::warn("failed to open udev monitor",
                {{"source", source}, {"error", std::strerror(errno)}});
      return nullptr;
    }
    for (const char* sub : {"misc", "block", "net"})
      udev_monitor_filter_add_match_subsystem_devtype(m, sub, nullptr);
    // A burst of block events (a VM host with many LVs) must not overflow the default buffer.
    udev_monitor_set_receive_buffer_size(m, 1 << 20);
    if (int rc = udev_monitor_enable_receiving(m); rc < 0) {
      log::warn("failed to listen on udev monitor",
                {{"source", source}, {"error", std::strerror(-rc)}});
      udev_monitor_unref(m);
      return nullptr;
    }
    return m;
  }

  static int onNetlink(nl_msg* msg, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    nlmsghdr* h = nlmsg_hdr(msg);
    if (h->nlmsg_type == RTM_NEWLINK || h->nlmsg_type == RTM_DELLINK) {
      self->nl_bits |= kTriggerNetLink;
      self->count("rtnetlink", h->nlmsg_type == RTM_NEWLINK ? "newlink" : "dellink");
    } else if (h->nlmsg_type == RTM_NEWNSID || h->nlmsg_type == RTM_DELNSID) {
      self->nl_bits |= kTriggerNetLink;
      self->count("rtnetlink", h->nlmsg_type == RTM_NEWNSID ? "newnsid" : "delnsid");
    }
    return NL_OK;
  }

  bool openNetlink() {
    nl = nl_socket_alloc();
    if (!nl) return false;
    nl_socket_disable_seq_check(nl);
    nl_socket_modify_cb(nl, NL_CB_VALID, NL_CB_CUSTOM, &Impl::onNetlink, this);
    int rc = nl_connect(nl, NETLINK_ROUTE);
    if (rc == 0) rc = nl_socket_add_memberships(nl, RTNLGRP_LINK, RTNLGRP_NSID, 0);
    if (rc == 0) rc = nl_socket_set_nonblocking(nl);
    if (rc != 0) {
      log::warn("failed to subscribe to rtnetlink link events", {{"error", nl_geterror(rc)}});
      nl_socket_free(nl);
      nl = nullptr;
      return false;
    }
    return true;
  }

  std::uint32_t drainUdev(udev_monitor* m, const char* source) {
    std::uint32_t bits = 0;
    // The monitor socket is non-blocking: read until it is empty.
    while (udev_device* d = udev_monitor_receive_device(m)) {
      const Uevent ev{udev_device_get_subsystem(d), udev_device_get_sysname(d),
                      udev_device_get_action(d), udev_device_get_property_value(d, "EVENT")};
      std::uint32_t bit = triggerForUevent(ev);
      if (bit) {
        bits |= bit;
        count(source, ev.subsystem);
        log::debug("kernel event", {{"source", source},
                                    {"subsystem", ev.subsystem},
                                    {"action", ev.action ? ev.action : ""},
                                    {"device", ev.sysname ? ev.sysname : ""}});
      } else if (ev.kvm_event) {
        log::debug("kernel event ignored", {{"source", source},
                                            {"device", ev.sysname ? ev.sysname : ""},
                                            {"kvm_event", ev.kvm_event}});
      }
      udev_device_unref(d);
    }
    return bits;
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({stop_fd, POLLIN, 0});
      if (kernel_mon) fds.push_back({udev_monitor_get_fd(kernel_mon), POLLIN, 0});
      if (udev_mon) fds.push_back({udev_monitor_get_fd(udev_mon), POLLIN, 0});
      if (nl) fds.push_back({nl_socket_get_fd(nl), POLLIN, 0});
      if (mounts_fd >= 0) fds.push_back({mounts_fd, POLLPRI, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        log::error("failed to poll kernel event sources", {{"error", std::strerror(errno)}});
        return;
      }
      if (fds[0].revents) return;
      std::uint32_t bits = 0;
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        int fd = fds[i].fd;
        if (kernel_mon && fd == udev_monitor_get_fd(kernel_mon)) {
          bits |= drainUdev(kernel_mon, "uevent");
        } else if (udev_mon && fd == udev_monitor_get_fd(udev_mon)) {
          bits |= drainUdev(udev_mon, "udev");
        } else if (nl && fd == nl_socket_get_fd(nl)) {
          nl_bits = 0;
          int rc = nl_recvmsgs_default(nl);
          // An overflowed socket lost events: treat it as "links changed".
          if (rc == -NLE_NOMEM || rc == -NLE_OBJ_NOTFOUND || rc == -NLE_MSG_OVERFLOW)
            nl_bits |= kTriggerNetLink;
          bits |= nl_bits;
        } else if (fd == mounts_fd) {
          // Re-reading from the start re-arms the change notification.
          char buf[4096];
          ::lseek(mounts_fd, 0, SEEK_SET);
          while (::read(mounts_fd, buf, sizeof buf) > 0) {
          }
          bits |= kTriggerMounts;
          count("mountinfo", "mounts");
        }
      }
      if (bits) {
        sink(bits);
        std::lock_guard lock(listeners_mu);
        for (auto& [id, l] : listeners) l(bits);
      }
    }
  }

  ~Impl() {
    if (kernel_mon) udev_monitor_unref(kernel_mon);
    if (udev_mon) udev_monitor_unref(udev_mon);
    if (ctx) udev_unref(ctx);
    if (nl) nl_socket_free(nl);
    if (mounts_fd >= 0) ::close(mounts_fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }
};

Result<std::unique_ptr<KernelEvents>> KernelEvents::start(
    const HostRoot& host, Sink sink, std::shared_ptr<prometheus::Registry> registry) {
  auto ev = std::unique_ptr<KernelEvents>(new KernelEvents());
  ev->impl_ = std::make_unique<Impl>();
  Impl& im = *ev->impl_;
  im.sink = std::move(sink);
  im.stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (im.stop_fd < 0) return errnoError(errno, "create eventfd");
  if (registry)
    im.counter = &prometheus::BuildCounter()
                      .Name("nodegate_agent_kernel_events_total")
                      .Help("Kernel events the agent received, by source and subsystem or message.")
                      .Register(*registry);

  im.ctx = udev_new();
  if (im.ctx) {
    im.kernel_mon = im.openMonitor("kernel");
    im.udev_mon = im.openMonitor("udev");
  } else {
    log::warn("failed to create udev context", {{"error", std::strerror(errno)}});
  }
  im.openNetlink();
  std::string mounts = host.proc("1/mountinfo");
  im.mounts_fd = ::open(mounts.c_str(), O_RDONLY | O_CLOEXEC);
  if (im.mounts_fd < 0)
    log::info("mount table events off", {{"path", mounts}, {"error", std::strerror(errno)}});
  if (!im.kernel_mon && !im.udev_mon && !im.nl && im.mounts_fd < 0)
    return Error{ENODEV, "failed to open any kernel event source"};
  im.createCounters();
  log::info("kernel event sources ready", {{"uevent", im.kernel_mon ? "on" : "off"},
                                           {"udev", im.udev_mon ? "on" : "off"},
                                           {"rtnetlink", im.nl ? "on" : "off"},
                                           {"mounts", im.mounts_fd >= 0 ? "on" : "off"}});
  im.thread = std::thread([&im] { im.loop(); });
  return ev;
}

int KernelEvents::addListener(Sink sink) {
  std::lock_guard lock(impl_->listeners_mu);
  int id = impl_->next_listener++;
  impl_->listeners.emplace(id, std::move(sink));
  return id;
}

void KernelEvents::removeListener(int id) {
  std::lock_guard lock(impl_->listeners_mu);
  impl_->listeners.erase(id);
}

bool KernelEvents::watchesLinks() const {
  return impl_->nl != nullptr;
}

KernelEvents::~KernelEvents() {
  if (!impl_) return;
  std::uint64_t one = 1;
  if (::write(impl_->stop_fd, &one, sizeof one) < 0) {
    // The eventfd cannot be full with one write; nothing else to do.
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace nodegate
