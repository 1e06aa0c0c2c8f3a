// The device-probe protocol on literal bytes (framing, strict requests, replies, payload
// codecs), the agent-side wrappers with a scripted helper (a Client whose answers a test sets),
// and the helper's Service on a fake DeviceIo. The real socket, the real helper and the real
// device cgroup are test/probes/device_probe/.
#include "device_probe.h"

#include <gtest/gtest.h>

#include <deque>
#include <fstream>

#include "cpu_virt.h"
#include "device_probe_client.h"
#include "device_probe_server.h"
#include "fake_device_io.h"
#include "kvm_device.h"
#include "lvm.h"
#include "nodegate/json.h"
#include "tun.h"

namespace nodegate {
namespace {

using devprobe::Op;
using devprobe::Request;
using nlohmann::json;

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

TEST(DeviceProbeFrame, LengthIsBigEndianBeforeTheBody) {
  const std::string f = devprobe::frame("{}");
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f.substr(0, 4), std::string("\0\0\0\2", 4));
  const unsigned char h[4] = {0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(devprobe::frameLength(h), 0x01020304u);
  const unsigned char http[4] = {'G', 'E', 'T', ' '};  // an HTTP client: a huge length
  EXPECT_GT(devprobe::frameLength(http), devprobe::kMaxRequestBytes);
}

TEST(DeviceProbeRequest, RoundTripAndEveryOp) {
  for (Op op : devprobe::allOps()) {
    auto back = devprobe::parseRequest(devprobe::encodeRequest(Request{op, std::nullopt}));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->op, op);
    EXPECT_FALSE(back->deadline);
    EXPECT_EQ(devprobe::parseOp(devprobe::opName(op)), op);
  }
  auto timed = devprobe::parseRequest(R"({"v":1,"op":"lvm-fullreport","deadline_ms":2500})");
  ASSERT_TRUE(timed.ok());
  EXPECT_EQ(timed->deadline, std::chrono::milliseconds(2500));
}

TEST(DeviceProbeRequest, RefusesEverythingElseWithAReason) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "empty"},
      {"{", "not JSON"},
      {"[1]", "not a JSON object"},
      {R"({"op":"hello"})", "protocol version"},
      {R"({"v":"1","op":"hello"})", "protocol version"},
      {R"({"v":2,"op":"hello"})", "unsupported protocol version 2"},
      {R"({"v":1})", "no \"op\""},
      {R"({"v":1,"op":7})", "no \"op\""},
      {R"({"v":1,"op":"format-disk"})", "unknown op \"format-disk\""},
      {R"({"v":1,"op":"lvm-fullreport","args":["--config","x"]})", "unknown field \"args\""},
      {R"({"v":1,"op":"kvm-device","path":"/dev/sda"})", "unknown field \"path\""},
      {R"({"v":1,"op":"hello","deadline_ms":0})", "out of range"},
      {R"({"v":1,"op":"hello","deadline_ms":60001})", "out of range"},
      {R"({"v":1,"op":"hello","deadline_ms":-5})", "out of range"},
      {R"({"v":1,"op":"hello","deadline_ms":18446744073709551615})", "out of range"},
      {R"({"v":1,"op":"hello","deadline_ms":1000.5})", "not an integer"},
      {"{\"v\":1,\"op\":\"hel\xff\"}", "not JSON"},
  };
  for (const auto& [body, why] : bad) {
    auto r = devprobe::parseRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_TRUE(contains(r.error().message, why)) << body << " -> " << r.error().message;
  }
}

TEST(DeviceProbeReply, OkErrorAndWhatIsNotAReply) {
  auto ok = devprobe::parseReply(devprobe::encodeOk(Op::Hello, json{{"a", 1}}), Op::Hello);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->at("a"), 1);
  auto refused = devprobe::parseReply(devprobe::encodeError("busy: 4 requests"), Op::Hello);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "the helper refused: busy: 4 requests");
  EXPECT_FALSE(devprobe::parseReply(devprobe::encodeOk(Op::Tun, json::object()), Op::KvmDevice));
  EXPECT_FALSE(devprobe::parseReply(R"({"v":2,"ok":true,"op":"hello","result":{}})", Op::Hello));
  EXPECT_FALSE(devprobe::parseReply(R"({"v":1,"ok":true,"op":"hello"})", Op::Hello));
  EXPECT_FALSE(devprobe::parseReply(R"({"v":1,"ok":"yes","op":"hello","result":{}})", Op::Hello));
  EXPECT_FALSE(devprobe::parseReply("garbage", Op::Hello));
}

