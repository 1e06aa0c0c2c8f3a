#include "triggers/proc_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "nodegate/log.h"

namespace nodegate::dns {
namespace {

// Kernels since 6.6 take an event-type mask with the subscription (struct proc_input in newer
// uapi headers; Debian 12's predate it), so fork events, the bulk of the traffic, never reach us.
// Older kernels ignore a request of this size. The mask also filters out the acknowledgement
// (event type NONE), so the plain subscription goes first and proves the connector works.
struct ProcInput {
  std::uint32_t mcast_op;
  std::uint32_t event_type;
};

std::uint32_t ackCookie() {
  return static_cast<std::uint32_t>(::getpid()) * 2654435761u;
}

Result<void> sendListen(int fd, std::uint32_t op, bool filtered, std::uint32_t ack) {
  alignas(nlmsghdr) char buf[NLMSG_SPACE(sizeof(cn_msg) + sizeof(ProcInput))] = {};
  const std::size_t body = filtered ? sizeof(ProcInput) : sizeof(std::uint32_t);
  auto* nl = reinterpret_cast<nlmsghdr*>(buf);
  nl->nlmsg_len = static_cast<std::uint32_t>(NLMSG_LENGTH(sizeof(cn_msg) + body));
  nl->nlmsg_type = NLMSG_DONE;
  auto* cn = static_cast<cn_msg*>(NLMSG_DATA(nl));
  cn->id.idx = CN_IDX_PROC;
  cn->id.val = CN_VAL_PROC;
  cn->ack = ack;
  cn->len = static_cast<std::uint16_t>(body);
  const ProcInput input{
      op, proc_event::PROC_EVENT_EXEC | proc_event::PROC_EVENT_COMM | proc_event::PROC_EVENT_EXIT};
  std::memcpy(cn->data, &input, body);  // unfiltered: the op alone
  if (::send(fd, buf, nl->nlmsg_len, 0) < 0)
    return errnoError(errno, "subscribe to process events");
  return {};
}

}  // namespace

struct ProcessEvents::Impl {
  Sink sink;
  int sock = -1;
  int stop_fd = -1;
  std::thread thread;

  ~Impl() {
    if (sock >= 0) ::close(sock);
    if (stop_fd >= 0) ::close(stop_fd);
  }

  // Reads one datagram (non-blocking). Returns false when there was nothing to read. Delivers
  // events to sink; an acknowledgement matching `ack` sets *acked and *ack_err.
  bool readOne(std::uint32_t ack, bool* acked, std::uint32_t* ack_err) {
    alignas(nlmsghdr) char buf[4096];
    ssize_t n = ::recv(sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == ENOBUFS) {
        sink({ProcessEvent::Kind::Lost, 0, {}});
        return true;
      }
      return false;
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_type == NLMSG_NOOP) continue;
      auto* cn = static_cast<cn_msg*>(NLMSG_DATA(h));
      if (cn->id.idx != CN_IDX_PROC || cn->id.val != CN_VAL_PROC) continue;
      if (cn->len < offsetof(proc_event, event_data)) continue;
      auto* ev = reinterpret_cast<proc_event*>(cn->data);
      switch (ev->what) {
        case proc_event::PROC_EVENT_NONE:
          if (acked && cn->ack == ack + 1) {
            *acked = true;
            *ack_err = ev->event_data.ack.err;
          }
          break;
        case proc_event::PROC_EVENT_EXEC:
          sink({ProcessEvent::Kind::Exec, ev->event_data.exec.process_tgid, {}});
          break;
        case proc_event::PROC_EVENT_COMM:
          // Only the main thread's name is the process's comm.
          if (ev->event_data.comm.process_pid == ev->event_data.comm.process_tgid)
            sink({ProcessEvent::Kind::Comm, ev->event_data.comm.process_tgid,
                  std::string(ev->event_data.comm.comm,
                              strnlen(ev->event_data.comm.comm, sizeof ev->event_data.comm.comm))});
          break;
        case proc_event::PROC_EVENT_EXIT:
          if (ev->event_data.exit.process_pid == ev->event_data.exit.process_tgid)
            sink({ProcessEvent::Kind::Exit, ev->event_data.exit.process_tgid, {}});
          break;
        default:
          break;
      }
    }
    return true;
  }

  // Waits for the kernel's acknowledgement of a subscription (events arriving meanwhile are
  // delivered as usual).
  Result<void> awaitAck(std::uint32_t ack, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    bool acked = false;
    std::uint32_t err = 0;
    while (!acked) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return Error{ETIMEDOUT,
                     "no acknowledgement from the proc connector (not in the initial pid, user and "
                     "network namespaces, or kernel without CONFIG_PROC_EVENTS)"};
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
        return errnoError(errno, "wait for the proc connector");
      while (!acked && readOne(ack, &acked, &err)) {
      }
    }
    if (err != 0) return errnoError(static_cast<int>(err), "subscribe to process events");
    return {};
  }

  void loop() {
    for (;;) {
      pollfd fds[2] = {{stop_fd, POLLIN, 0}, {sock, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        log::error("failed to poll process events", {{"error", std::strerror(errno)}});
        return;
      }
      if (fds[0].revents) return;
      // Drain: a burst of execs must not wait for one poll() round each.
      while (readOne(0, nullptr, nullptr)) {
      }
    }
  }
};

Result<std::unique_ptr<ProcessEvents>> ProcessEvents::start(Sink sink,
                                                            std::chrono::milliseconds ack_timeout) {
  auto pe = std::unique_ptr<ProcessEvents>(new ProcessEvents());
  pe->impl_ = std::make_unique<Impl>();
  Impl& im = *pe->impl_;
  im.sink = std::move(sink);
  im.sock = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (im.sock < 0) return errnoError(errno, "open the proc connector socket");
  // A VM host starts bursts of processes: a larger buffer loses fewer events (a loss still only
  // costs a rescan).
  int rcvbuf = 4 << 20;
  ::setsockopt(im.sock, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = CN_IDX_PROC;
  addr.nl_pid = 0;  // the kernel picks a unique port id
  if (::bind(im.sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return errnoError(errno, "bind the proc connector socket");
  im.stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (im.stop_fd < 0) return errnoError(errno, "create eventfd");

  const std::uint32_t cookie = ackCookie();
  Result<void> r = sendListen(im.sock, PROC_CN_MCAST_LISTEN, false, cookie);
  if (r) r = im.awaitAck(cookie, ack_timeout);
  if (!r) return r.error();
  if (auto f = sendListen(im.sock, PROC_CN_MCAST_LISTEN, true, 0); !f)
    log::debug("process events unfiltered", {{"error", f.error().message}});
  im.thread = std::thread([&im] { im.loop(); });
  return pe;
}

ProcessEvents::~ProcessEvents() {
  if (!impl_) return;
  // The kernel counts listeners; tell it we are gone (closing the socket alone does not).
  if (auto r = sendListen(impl_->sock, PROC_CN_MCAST_IGNORE, false, 0); !r)
    log::debug("process events", {{"error", r.error().message}});
  std::uint64_t one = 1;
  if (::write(impl_->stop_fd, &one, sizeof one) < 0) {
    // An eventfd cannot be full after one write.
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace nodegate::dns
