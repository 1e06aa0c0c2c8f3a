// The publisher against the fake API server over real TLS and HTTP: what lands on the Node,
// what does not get written, and recovery from each kind of fault.
#include <gtest/gtest.h>

#include <thread>

#include <filesystem>
#include <fstream>

#include <prometheus/registry.h>

#include "fake_api.h"
#include "kube/publisher.h"
#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using nodegate::testing::eventually;
using nodegate::testing::FakeApi;
using namespace std::chrono_literals;

CheckState check(const std::string& name, Status s, std::string reason = "Ok",
                 std::map<std::string, std::string> labels = {}) {
  CheckState c;
  c.result = makeResult(name, s, std::move(reason), name + " is " + std::string(toString(s)));
  c.result.labels = std::move(labels);
  return c;
}

Snapshot snapshot(bool kvm_ok) {
  Snapshot s;
  s.checks = {check("cpu-virt", Status::Pass, "Ok", {{"cpu-virt", "vmx"}}),
              check("kvm-device", kvm_ok ? Status::Pass : Status::Fail, kvm_ok ? "Ok" : "DeviceMissing",
                    {{"kvm", kvm_ok ? "true" : "false"}}),
              check("tun", Status::Pass, "Ok", {{"tun", "true"}}),
              check("kernel-modules", Status::Pass),
              check("time-sync", Status::Pass)};
  s.gate_open = kvm_ok;
  if (!kvm_ok) s.gate_blockers = {"kvm-device"};
  s.complete = true;
  return s;
}

class PublisherFake : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::getenv("NODEGATE_TEST_DEBUG")) log::setLevel(log::Level::Debug);
    api_ = new FakeApi("pub");
  }
  static void TearDownTestSuite() {
    delete api_;
    api_ = nullptr;
  }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    node_ = std::string("n-") + info->name();
    for (auto& ch : node_)
      ch = std::isalnum(static_cast<unsigned char>(ch))
               ? static_cast<char>(std::tolower(static_cast<unsigned char>(ch)))
               : '-';
    ASSERT_EQ(api_->call("POST", "/fake/nodes", {{"name", node_}}).code, 201);
    api_->clearFaults();
  }
  void TearDown() override { api_->clearFaults(); }

  PublisherOptions options(bool taint = false) {
    PublisherOptions o;
    o.publish.node_name = node_;
    o.publish.prefix = "nodegate.io";
    o.publish.gate_label = {"nodegate.io/vm-ready", "true"};
    o.publish.taint = taint;
    o.publish.required = {"cpu-virt", "kvm-device", "tun", "kernel-modules"};
    o.qps = 50;
    o.burst = 50;
    o.startup_jitter_s = 0;
    o.watch_timeout_s = 30;
    o.seed = 1;
    return o;
  }

  ClientConfig client(const std::string& kubeconfig = {}) {
    auto c = loadKubeconfig(kubeconfig.empty() ? api_->kubeconfig() : kubeconfig);
    EXPECT_TRUE(c) << c.error().message;
    return *c;
  }

  std::unique_ptr<Publisher> start(PublisherOptions o, ClientConfig c = {}) {
    if (c.server.empty()) c = client();
    return startPublisher(std::move(c), std::move(o), registry_);
  }

  json node() { return api_->node(node_); }
  std::string label(const std::string& key) {
    auto n = node();
    auto& l = n["metadata"]["labels"];
    return l.contains(key) ? l[key].get<std::string>() : "<absent>";
  }
  json condition(const std::string& type) {
    const json n = node();  // keep the Node alive: a range over node()[...] would dangle
    for (const auto& c : n["status"]["conditions"])
      if (c["type"] == type) return c;
    return nullptr;
  }
  bool hasTaint() {
    auto n = node();
    for (const auto& t : n["spec"].value("taints", json::array()))
      if (t["key"] == "nodegate.io/not-ready" && t["effect"] == "NoSchedule") return true;
    return false;
  }
  // Requests about this test's node (and its events) since `since`.
  std::vector<json> writes(long since) {
    std::vector<json> out;
    for (const auto& r : api_->requests(since)) {
      std::string p = r["path"];
      if (r["method"] != "GET" && (p.find("/nodes/" + node_) != std::string::npos ||
                                   (p.find("/events") != std::string::npos &&
                                    r["body"].is_object() && r["body"].dump().find(node_) != std::string::npos)))
        out.push_back(r);
    }
    return out;
  }
  std::vector<json> events() {
    std::vector<json> out;
    for (const auto& e : api_->events())
      if (e["regarding"]["name"] == node_) out.push_back(e);
    return out;
  }
  // The recent request log, for failure messages.
  std::string trace() {
    std::string out;
    auto reqs = api_->requests(std::max(0L, api_->lastSeq() - 40));
    for (const auto& r : reqs)
      out += std::to_string(r["time"].get<double>()) + " " + r["method"].get<std::string>() + " " +
             r["path"].get<std::string>() + " " + r["status"].dump() + "\n";
    return out;
  }
  double counter(const std::string& verb, const std::string& code) {
    for (const auto& f : registry_.Collect())
      if (f.name == "nodegate_kube_requests_total")
        for (const auto& m : f.metric) {
          std::map<std::string, std::string> l;
          for (const auto& p : m.label) l[p.name] = p.value;
          if (l["verb"] == verb && l["code"] == code) return m.counter.value;
        }
    return 0;
  }
  bool converged(bool kvm_ok, bool taint) {
    auto c = condition("VirtualizationReady");
    return label("nodegate.io/vm-ready") == (kvm_ok ? "true" : "<absent>") &&
           label("nodegate.io/kvm") == (kvm_ok ? "true" : "false") && !c.is_null() &&
           c["status"] == (kvm_ok ? "True" : "False") && hasTaint() == taint;
  }

  static FakeApi* api_;
  std::string node_;
  prometheus::Registry registry_;
};

