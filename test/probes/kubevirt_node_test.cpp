// kubevirt-node on captured Node and pod shapes (test/fixtures/kubevirt/SOURCES.md): parsing,
// quantities, and one reason per disagreement between KubeVirt's view and nodegate's devices.
#include "kubevirt_node.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace nodegate {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string read(const std::string& name) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/kubevirt/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const auto kNow = std::chrono::system_clock::from_time_t(1800000000);  // 2027-01-15T08:00:00Z

std::string stamp(std::chrono::system_clock::time_point t) {
  std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A captured node with its heartbeat moved to `age` before kNow.
KubeVirtNodeView nodeView(const std::string& fixture, std::chrono::seconds age = 30s) {
  json n = json::parse(read(fixture));
  n["metadata"]["annotations"]["kubevirt.io/heartbeat"] = stamp(kNow - age);
  return kubevirtNodeView(n);
}

CheckResult device(const std::string& check, Status s, const std::string& label,
                   const std::string& value) {
  CheckResult r =
      makeResult(check, s, s == Status::Pass ? "Usable" : "DeviceMissing",
                 check + " " + std::string(toString(s)), s == Status::Pass ? "" : "fix it");
  r.labels[label] = value;
  return r;
}

std::map<std::string, CheckResult> allWork() {
  return {{"kvm-device", device("kvm-device", Status::Pass, "kvm", "true")},
          {"tun", device("tun", Status::Pass, "tun", "true")},
          {"vhost-net", device("vhost-net", Status::Pass, "vhost-net", "true")}};
}

KubeVirtNodeInputs inputs(KubeVirtNodeView node, bool handler_ready = true) {
  KubeVirtNodeInputs in;
  in.facts.node = std::move(node);
  in.facts.pods_complete = true;
  json h = json::parse(read("virt-handler-pod.json"));
  if (!handler_ready) {
    h["status"]["conditions"][1] = {{"type", "Ready"},
                                    {"status", "False"},
                                    {"reason", "ContainersNotReady"},
                                    {"message", "containers with unready status: [virt-handler]"}};
  }
  in.facts.handlers.push_back(virtHandlerPod(h));
  in.devices = allWork();
  in.now = kNow;
  return in;
}

bool hasMetric(const CheckResult& r, const std::string& name, const std::string& dev, double v) {
  for (const auto& m : r.metrics)
    if (m.name == name && (dev.empty() || m.labels.at("device") == dev) && m.value == v)
      return true;
  return false;
}

TEST(KubeVirtNode, ParsesTheCapturedNode) {
  auto v = parseKubeVirtNode(read("node-kubevirt-healthy.json"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->capacity, (std::map<std::string, std::string>{
                             {"kvm", "1k"}, {"tun", "1k"}, {"vhost-net", "1k"}}));
  EXPECT_EQ(v->allocatable.at("kvm"), "1k");
  EXPECT_EQ(v->schedulable, "true");
  EXPECT_EQ(v->heartbeat, "2018-11-14T12:57:27Z");
  EXPECT_FALSE(parseKubeVirtNode("[1]").ok());
  EXPECT_FALSE(parseKubeVirtNode("{").ok());
}

TEST(KubeVirtNode, ParsesTheCapturedPods) {
  json h = json::parse(read("virt-handler-pod.json"));
  EXPECT_TRUE(isVirtHandlerPod(h));
  VirtHandlerPod p = virtHandlerPod(h);
  EXPECT_EQ(p.name, "kube-system/virt-handler-bgmlh");
  EXPECT_EQ(p.phase, "Running");
  EXPECT_TRUE(p.ready);
  EXPECT_EQ(p.restarts, 2);
  EXPECT_FALSE(p.deleting);
  EXPECT_FALSE(isVirtHandlerPod(json::parse(read("virt-launcher-pod.json"))));
}

TEST(KubeVirtNode, Quantities) {
  EXPECT_EQ(parseQuantityCount("1k"), 1000);
  EXPECT_EQ(parseQuantityCount("0"), 0);
  EXPECT_EQ(parseQuantityCount("110"), 110);
  EXPECT_EQ(parseQuantityCount("2Ki"), 2048);
  EXPECT_EQ(parseQuantityCount("1e3"), 1000);
  EXPECT_EQ(parseQuantityCount("1.5k"), 1500);
  EXPECT_FALSE(parseQuantityCount("100m"));  // milli: not a whole count
  EXPECT_FALSE(parseQuantityCount(""));
  EXPECT_FALSE(parseQuantityCount("-1"));
  EXPECT_FALSE(parseQuantityCount("1.2.3"));
  EXPECT_FALSE(parseQuantityCount("1x"));
}

TEST(KubeVirtNode, AgreesOnAHealthyNode) {
  CheckResult r = evaluateKubeVirtNode(inputs(nodeView("node-kubevirt-healthy.json")));
  EXPECT_EQ(r.status, Status::Pass) << r.message;
  EXPECT_EQ(r.reason, "Agrees");
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_device_allocatable", "kvm", 1000));
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_device_capacity", "vhost-net", 1000));
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_heartbeat_age_seconds", "", 30));
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_handler_ready", "", 1));
}

TEST(KubeVirtNode, DeviceWorksButAllocatableZero) {
  // kubevirt/kubevirt#7614: capacity 1k, allocatable "0" for kvm.
  CheckResult r = evaluateKubeVirtNode(inputs(nodeView("node-kvm-allocatable-zero.json")));
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "DevicePluginUnhealthy");
  EXPECT_NE(r.message.find("offers 0 of capacity 1k devices.kubevirt.io/kvm"), std::string::npos)
      << r.message;
  EXPECT_NE(r.hint.find("restart virt-handler"), std::string::npos);
  // The same capture has no vhost-net resource at all: a plugin that never registered.
  EXPECT_NE(r.message.find("offers no devices.kubevirt.io/vhost-net"), std::string::npos);
}

TEST(KubeVirtNode, DevicePluginNeverRegistered) {
  auto v = nodeView("node-kubevirt-healthy.json");
  v.capacity.erase("kvm");
  v.allocatable.erase("kvm");
  CheckResult r = evaluateKubeVirtNode(inputs(v));
  EXPECT_EQ(r.reason, "DevicePluginNotRegistered");
}

TEST(KubeVirtNode, AdvertisedButNoGuestCanRun) {
  auto in = inputs(nodeView("node-kubevirt-healthy.json"));
  in.devices["kvm-device"] = device("kvm-device", Status::Fail, "kvm", "false");
  in.devices["kvm-device"].reason = "CreateVmFailed";
  CheckResult r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "DeviceAdvertisedButUnusable");
  EXPECT_NE(
      r.message.find(
          "KubeVirt offers 1000 devices.kubevirt.io/kvm but kvm-device is FAIL (CreateVmFailed)"),
      std::string::npos)
      << r.message;
  EXPECT_EQ(r.hint, "fix it");
  // vhost-net missing while KubeVirt offers it is only a WARN (QEMU falls back).
  in = inputs(nodeView("node-kubevirt-healthy.json"));
  in.devices["vhost-net"] = device("vhost-net", Status::Warn, "vhost-net", "false");
  r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "DeviceAdvertisedButUnusable");
}

