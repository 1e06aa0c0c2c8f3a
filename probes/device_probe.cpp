#include "device_probe.h"

#include <cerrno>
#include <cmath>
#include <limits>

namespace nodegate::devprobe {
namespace {

using nlohmann::json;

struct OpName {
  Op op;
  std::string_view name;
};
constexpr OpName kOps[] = {
    {Op::Hello, "hello"},
    {Op::KvmDevice, "kvm-device"},
    {Op::VhostNet, "vhost-net"},
    {Op::Tun, "tun"},
    {Op::LvmLabelScan, "lvm-label-scan"},
    {Op::LvmFullreport, "lvm-fullreport"},
};

Error malformed(std::string what) {
  return Error{EPROTO, "malformed " + std::move(what)};
}

// Invalid UTF-8 (a device's bytes in lvm's stderr) is replaced, never a throw.
std::string dumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Typed field access that keeps the first error, so a decoder reads like the struct it fills.
class Fields {
 public:
  Fields(const json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) fail("is not an object");
  }
  std::string text(const char* key) {
    const json* v = get(key);
    if (v && !v->is_string()) fail(std::string(key) + " is not a string");
    return v && v->is_string() ? v->get<std::string>() : std::string();
  }
  bool flag(const char* key) {
    const json* v = get(key);
    if (v && !v->is_boolean()) fail(std::string(key) + " is not a boolean");
    return v && v->is_boolean() && v->get<bool>();
  }
  std::int64_t integer(const char* key, std::int64_t min, std::int64_t max) {
    const json* v = get(key);
    if (v && !v->is_number_integer()) fail(std::string(key) + " is not an integer");
    if (!v || !v->is_number_integer()) return 0;
    // Both integer kinds: a large unsigned value must not wrap into range.
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail(std::string(key) + " is out of range");
      return 0;
    }
    const auto n = v->get<std::int64_t>();
    if (n < min || n > max) fail(std::string(key) + " is out of range");
    return n;
  }
  double number(const char* key) {
    const json* v = get(key);
    if (v && (!v->is_number() || !std::isfinite(v->get<double>())))
      fail(std::string(key) + " is not a finite number");
    return v && v->is_number() ? v->get<double>() : 0;
  }
  std::vector<std::string> texts(const char* key) {
    std::vector<std::string> out;
    const json* v = get(key);
    if (v && !v->is_array()) fail(std::string(key) + " is not an array");
    if (!v || !v->is_array()) return out;
    for (const auto& e : *v) {
      if (!e.is_string()) {
        fail(std::string(key) + " holds a non-string");
        break;
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::map<std::string, std::string> textMap(const char* key) {
    std::map<std::string, std::string> out;
    const json* v = get(key);
    if (v && !v->is_object()) fail(std::string(key) + " is not an object");
    if (!v || !v->is_object()) return out;
    for (const auto& [k, e] : v->items()) {
      if (!e.is_string()) {
        fail(std::string(key) + "." + k + " is not a string");
        break;
      }
      out[k] = e.get<std::string>();
    }
    return out;
  }
  const json* array(const char* key) {
    const json* v = get(key);
    if (v && !v->is_array()) fail(std::string(key) + " is not an array");
    return v && v->is_array() ? v : nullptr;
  }
  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }
  bool isNull(const char* key) const { return has(key) && j_.at(key).is_null(); }
  const json& at(const char* key) const { return j_.at(key); }
  void fail(const std::string& why) {
    if (!error_) error_ = malformed(what_ + ": " + why);
  }
  const std::optional<Error>& error() const { return error_; }

 private:
  const json* get(const char* key) {
    if (!j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      fail(std::string("no ") + key);
      return nullptr;
    }
    return &*it;
  }
  const json& j_;
  std::string what_;
  std::optional<Error> error_;
};

}  // namespace

std::string_view opName(Op op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "hello";
}

std::optional<Op> parseOp(std::string_view name) {
  for (const auto& o : kOps)
    if (o.name == name) return o.op;
  return std::nullopt;
}

std::optional<Op> deviceCheckOp(std::string_view check) {
  auto op = parseOp(check);
  if (op == Op::KvmDevice || op == Op::VhostNet || op == Op::Tun) return op;
  return std::nullopt;
}

const std::vector<Op>& allOps() {
  static const std::vector<Op> ops = [] {
    std::vector<Op> v;
    for (const auto& o : kOps) v.push_back(o.op);
    return v;
  }();
  return ops;
}

std::string frame(std::string_view body) {
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string out;
  out.reserve(kFrameHeaderBytes + body.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(body);
  return out;
}

std::uint32_t frameLength(const unsigned char (&h)[kFrameHeaderBytes]) {
  return (std::uint32_t{h[0]} << 24) | (std::uint32_t{h[1]} << 16) | (std::uint32_t{h[2]} << 8) |
         std::uint32_t{h[3]};
}

std::string encodeRequest(const Request& req) {
  json j{{"v", kProtocolVersion}, {"op", opName(req.op)}};
  if (req.deadline) j["deadline_ms"] = req.deadline->count();
  return j.dump();
}

Result<Request> parseRequest(std::string_view body) {
  if (body.empty()) return malformed("request: empty");
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return malformed("request: not JSON");
  if (!j.is_object()) return malformed("request: not a JSON object");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key != "v" && key != "op" && key != "deadline_ms")
      return malformed("request: unknown field \"" + key.substr(0, 40) + "\"");
  }
  if (!j.contains("v") || !j.at("v").is_number_integer())
    return malformed("request: no integer protocol version \"v\"");
  if (j.at("v") != kProtocolVersion)
    return Error{EPROTONOSUPPORT, "unsupported protocol version " + j.at("v").dump() +
                                      " (this helper speaks " + std::to_string(kProtocolVersion) +
                                      ")"};
  if (!j.contains("op") || !j.at("op").is_string()) return malformed("request: no \"op\"");
  Request req;
  const auto name = j.at("op").get<std::string>();
  auto op = parseOp(name);
  if (!op) return Error{EOPNOTSUPP, "unknown op \"" + name.substr(0, 40) + "\""};
  req.op = *op;
  if (j.contains("deadline_ms")) {
    Fields f(j, "request");
    const auto ms = f.integer("deadline_ms", kMinDeadline.count(), kMaxDeadline.count());
    if (f.error()) return *f.error();
    req.deadline = std::chrono::milliseconds(ms);
  }
  return req;
}

