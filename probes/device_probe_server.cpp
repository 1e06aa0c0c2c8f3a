#include "device_probe_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "device_probe_io.h"
#include "kvm_device.h"
#include "nodegate/log.h"
#include "nodegate/runner.h"
#include "nodegate/version.h"
#include "tun.h"
#include "vhost_net.h"

namespace nodegate::devprobe {
namespace {

// The lvm run's deadline when a request names none: the agent's checks.lvm.timeout_seconds
// default.
constexpr std::chrono::milliseconds kDefaultLvmDeadline{10000};
// How long stop() waits for connections in progress.
constexpr std::chrono::milliseconds kStopGrace{1000};

std::unique_ptr<Probe> deviceProbe(Op op, std::shared_ptr<DeviceIo> io) {
  switch (op) {
    case Op::KvmDevice:
      return std::make_unique<KvmDeviceProbe>(std::move(io));
    case Op::VhostNet:
      return std::make_unique<VhostNetProbe>(std::move(io));
    case Op::Tun:
      return std::make_unique<TunProbe>(std::move(io));
    default:
      return nullptr;
  }
}

Result<sockaddr_un> socketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Error{ENAMETOOLONG, "failed to listen on " + path + ": socket path empty or over " +
                                   std::to_string(sizeof addr.sun_path - 1) + " bytes"};
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// A socket file left by a helper that died is removed; one a live helper answers on, or a path
// that is not a socket, is an error (never delete what is not ours).
Result<void> clearStaleSocket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return errnoError(errno, "stat " + path);
  }
  if (!S_ISSOCK(st.st_mode))
    return Error{EEXIST, "failed to listen on " + path + ": it exists and is not a socket"};
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return errnoError(errno, "create socket");
  const bool live = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(probe);
  if (live) return Error{EADDRINUSE, "failed to listen on " + path + ": another helper serves it"};
  if (::unlink(path.c_str()) != 0) return errnoError(errno, "remove the stale socket " + path);
  return {};
}

// lvm's stderr as the caller uses it, within the reply's bound: its WARNING lines come first and
// its last words end a failure message, so the head and the tail are kept.
std::string boundedStderr(std::string err) {
  constexpr std::size_t kHead = 60 * 1024, kTail = 4 * 1024;
  if (err.size() <= kHead + kTail) return err;
  return err.substr(0, kHead) + "\n[... " + std::to_string(err.size() - kHead - kTail) +
         " bytes of lvm's stderr left out ...]\n" + err.substr(err.size() - kTail);
}

// A best-effort error reply on a connection about to be closed: a short frame fits the socket
// buffer, so it never waits long.
void refuse(int fd, const std::string& why, std::chrono::milliseconds wait) {
  (void)sendAll(fd, frame(encodeError(why)), Clock::now() + wait);
}

}  // namespace

Service::Service(HostRoot host, const std::string& lvm_command, std::shared_ptr<DeviceIo> io,
                 std::shared_ptr<Exec> exec)
    : host_(std::move(host)), io_(std::move(io)), exec_(std::move(exec)) {
  config_.set(kLvmCommandSetting.section, kLvmCommandSetting.key, lvm_command);
}

Result<nlohmann::json> Service::handle(const Request& req) const {
  switch (req.op) {
    case Op::Hello: {
      nlohmann::json ops = nlohmann::json::array();
      for (Op op : allOps()) ops.push_back(opName(op));
      return nlohmann::json{{"version", kVersion},
                            {"protocol", kProtocolVersion},
                            {"ops", ops},
                            {"host_root", host_.rootDir()},
                            {"lvm_command", config_.text(kLvmCommandSetting)}};
    }
    case Op::KvmDevice:
    case Op::VhostNet:
    case Op::Tun: {
      auto probe = deviceProbe(req.op, io_);
      ProbeContext ctx{host_, config_};
      return checkResultToWire(runProbe(*probe, ctx));
    }
    case Op::LvmLabelScan: {
      auto prelude = LocalLvmAccess(exec_, io_).prepare(&host_, config_);
      if (!prelude) return prelude.error();
      return preludeToWire(*prelude);
    }
    case Op::LvmFullreport: {
      auto run =
          LocalLvmAccess(exec_, io_)
              .fullreport(config_, req.deadline.value_or(kDefaultLvmDeadline), kLvmMaxOutput);
      if (!run) return run.error();
      ExecResult r = std::move(run).value();
      r.err = boundedStderr(std::move(r.err));
      return execResultToWire(r);
    }
  }
  return Error{EOPNOTSUPP, "unknown op"};
}