TEST(DeviceProbeWire, CheckResultRoundTrip) {
  CheckResult r = makeResult("kvm-device", Status::Fail, "CreateVmFailed", "KVM_CREATE_VM failed",
                             "check dmesg");
  r.evidence = {{"ioctl KVM_GET_API_VERSION", "12"}, {"node", "char 10:232"}};
  r.labels = {{"kvm", "false"}};
  r.metrics = {{"nodegate_x", "help text", {{"a", "b"}}, 1.5}};
  r.duration = std::chrono::milliseconds(12);
  auto back = devprobe::checkResultFromWire(devprobe::checkResultToWire(r));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(toJson(*back), toJson(r));
  EXPECT_EQ(back->metrics[0].help, "help text");

  json wrong = devprobe::checkResultToWire(r);
  wrong["status"] = "MAYBE";
  EXPECT_FALSE(devprobe::checkResultFromWire(wrong));
  wrong = devprobe::checkResultToWire(r);
  wrong["evidence"][0]["observed"] = 12;
  auto typed = devprobe::checkResultFromWire(wrong);
  ASSERT_FALSE(typed);
  EXPECT_TRUE(contains(typed.error().message, "observed is not a string")) << typed.error().message;
  wrong = devprobe::checkResultToWire(r);
  wrong.erase("labels");
  EXPECT_FALSE(devprobe::checkResultFromWire(wrong));
}

TEST(DeviceProbeWire, LvmStepsRoundTrip) {
  LvmPrelude p;
  p.command = "nsenter -t 1 -m -- lvm";
  p.installed = true;
  LvmLabelScan scan;
  scan.scanned = 3;
  scan.empty = 1;
  scan.labelled = {"vdb (sector 1)"};
  scan.denied = {"vdc"};
  p.scan = scan;
  auto back = devprobe::preludeFromWire(devprobe::preludeToWire(p));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->command, p.command);
  EXPECT_TRUE(back->installed);
  ASSERT_TRUE(back->scan);
  EXPECT_EQ(back->scan->scanned, 3u);
  EXPECT_EQ(back->scan->labelled, scan.labelled);
  EXPECT_EQ(back->scan->denied, scan.denied);
  p.scan.reset();
  EXPECT_FALSE(devprobe::preludeFromWire(devprobe::preludeToWire(p))->scan);

  ExecResult run;
  run.exit_code = -1;
  run.signal = 11;
  run.out = "{\"report\": []}";
  run.err = std::string("bad byte \xff here");  // invalid UTF-8 survives as a replacement
  auto wire = devprobe::encodeOk(Op::LvmFullreport, devprobe::execResultToWire(run));
  auto parsed = devprobe::parseReply(wire, Op::LvmFullreport);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  auto r = devprobe::execResultFromWire(*parsed);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->signal, 11);
  EXPECT_EQ(r->out, run.out);
  EXPECT_TRUE(contains(r->err, "bad byte"));
  EXPECT_FALSE(devprobe::execResultFromWire(json{{"exit_code", 300}}));
}

// A helper whose answers the test scripts: each call takes the next reply (or error).
class ScriptedClient final : public devprobe::Client {
 public:
  ScriptedClient() : Client("/run/test/device-probe.sock") {}
  mutable std::deque<Result<json>> replies;
  mutable std::vector<Request> asked;
  Result<json> call(const Request& req, std::chrono::milliseconds) const override {
    asked.push_back(req);
    if (replies.empty()) return Error{ECONNREFUSED, "connect: Connection refused"};
    auto r = std::move(replies.front());
    replies.pop_front();
    return r;
  }
};

// A local probe with a fixed answer.
class FixedProbe final : public Probe {
 public:
  FixedProbe(const ProbeSpec& spec, CheckResult r) : spec_(&spec), r_(std::move(r)) {}
  const ProbeSpec& spec() const override { return *spec_; }
  CheckResult run(const ProbeContext&) override {
    ++runs;
    return r_;
  }
  int runs = 0;

 private:
  const ProbeSpec* spec_;
  CheckResult r_;
};

