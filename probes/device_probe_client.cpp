#include "device_probe_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device_probe_io.h"

namespace nodegate::devprobe {
namespace {

constexpr const char* kUnavailableHint =
    "the device-probe helper opens the devices the container's device cgroup refuses: check its "
    "container (kubectl logs POD -c device-probe) and that --device-probe names its socket";

// What the client waits beyond the deadline it gives the helper: the helper's kill of a late
// lvm and its reply.
constexpr std::chrono::milliseconds kReplyMargin{2000};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<void> connectTo(int fd, const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Error{ENAMETOOLONG, "socket path is empty or longer than " +
                                   std::to_string(sizeof addr.sun_path - 1) + " bytes"};
  std::memcpy(addr.sun_path, path.data(), path.size());
  int rc;
  do rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  while (rc != 0 && errno == EINTR);
  // A unix socket connects at once or not at all; EAGAIN is a full listen backlog.
  if (rc != 0) return errnoError(errno, "connect");
  return {};
}

class HelperDeviceProbe final : public Probe {
 public:
  HelperDeviceProbe(std::unique_ptr<Probe> local, Op op, std::shared_ptr<const Client> client)
      : local_(std::move(local)), op_(op), client_(std::move(client)) {}
  const ProbeSpec& spec() const override { return local_->spec(); }

  CheckResult run(const ProbeContext& ctx) override {
    auto reply = client_->call(Request{op_, kDeviceCheckDeadline}, kDeviceCheckDeadline);
    Result<CheckResult> remote =
        reply ? checkResultFromWire(*reply) : Result<CheckResult>(reply.error());
    if (remote && remote->check != local_->name())
      remote = Error{EPROTO, "the helper answered for check \"" + remote->check + "\""};
    if (remote) {
      CheckResult r = std::move(remote).value();
      r.evidence.push_back(
          {"device-probe helper",
           "checked by the helper at " + client_->socketPath() + " (its own host root)"});
      return r;
    }
    return fallback(ctx, remote.error());
  }

 private:
  // The helper did not answer: what this process can prove itself, and what it cannot.
  CheckResult fallback(const ProbeContext& ctx, const Error& why) {
    CheckResult r = local_->run(ctx);
    r.evidence.push_back({"device-probe helper", why.message});
    if (r.status != Status::Unknown) return r;
    r.message = "the device-probe helper did not answer (" + why.message +
                "); from this container: " + r.message;
    r.reason = "DeviceProbeUnavailable";
    r.hint = kUnavailableHint;
    return r;
  }

  std::unique_ptr<Probe> local_;
  Op op_;
  std::shared_ptr<const Client> client_;
};

}  // namespace

Result<nlohmann::json> Client::call(const Request& req, std::chrono::milliseconds wait) const {
  const auto deadline = Clock::now() + wait;
  auto failed = [&](const Error& e) {
    return Error{e.code, "failed to ask the device-probe helper at " + path_ + " for " +
                             std::string(opName(req.op)) + ": " + e.message};
  };
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return failed(errnoError(errno, "create socket"));
  if (auto c = connectTo(fd.get(), path_); !c) return failed(c.error());
  // Whoever serves the socket answers for the devices: only root (or ourselves) is believed.
  auto peer = peerOf(fd.get());
  if (!peer) return failed(peer.error());
  if (!trustedPeer(*peer))
    return failed(Error{EPERM, "the socket is served by uid " + std::to_string(peer->uid) +
                                   " (pid " + std::to_string(peer->pid) + "), not by root"});
  // A send that fails because the helper closed at once still reads what it said (busy, not
  // allowed) before giving up.
  auto sent = sendAll(fd.get(), frame(encodeRequest(req)), deadline);
  if (!sent && sent.error().code != EPIPE && sent.error().code != ECONNRESET)
    return failed(sent.error());
  auto body = recvFrame(fd.get(), kMaxReplyBytes, deadline);
  if (!body && !sent) return failed(sent.error());
  if (!body) {
    if (body.error().code == ETIMEDOUT)
      return failed(Error{ETIMEDOUT, "no answer within " + std::to_string(wait.count()) + " ms"});
    return failed(body.error());
  }
  auto result = parseReply(*body, req.op);
  if (!result) return failed(result.error());
  return result;
}

std::unique_ptr<Probe> viaDeviceProbe(std::unique_ptr<Probe> local,
                                      std::shared_ptr<const Client> client) {
  auto op = deviceCheckOp(local->name());
  if (!client || !op) return local;
  return std::make_unique<HelperDeviceProbe>(std::move(local), *op, std::move(client));
}

Result<LvmPrelude> HelperLvmAccess::prepare(const HostRoot* host, const Config&) {
  auto reply = client_->call(Request{Op::LvmLabelScan, kDeviceCheckDeadline}, kDeviceCheckDeadline);
  if (!reply) return reply.error();
  auto decoded = preludeFromWire(*reply);
  if (!decoded) return decoded.error();
  LvmPrelude prelude = std::move(decoded).value();
  // The helper's own command and host root decide; say where the work was done.
  prelude.command += " (device-probe helper)";
  if (!host) prelude.scan.reset();  // the caller asked for no scan (it always runs lvm)
  return prelude;
}

Result<ExecResult> HelperLvmAccess::fullreport(const Config&, std::chrono::milliseconds timeout,
                                               std::size_t) {
  const auto deadline = std::clamp(timeout, kMinDeadline, kMaxDeadline);
  auto reply = client_->call(Request{Op::LvmFullreport, deadline}, deadline + kReplyMargin);
  if (!reply) return reply.error();
  return execResultFromWire(*reply);
}

}  // namespace nodegate::devprobe