Result<std::unique_ptr<Server>> Server::start(const std::string& socket_path, Handler handler,
                                              ServerLimits limits) {
  auto addr = socketAddress(socket_path);
  if (!addr) return addr.error();
  if (auto stale = clearStaleSocket(socket_path, *addr); !stale) return stale.error();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errnoError(errno, "create socket");
  // The file mode is the second gate after the peer check: only root may connect.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr);
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0 || ::listen(fd, 16) != 0) {
    const int e = bound != 0 ? bind_errno : errno;
    ::close(fd);
    return errnoError(e, "listen on " + socket_path);
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(socket_path.c_str());
    return errnoError(e, "create pipe");
  }
  auto shared = std::make_shared<Shared>();
  shared->handler = std::move(handler);
  shared->limits = limits;
  return std::unique_ptr<Server>(new Server(socket_path, fd, wake[0], wake[1], shared));
}

Server::Server(std::string path, int listen_fd, int wake_r, int wake_w,
               std::shared_ptr<Shared> shared)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_r_(wake_r),
      wake_w_(wake_w),
      shared_(std::move(shared)) {
  acceptor_ = std::thread([this] { acceptLoop(); });
}

Server::~Server() {
  stop();
}

void Server::stop() {
  if (stopped_.exchange(true)) return;
  (void)!::write(wake_w_, "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  ::close(wake_r_);
  ::close(wake_w_);
  ::unlink(path_.c_str());
  std::unique_lock lock(shared_->mu);
  shared_->idle.wait_for(lock, kStopGrace, [&] { return shared_->active == 0; });
}

void Server::acceptLoop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_r_, POLLIN, 0}};
  while (!stopped_) {
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EAGAIN: the client went away. Out of fds or memory: the pending connection stays
      // readable, so pause instead of spinning on it.
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    admit(shared_, fd);
  }
}

void Server::admit(const std::shared_ptr<Shared>& shared, int fd) {
  auto peer = peerOf(fd);
  if (!peer || !trustedPeer(*peer)) {
    const std::string who = peer ? "uid " + std::to_string(peer->uid) : peer.error().message;
    log::warn("device-probe client refused", {{"peer", who}, {"reason", "not root"}});
    refuse(fd, "peer " + who + " is not allowed: the device-probe helper answers root only",
           std::chrono::milliseconds(100));
    ::close(fd);
    return;
  }
  {
    std::lock_guard lock(shared->mu);
    if (shared->active >= shared->limits.max_connections) {
      log::warn("device-probe request refused: busy", {{"active", std::to_string(shared->active)}});
      refuse(fd, "busy: " + std::to_string(shared->active) + " requests in progress",
             std::chrono::milliseconds(100));
      ::close(fd);
      return;
    }
    ++shared->active;
  }
  auto done = [shared] {
    std::lock_guard lock(shared->mu);
    --shared->active;
    shared->idle.notify_all();
  };
  try {
    std::thread([shared, fd, done] {
      const std::string reply = answer(*shared, fd);
      // The request is done once its answer exists: a client that connects again as soon as it
      // has read the reply must find the slot free.
      done();
      if (!reply.empty()) {
        auto sent = sendAll(fd, frame(reply), Clock::now() + shared->limits.reply_deadline);
        if (!sent)
          log::warn("failed to send device-probe reply", {{"error", sent.error().message}});
      }
      ::close(fd);
    }).detach();
  } catch (const std::system_error& e) {  // no thread to be had: the library's only throw here
    refuse(fd, std::string("busy: ") + e.what(), std::chrono::milliseconds(100));
    ::close(fd);
    done();
  }
}

std::string Server::answer(Shared& shared, int fd) {
  auto body = recvFrame(fd, kMaxRequestBytes, Clock::now() + shared.limits.request_deadline);
  if (!body) {
    log::warn("device-probe request refused", {{"error", body.error().message}});
    // A client that went away gets nothing; one that sent too much, or too little too slowly,
    // is told why.
    return body.error().code == ECONNRESET ? std::string() : encodeError(body.error().message);
  }
  auto req = parseRequest(*body);
  if (!req) {
    log::warn("device-probe request refused", {{"error", req.error().message}});
    return encodeError(req.error().message);
  }
  const auto t0 = Clock::now();
  auto result = shared.handler(*req);
  std::string reply = result ? encodeOk(req->op, *result) : encodeError(result.error().message);
  if (reply.size() > kMaxReplyBytes)
    reply = encodeError("reply of " + std::to_string(reply.size()) +
                        " bytes is over the limit of " + std::to_string(kMaxReplyBytes));
  log::debug(
      "device-probe request answered",
      {{"op", std::string(opName(req->op))},
       {"ok", result ? "true" : "false"},
       {"ms",
        std::to_string(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count())}});
  return reply;
}

}  // namespace nodegate::devprobe