TEST(DeviceProbeWrapper, AsksTheHelperFirstAndSaysWhatItCouldNotProve) {
  auto client = std::make_shared<ScriptedClient>();
  auto local_unknown =
      makeResult("kvm-device", Status::Unknown, "PermissionDenied",
                 "cannot open /host/dev/kvm read-write: Operation not permitted", "run as root");
  auto local = std::make_unique<FixedProbe>(kKvmDeviceSpec, local_unknown);
  FixedProbe* local_ptr = local.get();
  auto probe = devprobe::viaDeviceProbe(std::move(local), client);
  EXPECT_EQ(probe->name(), "kvm-device");
  EXPECT_EQ(probe->triggers(), kKvmDeviceSpec.triggers);
  HostRoot host("/host");
  Config cfg;
  ProbeContext ctx{host, cfg};

  auto helper_pass = makeResult("kvm-device", Status::Pass, "KvmUsable", "a guest ran");
  helper_pass.labels["kvm"] = "true";
  client->replies.push_back(devprobe::checkResultToWire(helper_pass));
  auto r = probe->run(ctx);
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.labels.at("kvm"), "true");
  EXPECT_EQ(local_ptr->runs, 0);
  EXPECT_EQ(client->asked.back().op, Op::KvmDevice);
  EXPECT_TRUE(contains(r.evidence.back().observed, "checked by the helper"));

  // No helper: the local verdict, but UNKNOWN says why the helper could not decide it.
  r = probe->run(ctx);
  EXPECT_EQ(local_ptr->runs, 1);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "DeviceProbeUnavailable");
  EXPECT_TRUE(contains(r.message, "Connection refused")) << r.message;
  EXPECT_TRUE(contains(r.message, "Operation not permitted")) << r.message;
  EXPECT_TRUE(contains(r.hint, "device-probe")) << r.hint;

  // An answer for another check is not an answer.
  client->replies.push_back(devprobe::checkResultToWire(makeResult("tun", Status::Pass, "Ok", "")));
  EXPECT_EQ(probe->run(ctx).reason, "DeviceProbeUnavailable");

  // What the container proves itself stays, with the helper's failure in the evidence.
  auto local_fail = makeResult("tun", Status::Fail, "DeviceMissing", "/host/dev/net/tun is missing",
                               "modprobe tun");
  auto tun = devprobe::viaDeviceProbe(std::make_unique<FixedProbe>(kTunSpec, local_fail), client);
  auto t = tun->run(ctx);
  EXPECT_EQ(t.reason, "DeviceMissing");
  EXPECT_TRUE(contains(t.evidence.back().observed, "Connection refused"));

  // Only the device checks are wrapped; without a client nothing is.
  auto other = std::make_unique<FixedProbe>(kCpuVirtSpec, helper_pass);
  Probe* raw = other.get();
  EXPECT_EQ(devprobe::viaDeviceProbe(std::move(other), client).get(), raw);
  auto bare = std::make_unique<FixedProbe>(kKvmDeviceSpec, helper_pass);
  raw = bare.get();
  EXPECT_EQ(devprobe::viaDeviceProbe(std::move(bare), nullptr).get(), raw);
}

TEST(DeviceProbeWrapper, LvmThroughTheHelperIsJudgedHere) {
  auto client = std::make_shared<ScriptedClient>();
  LvmReportSource source(std::make_shared<devprobe::HelperLvmAccess>(client));
  HostRoot host("/host");
  Config cfg;
  cfg.set("lvm", "timeout_seconds", 3);
  LvmPrelude p;
  p.command = "nsenter -t 1 -m -- lvm";
  p.installed = true;
  p.scan = LvmLabelScan{};
  p.scan->scanned = 2;
  p.scan->labelled = {"loop3 (sector 1)"};
  client->replies.push_back(devprobe::preludeToWire(p));
  ExecResult run;
  run.exit_code = 0;
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/lvm/healthy.json");
  run.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  client->replies.push_back(devprobe::execResultToWire(run));
  auto f = source.get(host, cfg, {});
  ASSERT_EQ(client->asked.size(), 2u);
  EXPECT_EQ(client->asked[1].op, Op::LvmFullreport);
  EXPECT_EQ(client->asked[1].deadline, std::chrono::milliseconds(3000));
  EXPECT_EQ(f->command, "nsenter -t 1 -m -- lvm (device-probe helper)");
  auto r = evaluateLvm(*f, lvmPolicy(cfg));
  EXPECT_EQ(r.reason, "VolumeGroupsHealthy") << r.message;

  // The helper's scan saw refused devices: the same verdict as a local scan would give.
  p.scan->labelled.clear();
  p.scan->denied = {"vda"};
  client->replies.push_back(devprobe::preludeToWire(p));
  EXPECT_EQ(evaluateLvm(*source.get(host, cfg, {}), lvmPolicy(cfg)).reason, "BlockDevicesRefused");

  // No helper: UNKNOWN DeviceProbeUnavailable, and lvm is not run in this container instead.
  auto gone = source.get(host, cfg, {});
  EXPECT_EQ(gone->failure, LvmRunFailure::HelperUnavailable);
  EXPECT_EQ(evaluateLvm(*gone, lvmPolicy(cfg)).reason, "DeviceProbeUnavailable");
}

TEST(DeviceProbeService, RunsTheSameProbesAsTheAgent) {
  auto io = std::make_shared<testing::FakeDeviceIo>();
  testing::FakeNode kvm;
  kvm.major = 10;
  kvm.minor = 232;
  kvm.open_errno = EPERM;  // the device cgroup
  HostRoot host("/nonexistent-devprobe-root");
  io->add(host.dev("kvm"), kvm);
  devprobe::Service service(host, "lvm", io, nullptr);
  auto got = service.handle(Request{Op::KvmDevice, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.error().message;
  auto remote = devprobe::checkResultFromWire(*got);
  ASSERT_TRUE(remote.ok()) << remote.error().message;
  Config cfg;
  ProbeContext ctx{host, cfg};
  auto direct = KvmDeviceProbe(io).run(ctx);
  EXPECT_EQ(toJson(*remote, false), toJson(direct, false));
  EXPECT_EQ(remote->reason, "PermissionDenied");

  auto hello = service.handle(Request{Op::Hello, std::nullopt});
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->at("protocol"), devprobe::kProtocolVersion);
  EXPECT_EQ(hello->at("ops").size(), devprobe::allOps().size());
  EXPECT_EQ(hello->at("lvm_command"), "lvm");
}

}  // namespace
}  // namespace nodegate