FakeApi* PublisherFake::api_ = nullptr;

TEST_F(PublisherFake, WritesLabelsConditionsAndOwnership) {
  auto pub = start(options());
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); })) << node().dump(1) << trace();
  EXPECT_EQ(label("nodegate.io/cpu-virt"), "vmx");
  EXPECT_EQ(label("kubernetes.io/hostname"), node_);  // the kubelet's labels are untouched
  std::string owned = node()["metadata"]["annotations"]["nodegate.io/owned-labels"];
  EXPECT_EQ(owned, "nodegate.io/cpu-virt,nodegate.io/kvm,nodegate.io/tun,nodegate.io/vm-ready");
  ASSERT_FALSE(condition("TimeSynchronized").is_null());
  EXPECT_TRUE(condition("LocalStorageHealthy").is_null());  // no lvm/local-pv probe here
  EXPECT_EQ(condition("Ready")["reason"], "KubeletReady");  // merged by type, not replaced
  EXPECT_TRUE(events().empty());  // a healthy first report is not an event
  EXPECT_GT(counter("patch", "200"), 0);
  EXPECT_GT(counter("get", "200"), 0);
}

TEST_F(PublisherFake, IncompleteSnapshotWritesNothing) {
  auto pub = start(options());
  long since = api_->lastSeq();
  auto s = snapshot(false);
  s.complete = false;
  pub->publish(s);
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(writes(since).empty());
}

TEST_F(PublisherFake, FlipClosesGateTaintsAndPostsOneEvent) {
  auto pub = start(options(true));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  std::string t0 = condition("VirtualizationReady")["lastTransitionTime"];
  std::this_thread::sleep_for(1100ms);  // transition times have second precision

  pub->publish(snapshot(false));
  ASSERT_TRUE(eventually([&] { return converged(false, true) && events().size() == 1; })) << node().dump(1);
  auto c = condition("VirtualizationReady");
  EXPECT_EQ(c["reason"], "DeviceMissing");
  EXPECT_NE(c["lastTransitionTime"], t0);
  EXPECT_EQ(condition("TimeSynchronized")["lastTransitionTime"] <= c["lastTransitionTime"], true);
  auto ev = events();
  EXPECT_EQ(ev[0]["type"], "Warning");
  EXPECT_EQ(ev[0]["reason"], "DeviceMissing");
  EXPECT_EQ(ev[0]["regarding"]["uid"], node()["metadata"]["uid"]);
  // Publishing the same closed state again changes nothing and posts nothing.
  long since = api_->lastSeq();
  for (int i = 0; i < 5; ++i) pub->publish(snapshot(false));
  std::this_thread::sleep_for(1000ms);
  EXPECT_TRUE(writes(since).empty());
  EXPECT_EQ(events().size(), 1u);

  // Back to healthy: taint and closed-gate state go, one Normal event.
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false) && events().size() == 2; }));
  // Failing again repeats the first transition: folded into its series, not a third event.
  pub->publish(snapshot(false));
  ASSERT_TRUE(eventually([&] {
    auto e = events();
    for (const auto& x : e)
      if (x["reason"] == "DeviceMissing" && x.contains("series") && x["series"]["count"] == 2) return true;
    return false;
  })) << json(events()).dump(1);
  EXPECT_EQ(events().size(), 2u);
}

