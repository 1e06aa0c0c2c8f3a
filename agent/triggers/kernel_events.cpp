#include "triggers/kernel_events.h"

#include <fcntl.h>
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
  std::vector<std::unique_ptr<KernelEventSource>> sources;  // udev monitors, rtnetlink
  bool links = false;                                       // the rtnetlink source is open
  int mounts_fd = -1;
  prometheus::Family<prometheus::Counter>* counter = nullptr;
  std::mutex listeners_mu;  // held while listeners run, so removal waits for a running one
  std::map<int, Sink> listeners;
  int next_listener = 1;
  std::thread thread;

  void count(std::string_view source, const std::string& subsystem) {
    if (counter)
      counter->Add({{"source", std::string(source)}, {"subsystem", subsystem}}).Increment();
  }

  // Every series an open source can count exists at 0 from the start, so increase() and rate()
  // see the first event (a counter that appears at 1 has no increase to show). Labelled by the
  // source's own name, as its events are counted.
  void createCounters() {
    if (!counter) return;
    static const std::vector<std::string> kUevent = {"misc", "block", "net"};
    static const std::vector<std::string> kRtnl = {"newlink", "dellink", "newnsid", "delnsid"};
    for (const auto& src : sources)
      for (const auto& s : src->name() == "rtnetlink" ? kRtnl : kUevent)
        counter->Add({{"source", std::string(src->name())}, {"subsystem", s}});
    if (mounts_fd >= 0) counter->Add({{"source", "mountinfo"}, {"subsystem", "mounts"}});
  }

  std::uint32_t drain(KernelEventSource& src) {
    std::uint32_t bits = 0;
    const bool rtnetlink = src.name() == "rtnetlink";
    for (const auto& ev : src.drain()) {
      if (ev.overflow) {
        bits |=
            rtnetlink ? kTriggerNetLink : kTriggerUdevMisc | kTriggerUdevBlock | kTriggerNetLink;
        continue;
      }
      if (rtnetlink) {
        bits |= kTriggerNetLink;
        count(src.name(), ev.subsystem);
        continue;
      }
      const Uevent u{ev.subsystem.c_str(), ev.sysname.c_str(), ev.action.c_str(),
                     ev.kvm_event.empty() ? nullptr : ev.kvm_event.c_str()};
      if (std::uint32_t bit = triggerForUevent(u)) {
        bits |= bit;
        count(src.name(), ev.subsystem);
        log::debug("kernel event", {{"source", std::string(src.name())},
                                    {"subsystem", ev.subsystem},
                                    {"action", ev.action},
                                    {"device", ev.sysname}});
      } else if (!ev.kvm_event.empty()) {
        log::debug("kernel event ignored", {{"source", std::string(src.name())},
                                            {"device", ev.sysname},
                                            {"kvm_event", ev.kvm_event}});
      }
    }
    return bits;
  }

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({stop_fd, POLLIN, 0});
      for (const auto& s : sources) fds.push_back({s->fd(), POLLIN, 0});
      if (mounts_fd >= 0) fds.push_back({mounts_fd, POLLPRI, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        log::error("failed to poll kernel event sources", {{"error", std::strerror(errno)}});
        return;
      }
      if (fds[0].revents) return;
      std::uint32_t bits = 0;
      for (std::size_t i = 0; i < sources.size(); ++i)
        if (fds[i + 1].revents) bits |= drain(*sources[i]);
      if (mounts_fd >= 0 && fds.back().revents) {
        // Re-reading from the start re-arms the change notification.
        char buf[4096];
        ::lseek(mounts_fd, 0, SEEK_SET);
        while (::read(mounts_fd, buf, sizeof buf) > 0) {
        }
        bits |= kTriggerMounts;
        count("mountinfo", "mounts");
      }
      if (bits) {
        sink(bits);
        std::lock_guard lock(listeners_mu);
        for (auto& [id, l] : listeners) l(bits);
      }
    }
  }

  ~Impl() {
    sources.clear();
    if (mounts_fd >= 0) ::close(mounts_fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }
};

Result<std::unique_ptr<KernelEvents>> KernelEvents::start(
    const HostRoot& host, Sink sink, std::shared_ptr<prometheus::Registry> registry,
    const Seams& seams) {
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

  std::map<std::string, bool> on = {{"uevent", false}, {"udev", false}, {"rtnetlink", false}};
  auto take = [&](Result<std::unique_ptr<KernelEventSource>> s, const char* what) {
    if (!s) {
      log::warn("failed to open kernel event source",
                {{"source", what}, {"error", s.error().message}});
      return;
    }
    on[std::string((*s)->name())] = true;
    im.sources.push_back(std::move(s).value());
  };
  if (seams.udev) {
    take(seams.udev->monitor("kernel"), "uevent");
    take(seams.udev->monitor("udev"), "udev");
  }
  if (seams.netlink) take(seams.netlink->linkEvents(), "rtnetlink");
  im.links = on["rtnetlink"];
  std::string mounts = host.proc("1/mountinfo");
  im.mounts_fd = ::open(mounts.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (im.mounts_fd < 0)
    log::info("mount table events off", {{"path", mounts}, {"error", std::strerror(errno)}});
  if (im.sources.empty() && im.mounts_fd < 0)
    return Error{ENODEV, "failed to open any kernel event source"};
  im.createCounters();
  log::info("kernel event sources ready", {{"uevent", on["uevent"] ? "on" : "off"},
                                           {"udev", on["udev"] ? "on" : "off"},
                                           {"rtnetlink", im.links ? "on" : "off"},
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
  return impl_->links;
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