std::string encodeOk(Op op, const json& result) {
  return dumpJson(
      json{{"v", kProtocolVersion}, {"ok", true}, {"op", opName(op)}, {"result", result}});
}

std::string encodeError(std::string_view message) {
  return dumpJson(json{{"v", kProtocolVersion}, {"ok", false}, {"error", std::string(message)}});
}

Result<json> parseReply(std::string_view body, Op op) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return malformed("reply: not JSON");
  Fields f(j, "reply");
  const auto version = f.integer("v", 0, std::numeric_limits<int>::max());
  const bool ok = f.flag("ok");
  if (f.error()) return *f.error();
  if (version != kProtocolVersion)
    return Error{EPROTONOSUPPORT, "the helper speaks protocol version " + std::to_string(version) +
                                      ", this client " + std::to_string(kProtocolVersion)};
  if (!ok) {
    const std::string why = f.text("error");
    if (f.error()) return *f.error();
    return Error{EREMOTEIO, "the helper refused: " + why};
  }
  if (f.text("op") != opName(op)) f.fail("answers another op");
  if (!f.has("result") || !f.at("result").is_object()) f.fail("no result object");
  if (f.error()) return *f.error();
  return std::move(j.at("result"));
}

json checkResultToWire(const CheckResult& r) {
  json evidence = json::array(), metrics = json::array();
  for (const auto& e : r.evidence)
    evidence.push_back({{"source", e.source}, {"observed", e.observed}});
  for (const auto& m : r.metrics)
    metrics.push_back(
        {{"name", m.name}, {"help", m.help}, {"labels", m.labels}, {"value", m.value}});
  return json{{"check", r.check},
              {"status", toString(r.status)},
              {"reason", r.reason},
              {"message", r.message},
              {"hint", r.hint},
              {"evidence", evidence},
              {"labels", r.labels},
              {"metrics", metrics},
              {"duration_ns", r.duration.count()}};
}