TEST(KubeVirtNode, BothSayNoIsAgreement) {
  // kubevirt/kubevirt#7614 "hardware": KubeVirt offers none, and nodegate finds none.
  auto in = inputs(nodeView("node-kubevirt-devices-zero.json"));
  in.devices["kvm-device"] = device("kvm-device", Status::Fail, "kvm", "false");
  in.devices["tun"] = device("tun", Status::Fail, "tun", "false");
  in.devices["vhost-net"] = device("vhost-net", Status::Warn, "vhost-net", "false");
  CheckResult r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.status, Status::Pass) << r.message;
}

TEST(KubeVirtNode, UnknownDeviceVerdictIsNotCompared) {
  auto in = inputs(nodeView("node-kvm-allocatable-zero.json"));
  in.devices["kvm-device"] = device("kvm-device", Status::Unknown, "kvm", "false");
  in.devices.erase("vhost-net");
  CheckResult r = evaluateKubeVirtNode(in);
  // Not compared is not agreement: no PASS without nodegate's own verdict on every device.
  EXPECT_EQ(r.status, Status::Unknown) << r.message;
  EXPECT_EQ(r.reason, "DeviceNotCompared");
  EXPECT_NE(r.message.find("kvm-device is UNKNOWN"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("vhost-net has not run"), std::string::npos) << r.message;
  bool noted = false;
  for (const auto& e : r.evidence) noted = noted || e.observed == "UNKNOWN: not compared";
  EXPECT_TRUE(noted);
}

TEST(KubeVirtNode, HeartbeatStaleAndMarkedUnschedulable) {
  auto v = nodeView("node-kubevirt-healthy.json", 400s);
  v.schedulable = "false";
  CheckResult r = evaluateKubeVirtNode(inputs(v));
  EXPECT_EQ(r.status, Status::Fail);
  EXPECT_EQ(r.reason, "HeartbeatStale");
  EXPECT_NE(r.message.find("virt-controller did: the heartbeat is stale"), std::string::npos);
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_heartbeat_age_seconds", "", 400));
  // Fresh heartbeat, still false: virt-handler's own mark (device plugins not initialised).
  v = nodeView("node-kubevirt-healthy.json");
  v.schedulable = "false";
  r = evaluateKubeVirtNode(inputs(v));
  EXPECT_EQ(r.reason, "MarkedUnschedulable");
  EXPECT_NE(r.message.find("device plugins are initialised"), std::string::npos);
  v.schedulable.reset();
  EXPECT_EQ(evaluateKubeVirtNode(inputs(v)).reason, "NotMarkedSchedulable");
  // A stale threshold is a setting.
  auto in = inputs(nodeView("node-kubevirt-healthy.json", 100s));
  in.heartbeat_stale = 60s;
  EXPECT_EQ(evaluateKubeVirtNode(in).reason, "HeartbeatStale");
}

TEST(KubeVirtNode, HeartbeatMissingOrUnreadable) {
  auto v = nodeView("node-kubevirt-healthy.json");
  v.heartbeat.reset();
  CheckResult r = evaluateKubeVirtNode(inputs(v));
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "HeartbeatMissing");
  v.heartbeat = "yesterday";
  EXPECT_EQ(evaluateKubeVirtNode(inputs(v)).reason, "HeartbeatUnreadable");
  // Found by the fuzzer: a year system_clock cannot hold is unreadable, not an overflow.
  v.heartbeat = "9999999-01-01T00:00:00Z";
  EXPECT_EQ(evaluateKubeVirtNode(inputs(v)).reason, "HeartbeatUnreadable");
  v.heartbeat = "2026-13-01T00:00:00Z";
  EXPECT_EQ(evaluateKubeVirtNode(inputs(v)).reason, "HeartbeatUnreadable");
}