TEST_F(PublisherFake, ForeignLabelsSurviveAndStaleOwnedOnesGo) {
  ASSERT_EQ(api_->call("PATCH", "/api/v1/nodes/" + node_,
                       {{"metadata",
                         {{"labels", {{"nodegate.io/custom", "mine"}, {"team.io/x", "y"}, {"nodegate.io/old", "1"}}},
                          {"annotations", {{"nodegate.io/owned-labels", "nodegate.io/old"}}}}}},
                       "application/merge-patch+json")
                .code,
            200);
  auto pub = start(options());
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false) && label("nodegate.io/old") == "<absent>"; }));
  EXPECT_EQ(label("nodegate.io/custom"), "mine");
  EXPECT_EQ(label("team.io/x"), "y");
}

TEST_F(PublisherFake, ReassertsWhatOthersRemove) {
  auto pub = start(options(true));
  pub->publish(snapshot(false));
  ASSERT_TRUE(eventually([&] { return converged(false, true); }));
  // Someone removes our taint (JSON patch with a resourceVersion test, as careful clients do).
  // A careful client retries on 409: the publisher may still be settling its own writes.
  int code = 0;
  for (int attempt = 0; attempt < 10 && code != 200; ++attempt) {
    auto n = node();
    code = api_->call("PATCH", "/api/v1/nodes/" + node_,
                      json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"},
                                    {"value", n["metadata"]["resourceVersion"]}},
                                   {{"op", "remove"}, {"path", "/spec/taints"}}}),
                      "application/json-patch+json")
               .code;
    if (code == 409) std::this_thread::sleep_for(100ms);
  }
  // 200 on a resourceVersion-guarded remove proves the taint was gone; the publisher may put it
  // back before we could look, so only its return is asserted.
  ASSERT_EQ(code, 200);
  EXPECT_TRUE(eventually([&] { return hasTaint(); }, 3s));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  ASSERT_EQ(api_->call("PATCH", "/api/v1/nodes/" + node_, {{"metadata", {{"labels", {{"nodegate.io/vm-ready", nullptr}}}}}},
                       "application/merge-patch+json")
                .code,
            200);
  EXPECT_TRUE(eventually([&] { return label("nodegate.io/vm-ready") == "true"; }, 3s));
}

TEST_F(PublisherFake, RestartWithSameStateWritesNothing) {
  {
    auto pub = start(options(true));
    pub->publish(snapshot(false));
    ASSERT_TRUE(eventually([&] { return converged(false, true) && events().size() == 1; }));
  }
  // Shutdown wrote nothing either: the gate state is still there.
  EXPECT_TRUE(converged(false, true));
  long since = api_->lastSeq();
  auto pub = start(options(true));
  pub->publish(snapshot(false));
  std::this_thread::sleep_for(2s);
  EXPECT_TRUE(writes(since).empty()) << json(writes(since)).dump(1);
  EXPECT_EQ(events().size(), 1u);
}

TEST_F(PublisherFake, HeartbeatRewritesConditionsOnlyWhenDue) {
  auto o = options();
  o.heartbeat = 2s;
  auto pub = start(o);
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  std::string hb = condition("VirtualizationReady")["lastHeartbeatTime"];
  std::string tt = condition("VirtualizationReady")["lastTransitionTime"];
  long since = api_->lastSeq();
  ASSERT_TRUE(eventually([&] { return condition("VirtualizationReady")["lastHeartbeatTime"] != hb; }, 6s));
  EXPECT_EQ(condition("VirtualizationReady")["lastTransitionTime"], tt);
  for (const auto& w : writes(since)) EXPECT_NE(w["path"].get<std::string>().find("/status"), std::string::npos) << w.dump();
}

// Each fault, injected on the first write after a change, must leave the Node right once it clears.
struct FaultCase {
  const char* name;
  json fault;
};