Result<CheckResult> checkResultFromWire(const json& j) {
  Fields f(j, "check result");
  CheckResult r;
  r.check = f.text("check");
  const std::string status = f.text("status");
  r.reason = f.text("reason");
  r.message = f.text("message");
  r.hint = f.text("hint");
  r.labels = f.textMap("labels");
  r.duration =
      std::chrono::nanoseconds(f.integer("duration_ns", 0, std::int64_t{3600} * 1000000000));
  if (const json* ev = f.array("evidence"))
    for (const auto& e : *ev) {
      Fields fe(e, "evidence");
      Evidence item{fe.text("source"), fe.text("observed")};
      if (fe.error()) return *fe.error();
      r.evidence.push_back(std::move(item));
    }
  if (const json* ms = f.array("metrics"))
    for (const auto& m : *ms) {
      Fields fm(m, "metric");
      MetricSample s{fm.text("name"), fm.text("help"), fm.textMap("labels"), fm.number("value")};
      if (fm.error()) return *fm.error();
      r.metrics.push_back(std::move(s));
    }
  if (f.error()) return *f.error();
  auto parsed = parseStatus(status);
  if (!parsed) return malformed("check result: status \"" + status.substr(0, 20) + "\"");
  r.status = *parsed;
  return r;
}

json preludeToWire(const LvmPrelude& p) {
  json j{{"command", p.command}, {"installed", p.installed}, {"scan", nullptr}};
  if (p.scan)
    j["scan"] = {{"scanned", p.scan->scanned},
                 {"empty", p.scan->empty},
                 {"labelled", p.scan->labelled},
                 {"denied", p.scan->denied},
                 {"error", p.scan->error}};
  return j;
}

Result<LvmPrelude> preludeFromWire(const json& j) {
  Fields f(j, "lvm label scan");
  LvmPrelude p;
  p.command = f.text("command");
  p.installed = f.flag("installed");
  if (f.has("scan") && !f.isNull("scan")) {
    Fields fs(f.at("scan"), "lvm label scan");
    LvmLabelScan s;
    s.scanned = static_cast<std::size_t>(fs.integer("scanned", 0, 1 << 24));
    s.empty = static_cast<std::size_t>(fs.integer("empty", 0, 1 << 24));
    s.labelled = fs.texts("labelled");
    s.denied = fs.texts("denied");
    s.error = fs.text("error");
    if (fs.error()) return *fs.error();
    p.scan = std::move(s);
  } else if (!f.has("scan")) {
    f.fail("no scan");
  }
  if (f.error()) return *f.error();
  return p;
}

json execResultToWire(const ExecResult& r) {
  return json{{"exit_code", r.exit_code}, {"signal", r.signal},      {"out", r.out}, {"err", r.err},
              {"timed_out", r.timed_out}, {"truncated", r.truncated}};
}

Result<ExecResult> execResultFromWire(const json& j) {
  Fields f(j, "lvm run");
  ExecResult r;
  r.exit_code = static_cast<int>(f.integer("exit_code", -1, 255));
  r.signal = static_cast<int>(f.integer("signal", 0, 128));
  r.out = f.text("out");
  r.err = f.text("err");
  r.timed_out = f.flag("timed_out");
  r.truncated = f.flag("truncated");
  if (f.error()) return *f.error();
  return r;
}

}  // namespace nodegate::devprobe