TEST(KubeVirtNode, VirtHandlerMissingOrNotReady) {
  auto in = inputs(nodeView("node-kubevirt-healthy.json"), false);
  CheckResult r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.reason, "VirtHandlerNotReady");
  EXPECT_TRUE(hasMetric(r, "nodegate_kubevirt_handler_ready", "", 0));
  bool detail = false;
  for (const auto& e : r.evidence)
    detail = detail || e.observed.find("ContainersNotReady") != std::string::npos;
  EXPECT_TRUE(detail);
  in.facts.handlers.clear();
  EXPECT_EQ(evaluateKubeVirtNode(in).reason, "VirtHandlerMissing");
  // Without the pod view nothing is said about virt-handler but UNKNOWN.
  in.facts.pods_complete = false;
  in.facts.pods_error = "HTTP 403: pods is forbidden";
  r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "PodViewIncomplete");
}

TEST(KubeVirtNode, NotInstalledStaysOut) {
  json n = json::parse(read("node-kubevirt-healthy.json"));
  n["metadata"]["labels"].erase("kubevirt.io/schedulable");
  n["metadata"]["annotations"].erase("kubevirt.io/heartbeat");
  for (const char* f : {"capacity", "allocatable"})
    for (const char* d : {"kvm", "tun", "vhost-net"})
      n["status"][f].erase(std::string("devices.kubevirt.io/") + d);
  KubeVirtNodeInputs in;
  in.facts.node = kubevirtNodeView(n);
  in.facts.pods_complete = true;
  in.devices = allWork();
  in.now = kNow;
  CheckResult r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.status, Status::Pass);
  EXPECT_EQ(r.reason, "KubeVirtNotInstalled");
  // Not knowing the pods, "not installed" cannot be established.
  in.facts.pods_complete = false;
  EXPECT_EQ(evaluateKubeVirtNode(in).status, Status::Unknown);
  // No Node yet.
  in.facts.node.reset();
  in.facts.node_error = "HTTP 401";
  r = evaluateKubeVirtNode(in);
  EXPECT_EQ(r.reason, "NodeNotRead");
  EXPECT_NE(r.message.find("HTTP 401"), std::string::npos);
}