class PublisherFaults : public PublisherFake, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(PublisherFaults, NodeConvergesAfterFault) {
  auto pub = start(options(true));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  json f = GetParam().fault;
  f["path_re"] = "/nodes/" + node_;
  f["method"] = "PATCH";
  if (!f.contains("count")) f["count"] = 2;
  api_->fault(f);
  long since = api_->lastSeq();
  pub->publish(snapshot(false));
  ASSERT_TRUE(eventually([&] { return converged(false, true); }, 20s)) << GetParam().name << node().dump(1);
  EXPECT_TRUE(eventually([&] { return events().size() == 1; }, 5s));
  auto reqs = api_->requests(since);
  int hits = 0;
  const json faults = api_->call("GET", "/fake/faults").body;
  for (const auto& x : faults["faults"]) hits += x.value("hits", 0);
  EXPECT_GE(hits, 1) << GetParam().name << ": the fault never fired";
  if (f.contains("retry_after")) {
    // The retry of a 429/503 waits for Retry-After.
    double first_fail = 0, next_patch = 0;
    for (const auto& r : reqs) {
      if (r["method"] != "PATCH") continue;
      if (first_fail == 0 && r["status"] == f["status"]) first_fail = r["time"];
      else if (first_fail > 0 && next_patch == 0) next_patch = r["time"];
    }
    EXPECT_GE(next_patch - first_fail, f["retry_after"].get<double>() * 0.9);
    EXPECT_GT(counter("patch", std::to_string(f["status"].get<int>())), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PublisherFaults,
    ::testing::Values(FaultCase{"forbidden", {{"status", 403}}}, FaultCase{"notfound", {{"status", 404}}},
                      FaultCase{"conflict", {{"status", 409}}},
                      FaultCase{"toomany", {{"status", 429}, {"retry_after", 1}}},
                      FaultCase{"internal", {{"status", 500}}},
                      FaultCase{"unavailable", {{"status", 503}, {"retry_after", 1}, {"count", 1}}},
                      FaultCase{"slow", {{"delay", 2}, {"count", 1}}},
                      FaultCase{"dropped", {{"drop", true}}},
                      FaultCase{"unauthorized", {{"status", 401}, {"count", 1}}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(PublisherFake, RotatedTokenIsReadAgainOn401) {
  std::string tok = (api_->dir() / ("tok-" + node_)).string();
  std::ofstream(tok) << "rot-1\n";
  api_->call("POST", "/fake/tokens", {{"token", "rot-1"}});
  auto kc = api_->writeKubeconfig("kc-" + node_, "tokenFile: " + tok);
  auto pub = start(options(), client(kc));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  // Rotate: the old token expires, the file holds the new one.
  std::ofstream(tok) << "rot-2\n";
  api_->call("POST", "/fake/tokens", {{"token", "rot-2"}});
  api_->call("POST", "/fake/tokens", {{"token", "rot-1"}, {"expires_in", 0}});
  long since = api_->lastSeq();
  pub->publish(snapshot(false));
  ASSERT_TRUE(eventually([&] { return converged(false, false); }));
  bool saw401 = false;
  for (const auto& r : api_->requests(since)) {
    if (r["status"] == 401) saw401 = true;
    if (r["status"] == 200 && r["method"] == "PATCH") {
      EXPECT_EQ(r["user"], "token:rot-2");
    }
  }
  EXPECT_TRUE(saw401);
  EXPECT_GT(counter("patch", "401"), 0);
}

TEST_F(PublisherFake, ClientCertificateAuth) {
  auto kc = api_->writeKubeconfig("kc-cert", "client-certificate: tls/client.crt\nclient-key: tls/client.key");
  auto pub = start(options(), client(kc));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  bool by_cert = false;
  for (const auto& r : api_->requests())
    if (r["method"] == "PATCH" && r["path"] == "/api/v1/nodes/" + node_ && r["user"] == "cert:system:node:test")
      by_cert = true;
  EXPECT_TRUE(by_cert);
}

TEST_F(PublisherFake, WatchRecoversFromCompactionAndDrops) {
  auto pub = start(options());
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  long since = api_->lastSeq();
  api_->call("POST", "/fake/compact");
  api_->call("POST", "/fake/drop-watches");
  // After the drop the watch resumes from a compacted version: 410, then a fresh GET.
  ASSERT_TRUE(eventually([&] {
    for (const auto& r : api_->requests(since))
      if (r["method"] == "GET" && r["path"] == "/api/v1/nodes/" + node_) return true;
    return false;
  }, 10s));
  ASSERT_EQ(api_->call("PATCH", "/api/v1/nodes/" + node_, {{"metadata", {{"labels", {{"nodegate.io/kvm", "tampered"}}}}}},
                       "application/merge-patch+json")
                .code,
            200);
  EXPECT_TRUE(eventually([&] { return label("nodegate.io/kvm") == "true"; }, 5s));
}

TEST_F(PublisherFake, InClusterConfig) {
  auto sa = api_->dir() / ("sa-" + node_);
  std::filesystem::create_directories(sa);
  std::ofstream(sa / "token") << "incluster-tok";
  std::filesystem::copy_file(api_->caFile(), sa / "ca.crt");
  api_->call("POST", "/fake/tokens", {{"token", "incluster-tok"}});
  ::setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", api_->server().substr(api_->server().rfind(':') + 1).c_str(), 1);
  auto c = loadInCluster(sa.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(c) << c.error().message;
  auto pub = start(options(), *c);
  pub->publish(snapshot(true));
  EXPECT_TRUE(eventually([&] { return converged(true, false); }));
}

}  // namespace
}  // namespace nodegate::kube
