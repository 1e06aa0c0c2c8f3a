// The publisher against the fake API server over real TLS and HTTP: what lands on the Node,
// what does not get written, recovery from each kind of fault, CA rotation, stale watch
// events, and the read-only DNS facts (Cilium's ConfigMap, CoreDNS's EndpointSlices).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <prometheus/registry.h>

#include "fake_api.h"
#include "kube/cluster_dns.h"
#include "kube/kubeconfig.h"
#include "kube/kubevirt_facts.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/log.h"
#include "publish/kube/publisher.h"

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
              check("kvm-device", kvm_ok ? Status::Pass : Status::Fail,
                    kvm_ok ? "Ok" : "DeviceMissing", {{"kvm", kvm_ok ? "true" : "false"}}),
              check("tun", Status::Pass, "Ok", {{"tun", "true"}}),
              check("kernel-modules", Status::Pass), check("time-sync", Status::Pass)};
  s.gate_open = kvm_ok;
  if (!kvm_ok) s.gate_blockers = {"kvm-device"};
  s.complete = true;
  return s;
}

// One fake API server for the whole binary (ctest runs the binary once, see CMakeLists.txt):
// starting one costs seconds of Python and openssl, and every case resets it instead.
class FakeApiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("NODEGATE_TEST_DEBUG")) log::setLevel(log::Level::Debug);
    api = std::make_unique<FakeApi>("pub", "node-a", "19200-19299");  // this suite's ports
  }
  void TearDown() override { api.reset(); }
  static inline std::unique_ptr<FakeApi> api;
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new FakeApiEnvironment);

class PublisherFake : public ::testing::Test {
 protected:
  void SetUp() override {
    api_ = FakeApiEnvironment::api.get();
    ASSERT_NE(api_, nullptr);
    api_->reset();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    node_ = std::string("n-") + info->name();
    for (auto& ch : node_)
      ch = std::isalnum(static_cast<unsigned char>(ch))
               ? static_cast<char>(std::tolower(static_cast<unsigned char>(ch)))
               : '-';
    ASSERT_EQ(api_->call("POST", "/fake/nodes", {{"name", node_}}).code, 201);
  }

  PublisherOptions options(bool taint = false) {
    PublisherOptions o;
    o.publish.node_name = node_;
    o.publish.prefix = "nodegate.io";
    o.publish.gate_label = {"nodegate.io/vm-ready", "true"};
    o.publish.taint = taint;
    o.publish.required = {"cpu-virt", "kvm-device", "tun", "kernel-modules"};
    o.startup_jitter_s = 0;
    o.watch_timeout_s = 30;
    o.seed = 1;
    // The plumbing cases do not wait out the full release delay; its own cases (and the e2e
    // tests) do.
    o.release_delay = std::chrono::seconds(1);
    return o;
  }

  ClientConfig client(const std::string& kubeconfig = {}) {
    auto c = loadKubeconfig(kubeconfig.empty() ? api_->kubeconfig() : kubeconfig);
    EXPECT_TRUE(c) << c.error().message;
    return *c;
  }

  std::shared_ptr<Connection> connection(ClientConfig c = {}) {
    if (c.server.empty()) c = client();
    return std::make_shared<Connection>(std::move(c), ConnectionSettings{50, 50}, registry_);
  }
  std::unique_ptr<Publisher> start(PublisherOptions o, ClientConfig c = {}) {
    auto conn = connection(std::move(c));
    PodSourceOptions po;
    po.node_name = o.publish.node_name;
    po.seed = 1;
    return startPublisher(conn, std::move(o), std::make_shared<PodSource>(conn, po));
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
      if (r["method"] != "GET" &&
          (p.find("/nodes/" + node_) != std::string::npos ||
           (p.find("/events") != std::string::npos && r["body"].is_object() &&
            r["body"].dump().find(node_) != std::string::npos)))
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

  FakeApi* api_ = nullptr;
  std::string node_;
  prometheus::Registry registry_;
};

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
  ASSERT_TRUE(eventually([&] { return converged(false, true) && events().size() == 1; }))
      << node().dump(1);
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
      if (x["reason"] == "DeviceMissing" && x.contains("series") && x["series"]["count"] == 2)
        return true;
    return false;
  })) << json(events()).dump(1);
  EXPECT_EQ(events().size(), 2u);
}

