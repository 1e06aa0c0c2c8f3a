// The device-probe protocol: how `nodegate agent` and `nodegate check` ask the privileged helper
// (`nodegate device-probe`, a second container of the chart's pod) for the device work an
// unprivileged container's device cgroup refuses. Pure: framing, limits and codecs, tested on
// literal bytes; the socket ends are device_probe_client.h and device_probe_server.h.
//
// Transport: a unix stream socket, one request and one reply per connection, then close.
// Frame: a 4-byte big-endian length, then that many bytes of JSON (UTF-8).
// Request (at most kMaxRequestBytes): {"v": 1, "op": "<op>"} plus optionally "deadline_ms" (how
// long the client waits; the helper gives up on work it cannot finish within it). No other key is
// accepted: a request names an operation and nothing else — no path, device, ioctl, command or
// argument, so the helper can only do the fixed work it was built for, on the paths it was
// started with.
// Reply (at most kMaxReplyBytes): {"v": 1, "ok": true, "op": "<op>", "result": {...}} or
// {"v": 1, "ok": false, "error": "<why>"}. A malformed, oversized, unknown or unsupported-version
// request gets an error reply and the connection is closed; the helper keeps serving.
// Deadlines: the helper drops a connection that has not sent its request within
// kRequestDeadline and one that does not take its reply within kReplyDeadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lvm_source.h"
#include "nodegate/check.h"
#include "nodegate/result.h"
#include "nodegate/seams.h"

namespace nodegate::devprobe {

inline constexpr int kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 4;
inline constexpr std::size_t kMaxRequestBytes = 1024;
// lvm's report (16 MiB of output at most) with its JSON escaping, plus room.
inline constexpr std::size_t kMaxReplyBytes = 40u << 20;
inline constexpr std::chrono::milliseconds kRequestDeadline{2000};
inline constexpr std::chrono::milliseconds kReplyDeadline{5000};
// Bounds on a request's deadline_ms, and what a device check waits when it names none.
inline constexpr std::chrono::milliseconds kMinDeadline{100};
inline constexpr std::chrono::milliseconds kMaxDeadline{60000};
inline constexpr std::chrono::milliseconds kDeviceCheckDeadline{5000};
// The helper's bound on lvm's output (the agent's checks.lvm.max_output_bytes default).
inline constexpr std::size_t kLvmMaxOutput = 16u << 20;

// Every operation there is. hello: the helper's version and operations; the device checks run
// the same probe as the agent would (their CheckResult); the lvm ones are the lvm probe's
// collector steps (LvmAccess), judged by the caller under its own policy.
enum class Op { Hello, KvmDevice, VhostNet, Tun, LvmLabelScan, LvmFullreport };
std::string_view opName(Op op);
std::optional<Op> parseOp(std::string_view name);
// The operations a probe of this name maps to (kvm-device, vhost-net, tun), if any.
std::optional<Op> deviceCheckOp(std::string_view check);
const std::vector<Op>& allOps();

struct Request {
  Op op = Op::Hello;
  std::optional<std::chrono::milliseconds> deadline;
};

// The frame around a body, and the body length a header announces.
std::string frame(std::string_view body);
std::uint32_t frameLength(const unsigned char (&header)[kFrameHeaderBytes]);

std::string encodeRequest(const Request& req);
// Strict: an object with "v" == 1, a known "op", an optional integer "deadline_ms" within
// [kMinDeadline, kMaxDeadline], nothing else. Errors say what was wrong, for the error reply.
Result<Request> parseRequest(std::string_view body);

std::string encodeOk(Op op, const nlohmann::json& result);
std::string encodeError(std::string_view message);
// The result object of a reply to a request for op, or an error: the helper's own, or a reply
// that is not well formed.
Result<nlohmann::json> parseReply(std::string_view body, Op op);

// Payloads. The decoders check every field's type: a reply is trusted for its facts, never for
// its shape.
nlohmann::json checkResultToWire(const CheckResult& r);
Result<CheckResult> checkResultFromWire(const nlohmann::json& j);
nlohmann::json preludeToWire(const LvmPrelude& p);
Result<LvmPrelude> preludeFromWire(const nlohmann::json& j);
nlohmann::json execResultToWire(const ExecResult& r);
Result<ExecResult> execResultFromWire(const nlohmann::json& j);

}  // namespace nodegate::devprobe