// The probe around the evaluator: no source is UNKNOWN/NoApiConnection (never PASS); with one,
// the device verdicts it compares are the ones the runner hands over (ctx.read), and the
// heartbeat bound is the setting's.
class FixedSource final : public KubeVirtSource {
 public:
  explicit FixedSource(KubeVirtFacts f) : f_(std::move(f)) {}
  KubeVirtFacts facts() override { return f_; }

 private:
  KubeVirtFacts f_;
};

TEST(KubeVirtNode, ProbeWithoutApiIsUnknownAndReadsTheRunnersDeviceResults) {
  HostRoot host("/nonexistent");
  Config cfg;
  ProbeContext bare{host, cfg};
  CheckResult r = KubeVirtNodeProbe(nullptr).run(bare);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "NoApiConnection");

  // The captured node with its heartbeat fresh now: the probe uses the real clock.
  json n = json::parse(read("node-kvm-allocatable-zero.json"));
  n["metadata"]["annotations"]["kubevirt.io/heartbeat"] =
      stamp(std::chrono::system_clock::now() - 10s);
  KubeVirtNodeInputs in = inputs(kubevirtNodeView(n));
  KubeVirtNodeProbe probe(std::make_shared<FixedSource>(in.facts));
  // No device results handed over: nothing to compare, nothing claimed about the devices.
  r = probe.run(bare);
  EXPECT_NE(r.reason, "DevicePluginUnhealthy");
  // kvm works (the runner's kvm-device result): allocatable 0 is the plugin's doing.
  std::map<std::string, CheckResult> reads = allWork();
  ProbeContext ctx{host, cfg, &reads};
  r = probe.run(ctx);
  EXPECT_EQ(r.reason, "DevicePluginUnhealthy");
  // The same node with kvm broken: both say no, no disagreement about kvm.
  reads["kvm-device"] = device("kvm-device", Status::Fail, "kvm", "false");
  EXPECT_NE(probe.run(ctx).reason, "DevicePluginUnhealthy");

  // checks.kubevirt-node.heartbeat_stale_seconds bounds the heartbeat's age.
  n["metadata"]["annotations"]["kubevirt.io/heartbeat"] =
      stamp(std::chrono::system_clock::now() - 120s);
  in.facts.node = kubevirtNodeView(n);
  KubeVirtNodeProbe aged(std::make_shared<FixedSource>(in.facts));
  reads = allWork();
  EXPECT_EQ(aged.run(ctx).message.find("heartbeat is"), std::string::npos);  // 120 s < 300 s
  cfg.set(kKubeVirtNodeCheck, "heartbeat_stale_seconds", 60);
  EXPECT_NE(aged.run(ctx).message.find("virt-handler's heartbeat is 12"), std::string::npos);
}

}  // namespace
}  // namespace nodegate