TEST_F(PublisherFake, ForeignLabelsSurviveAndStaleOwnedOnesGo) {
  ASSERT_EQ(
      api_->call(
              "PATCH", "/api/v1/nodes/" + node_,
              {{"metadata",
                {{"labels",
                  {{"nodegate.io/custom", "mine"}, {"team.io/x", "y"}, {"nodegate.io/old", "1"}}},
                 {"annotations", {{"nodegate.io/owned-labels", "nodegate.io/old"}}}}}},
              "application/merge-patch+json")
          .code,
      200);
  auto pub = start(options());
  pub->publish(snapshot(true));
  ASSERT_TRUE(
      eventually([&] { return converged(true, false) && label("nodegate.io/old") == "<absent>"; }));
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
                      json::array({{{"op", "test"},
                                    {"path", "/metadata/resourceVersion"},
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
  ASSERT_EQ(api_->call("PATCH", "/api/v1/nodes/" + node_,
                       {{"metadata", {{"labels", {{"nodegate.io/vm-ready", nullptr}}}}}},
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
  ASSERT_TRUE(
      eventually([&] { return condition("VirtualizationReady")["lastHeartbeatTime"] != hb; }, 6s));
  EXPECT_EQ(condition("VirtualizationReady")["lastTransitionTime"], tt);
  for (const auto& w : writes(since))
    EXPECT_NE(w["path"].get<std::string>().find("/status"), std::string::npos) << w.dump();
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
  ASSERT_TRUE(eventually([&] { return converged(false, true); }, 20s))
      << GetParam().name << node().dump(1);
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
      if (first_fail == 0 && r["status"] == f["status"])
        first_fail = r["time"];
      else if (first_fail > 0 && next_patch == 0)
        next_patch = r["time"];
    }
    EXPECT_GE(next_patch - first_fail, f["retry_after"].get<double>() * 0.9);
    EXPECT_GT(counter("patch", std::to_string(f["status"].get<int>())), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PublisherFaults,
    ::testing::Values(FaultCase{"forbidden", {{"status", 403}}},
                      FaultCase{"notfound", {{"status", 404}}},
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
  auto kc = api_->writeKubeconfig("kc-cert",
                                  "client-certificate: tls/client.crt\nclient-key: tls/client.key");
  auto pub = start(options(), client(kc));
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  bool by_cert = false;
  for (const auto& r : api_->requests())
    if (r["method"] == "PATCH" && r["path"] == "/api/v1/nodes/" + node_ &&
        r["user"] == "cert:system:node:test")
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
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& r : api_->requests(since))
          if (r["method"] == "GET" && r["path"] == "/api/v1/nodes/" + node_) return true;
        return false;
      },
      10s));
  ASSERT_EQ(api_->call("PATCH", "/api/v1/nodes/" + node_,
                       {{"metadata", {{"labels", {{"nodegate.io/kvm", "tampered"}}}}}},
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
  ::setenv("KUBERNETES_SERVICE_PORT", api_->server().substr(api_->server().rfind(':') + 1).c_str(),
           1);
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

namespace nodegate::kube {
namespace {

// --- CA rotation: the CA file is reloaded when it changes, garbage in it is refused ----------

class CaRotation : public PublisherFake {
 protected:
  void SetUp() override {
    PublisherFake::SetUp();
    ca_ = api_->dir() / ("ca-" + node_ + ".crt");
    std::filesystem::copy_file(api_->caFile(), ca_,
                               std::filesystem::copy_options::overwrite_existing);
    ClientConfig c = client();
    c.ca_file = ca_.string();
    c.ca_pem.clear();
    conn_ = std::make_shared<Connection>(c, ConnectionSettings{100, 100}, registry_);
    http_ = std::make_unique<ApiClient>(*conn_, stop_);
  }
  Credentials& creds() { return conn_->credentials(); }
  // As the kubelet updates a projected volume: the new content appears at once, never half.
  void replaceCa(const std::string& content) {
    auto tmp = ca_.string() + ".tmp";
    std::ofstream(tmp) << content;
    std::filesystem::rename(tmp, ca_);
  }
  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  HttpResponse get() { return http_->request("get", "GET", "/api/v1/nodes/" + node_); }
  std::filesystem::path rotated() { return api_->dir() / ("tls-" + node_); }

  std::filesystem::path ca_;
  Stopper stop_;
  std::shared_ptr<Connection> conn_;
  std::unique_ptr<ApiClient> http_;
};

TEST_F(CaRotation, NewCaFileIsUsedWithoutRestart) {
  ASSERT_EQ(get().code, 200) << get().error;
  api_->rotateTls(rotated());
  // The server now presents a certificate from a CA the client does not know yet.
  auto r = get();
  EXPECT_EQ(r.code, 0);
  EXPECT_FALSE(r.error.empty());
  replaceCa(slurp(rotated() / "ca.crt"));
  r = get();
  EXPECT_EQ(r.code, 200) << r.error;
  EXPECT_EQ(creds().caError(), "");
}

TEST_F(CaRotation, GarbageCaFileKeepsTheOldCaUntilItFails) {
  ASSERT_EQ(get().code, 200);
  replaceCa("-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n");
  // The old CA still verifies the server: nothing breaks, but the error is there to see.
  auto r = get();
  EXPECT_EQ(r.code, 200) << r.error;
  EXPECT_NE(creds().caError().find("failed to load kubernetes ca " + ca_.string()),
            std::string::npos)
      << creds().caError();
  EXPECT_NE(creds().caError().find("not valid base64 DER"), std::string::npos) << creds().caError();
  // Once the server moves to the new CA, the failure names the refused file.
  api_->rotateTls(rotated());
  r = get();
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.error.find("failed to load kubernetes ca"), std::string::npos) << r.error;
  // A proper bundle fixes it, still without a restart.
  replaceCa(slurp(rotated() / "ca.crt"));
  r = get();
  EXPECT_EQ(r.code, 200) << r.error;
}

TEST_F(CaRotation, GarbageCaFileAtStartIsAClearErrorNotTheSystemCas) {
  replaceCa("this is not a certificate\n");
  Connection fresh(conn_->config(), ConnectionSettings{100, 100}, registry_);
  ApiClient http(fresh, stop_);
  auto r = http.request("get", "GET", "/api/v1/nodes/" + node_);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.error.find("no PEM certificate"), std::string::npos) << r.error;
  EXPECT_GT(counter("get", "error"), 0);
}

// --- stale conditions: $patch delete, end to end, read back with kubectl -----------------------

std::string kubectlPath() {
  for (const char* p : {"/usr/local/bin/kubectl", "/usr/bin/kubectl"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

// kubevirt-node's board over the real pod source: a pod watch that breaks is not news about
// virt-handler for a moment, so the board keeps the last complete view (and says so) instead of
// flipping the check to PodViewIncomplete at every dropped connection.
TEST_F(PublisherFake, KubeVirtFactsKeepTheLastCompletePodViewThroughABrokenWatch) {
  auto conn = connection();
  PodSourceOptions po;
  po.node_name = node_;
  po.seed = 1;
  po.watch_timeout_s = 30;
  auto pods = std::make_shared<PodSource>(conn, po);
  KubeVirtFactsBoard board(pods);
  ASSERT_TRUE(eventually([&] { return board.facts().pods_complete; }, 10s));
  EXPECT_FALSE(board.facts().pods_stale);

  // Every pod request fails from now on: the watch breaks and the relists fail.
  api_->fault({{"status", 500}, {"path_re", "^/api/v1/pods"}, {"count", -1}});
  api_->call("POST", "/fake/drop-watches");
  ASSERT_TRUE(eventually([&] { return !pods->handlers().complete; }, 10s));
  KubeVirtFacts f = board.facts();
  EXPECT_TRUE(f.pods_complete);  // within KubeVirtFactsBoard::kPodViewGrace
  EXPECT_TRUE(f.pods_stale);
  EXPECT_FALSE(f.pods_error.empty());
  api_->clearFaults();
}

TEST_F(PublisherFake, StaleConditionIsDeletedAndOthersStay) {
  const std::string kubectl = kubectlPath();
  if (kubectl.empty()) GTEST_SKIP() << "kubectl not installed (tools/install-deps.sh installs it)";
  auto with_storage = snapshot(true);
  with_storage.checks.push_back(check("lvm", Status::Pass));
  auto pub = start(options());
  pub->publish(with_storage);
  ASSERT_TRUE(eventually(
      [&] { return converged(true, false) && !condition("LocalStorageHealthy").is_null(); }));
  const json ready = condition("Ready");
  const json virt = condition("VirtualizationReady");
  long since = api_->lastSeq();
  // The lvm probe is gone (say, removed from the config): its condition must go with it.
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] { return condition("LocalStorageHealthy").is_null(); }))
      << node().dump(1);
  bool sent_delete = false;
  for (const auto& w : writes(since))
    if (w["path"] == "/api/v1/nodes/" + node_ + "/status" &&
        w["content_type"] == "application/strategic-merge-patch+json" &&
        w["body"].dump().find(R"({"$patch":"delete","type":"LocalStorageHealthy"})") !=
            std::string::npos)
      sent_delete = true;
  EXPECT_TRUE(sent_delete) << json(writes(since)).dump(1);

  // Read back with the real client.
  std::string cmd = "KUBECONFIG=" + api_->kubeconfig() + " HOME=" + api_->dir().string() + " " +
                    kubectl + " get node " + node_ + " -o json 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    ASSERT_EQ(::pclose(f), 0) << out;
  }
  json seen = json::parse(out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << out;
  std::map<std::string, json> by_type;
  for (const auto& c : seen["status"]["conditions"]) by_type[c["type"]] = c;
  EXPECT_EQ(by_type.count("LocalStorageHealthy"), 0u);
  ASSERT_EQ(by_type.count("Ready"), 1u);
  EXPECT_EQ(by_type["Ready"], ready);  // the kubelet's condition, byte for byte
  ASSERT_EQ(by_type.count("VirtualizationReady"), 1u);
  EXPECT_EQ(by_type["VirtualizationReady"]["lastTransitionTime"], virt["lastTransitionTime"]);
  EXPECT_EQ(by_type.count("TimeSynchronized"), 1u);
}

// --- stale watch events never cause a write ----------------------------------------------------

TEST_F(PublisherFake, StaleWatchEventsCauseNoWrite) {
  const json before = node();  // the Node as it was before any write of ours
  long since = api_->lastSeq();
  // Hold the first status write for a moment, so the stale event lands in the middle of the
  // publisher's first write, after its label patch.
  api_->fault({{"method", "PATCH"},
               {"path_re", "/nodes/" + node_ + "/status$"},
               {"delay", 1},
               {"count", 1}});
  auto pub = start(options());
  pub->publish(snapshot(true));
  ASSERT_TRUE(eventually([&] {
    for (const auto& w : writes(since))
      if (w["path"] == "/api/v1/nodes/" + node_) return true;
    return false;
  }));
  auto inject = [&](const json& obj) {
    ASSERT_EQ(api_->call("POST", "/fake/watch-events",
                         {{"node", node_}, {"type", "MODIFIED"}, {"object", obj}})
                  .code,
              200);
  };
  inject(before);
  ASSERT_TRUE(eventually([&] { return converged(true, false); }));
  // And once more after everything settled: an old copy, then the label-only intermediate.
  std::this_thread::sleep_for(300ms);
  json labelled = node();
  labelled["status"] = before["status"];
  labelled["metadata"]["resourceVersion"] =
      std::to_string(std::stoll(labelled["metadata"]["resourceVersion"].get<std::string>()) - 1);
  inject(before);
  inject(labelled);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(api_->call("GET", "/fake/watch-events").body["pending"], 0)
      << "the stale events never reached the watch";
  int node_patches = 0, status_patches = 0;
  for (const auto& w : writes(since)) {
    if (w["method"] != "PATCH") continue;
    (w["path"] == "/api/v1/nodes/" + node_ ? node_patches : status_patches)++;
  }
  EXPECT_EQ(node_patches, 1) << json(writes(since)).dump(1);
  EXPECT_EQ(status_patches, 1) << json(writes(since)).dump(1);
}

}  // namespace
}  // namespace nodegate::kube

namespace nodegate::kube {
namespace {

// --- Cilium's ConfigMap and CoreDNS's EndpointSlices, read for the DNS side --------------------

json fixtureJson(const std::string& name) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/dns/" + name);
  return json::parse(in, nullptr, false);
}

class ClusterDns : public PublisherFake {
 protected:
  void SetUp() override {
    PublisherFake::SetUp();
    host_.setProcfs(std::string(NODEGATE_FIXTURES) + "/dns/proc-launchers");  // one virt-launcher
  }
  std::unique_ptr<ClusterDnsSource> startReading() {
    ClusterDnsOptions o;
    o.refresh = 1s;
    o.startup_jitter_s = 0;
    return std::make_unique<ClusterDnsSource>(connection(), o, board_);
  }
  CheckResult probe() {
    DnsPathProbe p(std::make_shared<DnsVerdictBoard>(), board_);  // no tracer: the static check
    return p.run(ProbeContext{host_, config_});
  }
  bool read(ApiRead cilium) {
    auto f = board_->facts();
    return f && f->cilium_read == cilium;
  }
  std::string evidence(const CheckResult& r) {
    std::string out;
    for (const auto& e : r.evidence) out += e.source + ": " + e.observed + "\n";
    return out;
  }
  void createConfigMap(const json& cm) {
    ASSERT_EQ(api_->call("POST", "/api/v1/namespaces/kube-system/configmaps", cm).code, 201);
  }

  std::shared_ptr<ClusterDnsBoard> board_ = std::make_shared<ClusterDnsBoard>();
  HostRoot host_{"/nonexistent"};
  Config config_;
};

TEST_F(ClusterDns, ConfigMapFromTheApiFlipsTheStaticCheckToTheIncident) {
  createConfigMap(fixtureJson("cilium-config-hostns-only.json"));
  json slice = {
      {"metadata",
       {{"name", "kube-dns-x1"}, {"labels", {{"kubernetes.io/service-name", "kube-dns"}}}}},
      {"addressType", "IPv4"},
      {"endpoints",
       json::array(
           {{{"addresses", {"10.244.1.7"}}, {"nodeName", node_}, {"conditions", {{"ready", true}}}},
            {{"addresses", {"10.244.2.9"}}, {"conditions", {{"ready", false}}}}})},
      {"ports", json::array({{{"name", "dns"}, {"port", 53}, {"protocol", "UDP"}}})}};
  ASSERT_EQ(
      api_->call("POST", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", slice)
          .code,
      201);
  // Another Service's slice in the same namespace must not be taken for CoreDNS.
  slice["metadata"] = {{"name", "metrics-x1"},
                       {"labels", {{"kubernetes.io/service-name", "metrics"}}}};
  ASSERT_EQ(
      api_->call("POST", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices", slice)
          .code,
      201);

  long since = api_->lastSeq();
  auto pub = startReading();
  ASSERT_TRUE(eventually([&] { return read(ApiRead::Ok); })) << trace();
  auto f = *board_->facts();
  ASSERT_EQ(f.endpoints_read, ApiRead::Ok) << f.endpoints_detail;
  ASSERT_EQ(f.dns_endpoints.size(), 2u);
  EXPECT_EQ(f.dns_endpoints[0].address, "10.244.1.7");
  EXPECT_EQ(f.dns_endpoints[0].node, node_);
  EXPECT_FALSE(f.dns_endpoints[1].ready);
  auto r = probe();
  EXPECT_EQ(r.reason, "TracerNotRunning") << evidence(r);  // hostns-only: no prediction

  // Someone turns socket LB on in every namespace: the next refresh predicts the incident.
  ASSERT_EQ(
      api_->call("PATCH", "/api/v1/namespaces/kube-system/configmaps/cilium-config",
                 {{"data", {{"bpf-lb-sock-hostns-only", "false"}}}}, "application/merge-patch+json")
          .code,
      200);
  ASSERT_TRUE(eventually([&] { return probe().reason == "ServiceTranslationMissing"; }, 5s))
      << evidence(probe());
  r = probe();
  EXPECT_EQ(r.status, Status::Fail);  // a virt-launcher runs here (the fixture's)
  EXPECT_NE(evidence(r).find("bpf-lb-sock-hostns-only=false"), std::string::npos) << evidence(r);

  // Reads only, with the label selector of the kube-dns Service.
  bool listed = false;
  for (const auto& q : api_->requests(since)) {
    std::string p = q["path"];
    if (p.find("/configmaps") != std::string::npos ||
        p.find("/endpointslices") != std::string::npos) {
      if (q["user_agent"].get<std::string>().rfind("nodegate", 0) == 0) {
        EXPECT_EQ(q["method"], "GET") << q.dump();
      }
    }
    if (p == "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices" &&
        q["query"] == "labelSelector=kubernetes.io%2Fservice-name%3Dkube-dns")
      listed = true;
  }
  EXPECT_TRUE(listed);
}

TEST_F(ClusterDns, NoConfigMapMeansNoCiliumNotAnError) {
  auto pub = startReading();
  ASSERT_TRUE(eventually([&] { return read(ApiRead::NotFound); })) << trace();
  auto empty_proc = api_->dir() / "proc-empty";  // and no launcher: nothing to predict
  std::filesystem::create_directories(empty_proc);
  host_.setProcfs(empty_proc.string());
  auto r = probe();
  EXPECT_EQ(r.status, Status::Pass) << evidence(r);
  EXPECT_EQ(r.reason, "NoGuests");
  EXPECT_NE(evidence(r).find("no Cilium"), std::string::npos) << evidence(r);
  EXPECT_EQ(board_->facts()->endpoints_read, ApiRead::Ok);  // an empty list is an answer
  EXPECT_TRUE(board_->facts()->dns_endpoints.empty());
}

TEST_F(ClusterDns, ForbiddenIsUnknownWithAnRbacHint) {
  createConfigMap(fixtureJson("cilium-config-incident.json"));
  api_->fault({{"path_re", "/configmaps/cilium-config$"},
               {"status", 403},
               {"count", -1},
               {"message", "configmaps \"cilium-config\" is forbidden: User cannot get resource"}});
  auto pub = startReading();
  ASSERT_TRUE(eventually([&] { return read(ApiRead::Forbidden); })) << trace();
  auto r = probe();
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "CiliumConfigForbidden");
  EXPECT_NE(r.hint.find("rbac.readCiliumConfig"), std::string::npos) << r.hint;
  EXPECT_NE(evidence(r).find("HTTP 403"), std::string::npos) << evidence(r);
  // The grant arrives: the next refresh sees the incident configuration.
  api_->clearFaults();
  ASSERT_TRUE(eventually([&] { return probe().reason == "ServiceTranslationMissing"; }, 5s))
      << evidence(probe());
}

// CoreDNS's Corefile is evidence beside the verdict, read with the other cluster-DNS facts; a
// refusal is said in the evidence and never turns the check UNKNOWN.
TEST_F(ClusterDns, CorefileAndExternalClusterIpAreEvidence) {
  json cilium = fixtureJson("cilium-config-hostns-only.json");
  cilium["data"]["bpf-lb-external-clusterip"] = "false";
  createConfigMap(cilium);
  createConfigMap(fixtureJson("coredns-configmap-stub-domain.json"));
  long since = api_->lastSeq();
  auto pub = startReading();
  ASSERT_TRUE(eventually([&] {
    auto f = board_->facts();
    return f && f->corefile_read == ApiRead::Ok;
  })) << trace();
  auto r = probe();
  EXPECT_EQ(r.reason, "TracerNotRunning") << evidence(r);
  EXPECT_NE(evidence(r).find("coredns Corefile: .:53 answers cluster.local in-addr.arpa ip6.arpa "
                             "(kubernetes), forwards . to /etc/resolv.conf"),
            std::string::npos)
      << evidence(r);
  EXPECT_NE(evidence(r).find("coredns Corefile: consul.local:53 holds no cluster zone"),
            std::string::npos)
      << evidence(r);
  EXPECT_NE(evidence(r).find("bpf-lb-external-clusterip=false"), std::string::npos) << evidence(r);
  bool got = false;
  for (const auto& q : api_->requests(since))
    if (q["path"] == "/api/v1/namespaces/kube-system/configmaps/coredns") {
      EXPECT_EQ(q["method"], "GET");
      got = true;
    }
  EXPECT_TRUE(got);

  // A Corefile nobody can parse: said so, with the line; the verdict does not move.
  ASSERT_EQ(api_->call("PATCH", "/api/v1/namespaces/kube-system/configmaps/coredns",
                       {{"data", {{"Corefile", ".:53 {\n  forward . 1.1.1.1\n"}}}},
                       "application/merge-patch+json")
                .code,
            200);
  ASSERT_TRUE(eventually([&] { return board_->facts()->corefile_read == ApiRead::Failed; }, 5s))
      << trace();
  r = probe();
  EXPECT_EQ(r.reason, "TracerNotRunning");
  EXPECT_NE(
      evidence(r).find("failed to parse configmap kube-system/coredns: Corefile: 1 unclosed {"),
      std::string::npos)
      << evidence(r);

  // RBAC refuses it: evidence says which value grants it, the check is not UNKNOWN for it.
  api_->fault({{"path_re", "/configmaps/coredns$"}, {"status", 403}, {"count", -1}});
  ASSERT_TRUE(eventually([&] { return board_->facts()->corefile_read == ApiRead::Forbidden; }, 5s))
      << trace();
  r = probe();
  EXPECT_EQ(r.reason, "TracerNotRunning");
  EXPECT_NE(evidence(r).find("rbac.readCoreDNSConfig"), std::string::npos) << evidence(r);
}

// NodeLocal DNSCache's ConfigMap names the cache's address for the DNS tracer; without it (404) or
// without the grant (403) the address is not known from the API, which is evidence, not an error.
TEST_F(ClusterDns, NodeLocalCacheAddressesFromItsConfigMap) {
  auto pub = startReading();
  ASSERT_TRUE(eventually([&] {
    auto f = board_->facts();
    return f && f->nodelocal_read == ApiRead::NotFound;
  })) << trace();
  EXPECT_EQ(board_->facts()->nodelocal_detail,
            "no node-local DNS cache: configmap kube-system/node-local-dns does not exist");
  createConfigMap(fixtureJson("node-local-dns-configmap.json"));
  ASSERT_TRUE(eventually([&] { return board_->facts()->nodelocal_read == ApiRead::Ok; }, 5s))
      << trace();
  EXPECT_EQ(board_->facts()->nodelocal_addresses, std::vector<std::string>{"169.254.20.10"});
  auto r = probe();
  EXPECT_NE(evidence(r).find("node-local-dns: cache on 169.254.20.10 (read from configmap "
                             "kube-system/node-local-dns)"),
            std::string::npos)
      << evidence(r);
  api_->fault({{"path_re", "/configmaps/node-local-dns$"}, {"status", 403}, {"count", -1}});
  ASSERT_TRUE(eventually([&] { return board_->facts()->nodelocal_read == ApiRead::Forbidden; }, 5s))
      << trace();
  EXPECT_TRUE(board_->facts()->nodelocal_addresses.empty());
  r = probe();
  EXPECT_EQ(r.reason, "TracerNotRunning");
  EXPECT_NE(evidence(r).find("rbac.readNodeLocalDNSConfig"), std::string::npos) << evidence(r);
}

TEST_F(ClusterDns, NoCorefileReadWhenItsConfigMapIsUnset) {
  ClusterDnsOptions o;
  o.refresh = 1s;
  o.startup_jitter_s = 0;
  o.corefile_configmap = "";
  o.nodelocal_configmap = "";
  long since = api_->lastSeq();
  auto pub = std::make_unique<ClusterDnsSource>(connection(), o, board_);
  ASSERT_TRUE(eventually([&] { return read(ApiRead::NotFound); })) << trace();
  for (const auto& q : api_->requests(since)) {
    EXPECT_EQ(q["path"].get<std::string>().find("/configmaps/coredns"), std::string::npos);
    EXPECT_EQ(q["path"].get<std::string>().find("/configmaps/node-local-dns"), std::string::npos);
  }
  EXPECT_EQ(board_->facts()->nodelocal_detail, "");
  EXPECT_EQ(board_->facts()->corefile_detail, "");
  EXPECT_EQ(evidence(probe()).find("coredns Corefile"), std::string::npos);
}

}  // namespace
}  // namespace nodegate::kube
