#include "device_probe_io.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "device_probe.h"

namespace nodegate::devprobe {
namespace {

// Waits until fd is ready for events or the deadline passes.
Result<void> waitFor(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Error{ETIMEDOUT, std::string("no ") + what + " before the deadline"};
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errnoError(errno, std::string("wait for ") + what);
    if (n > 0) return {};
  }
}

Result<void> recvExact(int fd, char* buf, std::size_t len, Clock::time_point deadline,
                       const char* what) {
  std::size_t got = 0;
  while (got < len) {
    const ssize_t n = ::recv(fd, buf + got, len - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0)
      return Error{ECONNRESET, std::string("connection closed in the middle of the ") + what};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return errnoError(errno, std::string("read ") + what);
    if (auto w = waitFor(fd, POLLIN, deadline, what); !w) return w.error();
  }
  return {};
}

}  // namespace

Result<void> sendAll(int fd, std::string_view data, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n =
        ::send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errnoError(errno, "write message");
    if (auto w = waitFor(fd, POLLOUT, deadline, "room to write"); !w) return w.error();
  }
  return {};
}

Result<std::string> recvFrame(int fd, std::size_t max_body, Clock::time_point deadline) {
  unsigned char header[kFrameHeaderBytes];
  if (auto r =
          recvExact(fd, reinterpret_cast<char*>(header), sizeof header, deadline, "message header");
      !r)
    return r.error();
  const std::uint32_t len = frameLength(header);
  if (len > max_body)
    return Error{EMSGSIZE, "message of " + std::to_string(len) + " bytes is over the limit of " +
                               std::to_string(max_body)};
  std::string body(len, '\0');
  if (auto r = recvExact(fd, body.data(), body.size(), deadline, "message body"); !r)
    return r.error();
  return body;
}

Result<ucred> peerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return errnoError(errno, "read the peer's credentials");
  return cred;
}

bool trustedPeer(const ucred& peer) {
  return peer.uid == 0 || peer.uid == ::geteuid();
}

}  // namespace nodegate::devprobe
