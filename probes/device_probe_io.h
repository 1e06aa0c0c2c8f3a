// Socket I/O shared by both ends of the device-probe protocol (device_probe.h): every read and
// write bounded by an absolute deadline on a non-blocking socket, and the peer's credentials.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "nodegate/result.h"

namespace nodegate::devprobe {

using Clock = std::chrono::steady_clock;

// Writes all of data, or fails at the deadline (ETIMEDOUT) or on a closed peer (EPIPE, never
// SIGPIPE).
Result<void> sendAll(int fd, std::string_view data, Clock::time_point deadline);

// Reads one frame: the header, then its body. A body longer than max_body is EMSGSIZE (its length
// named, the body not read); a peer that closes early is ECONNRESET; the deadline ETIMEDOUT.
Result<std::string> recvFrame(int fd, std::size_t max_body, Clock::time_point deadline);

// The peer of a connected unix socket (SO_PEERCRED: as it was at connect or listen time).
Result<ucred> peerOf(int fd);

// Whether uid may talk to this process over the protocol: root, or our own effective uid.
bool trustedPeer(const ucred& peer);

}  // namespace nodegate::devprobe
