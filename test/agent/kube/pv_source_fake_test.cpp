// local-pv's API source against the project's fake API server (test/fakeapi, proven against
// kubectl): paging with limit/continue, resourceVersion on later lists, claims and DataVolumes
// looked up once, and the failures a real server produces (403, 429 + Retry-After, 5xx, 410,
// timeouts), injected through the fake's /fake/faults.
#include <gtest/gtest.h>

#include "fake_api.h"
#include "kube/kubeconfig.h"
#include "kube/pv_source.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using testing::FakeApi;

json pinnedPv(const std::string& name, const std::string& node, const json& claim_ref) {
  json pv = {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolume"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"capacity", {{"storage", "1Gi"}}},
        {"accessModes", {"ReadWriteOnce"}},
        {"volumeMode", "Block"},
        {"persistentVolumeReclaimPolicy", "Retain"},
        {"csi", {{"driver", "topolvm.io"}, {"volumeHandle", "lv-" + name}}},
        {"nodeAffinity",
         {{"required",
           {{"nodeSelectorTerms",
             json::array({{{"matchExpressions", json::array({{{"key", "topology.topolvm.io/node"},
                                                              {"operator", "In"},
                                                              {"values", {node}}}})}}})}}}}}}}};
  if (!claim_ref.is_null()) pv["spec"]["claimRef"] = claim_ref;
  return pv;
}

class ApiPvSourceFake : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    api_ = new FakeApi("pvsource", "node-a");
    auto& a = *api_;
    EXPECT_EQ(a.call("PATCH", "/api/v1/nodes/node-a",
                     {{"metadata", {{"labels", {{"topology.topolvm.io/node", "node-a"}}}}}},
                     "application/merge-patch+json")
                  .code,
              200);
    // A VM's disk made by CDI from a dataVolumeTemplate: VM alice -> DataVolume -> claim.
    auto dv = a.call("POST", "/apis/cdi.kubevirt.io/v1beta1/namespaces/vms/datavolumes",
                     {{"apiVersion", "cdi.kubevirt.io/v1beta1"},
                      {"kind", "DataVolume"},
                      {"metadata",
                       {{"name", "alice-root"},
                        {"ownerReferences", json::array({{{"apiVersion", "kubevirt.io/v1"},
                                                          {"kind", "VirtualMachine"},
                                                          {"name", "alice"},
                                                          {"uid", "vm-alice"},
                                                          {"controller", true}}})}}}});
    ASSERT_EQ(dv.code, 201) << dv.body.dump();
    auto alice =
        a.call("POST", "/api/v1/namespaces/vms/persistentvolumeclaims",
               {{"metadata",
                 {{"name", "alice-root"},
                  {"labels", {{"kubevirt.io/created-by", "vm-alice"}}},
                  {"ownerReferences", json::array({{{"apiVersion", "cdi.kubevirt.io/v1beta1"},
                                                    {"kind", "DataVolume"},
                                                    {"name", "alice-root"},
                                                    {"uid", dv.body["metadata"]["uid"]}}})}}},
                {"spec", {{"volumeName", "pv-alice"}}}});
    ASSERT_EQ(alice.code, 201);
    // A claim the VM owns directly (CDI handed it over when it collected the DataVolume).
    auto bob = a.call("POST", "/api/v1/namespaces/vms/persistentvolumeclaims",
                      {{"metadata",
                        {{"name", "bob-root"},
                         {"ownerReferences", json::array({{{"apiVersion", "kubevirt.io/v1"},
                                                           {"kind", "VirtualMachine"},
                                                           {"name", "bob"}}})}}}});
    ASSERT_EQ(bob.code, 201);
    for (const auto& [claim, phase] : {std::pair{"alice-root", "Bound"}, {"bob-root", "Bound"}})
      a.call("PATCH",
             std::string("/api/v1/namespaces/vms/persistentvolumeclaims/") + claim + "/status",
             {{"status", {{"phase", phase}}}}, "application/merge-patch+json");
    auto ref = [](const char* name, const json& uid) {
      return json{{"namespace", "vms"}, {"name", name}, {"uid", uid}};
    };
    for (const json& pv :
         {pinnedPv("pv-alice", "node-a", ref("alice-root", alice.body["metadata"]["uid"])),
          pinnedPv("pv-bob", "node-a", ref("bob-root", bob.body["metadata"]["uid"])),
          pinnedPv("pv-gone", "node-a", ref("deleted-claim", "uid-gone")),
          pinnedPv("pv-other-1", "node-b", nullptr), pinnedPv("pv-other-2", "node-b", nullptr)}) {
      ASSERT_EQ(a.call("POST", "/api/v1/persistentvolumes", pv).code, 201);
      a.call("PATCH",
             "/api/v1/persistentvolumes/" + pv["metadata"]["name"].get<std::string>() + "/status",
             {{"status", {{"phase", "Bound"}}}}, "application/merge-patch+json");
    }
  }
  static void TearDownTestSuite() {
    delete api_;
    api_ = nullptr;
  }
  void SetUp() override { api_->clearFaults(); }

  std::unique_ptr<ApiPvSource> source(double timeout_s = 5, double max_age_s = 600) {
    auto client = loadKubeconfig(api_->kubeconfig());
    EXPECT_TRUE(client) << client.error().message;
    ApiPvOptions o;
    o.node_name = "node-a";
    o.page_size = 2;
    o.timeout_s = timeout_s;
    o.max_age_s = max_age_s;
    o.start_thread = false;
    auto conn = std::make_shared<Connection>(std::move(client).value(),
                                             ConnectionSettings{100, 100}, registry_);
    return std::make_unique<ApiPvSource>(std::move(conn), o);
  }
  // The agent's requests since seq, as "METHOD path?query".
  std::vector<std::string> requestsSince(long seq) {
    std::vector<std::string> out;
    for (const auto& r : api_->requests(seq))
      if (r.value("user_agent", "").rfind("nodegate", 0) == 0)
        out.push_back(
            r["method"].get<std::string>() + " " + r["path"].get<std::string>() +
            (r["query"].get<std::string>().empty() ? "" : "?" + r["query"].get<std::string>()) +
            " " + r["status"].dump());
    return out;
  }
  static std::size_t count(const std::vector<std::string>& reqs, const std::string& needle) {
    return static_cast<std::size_t>(std::count_if(reqs.begin(), reqs.end(), [&](const auto& r) {
      return r.find(needle) != std::string::npos;
    }));
  }

  static FakeApi* api_;
  prometheus::Registry registry_;
  HostRoot host_{"/"};
  Config cfg_;
};
FakeApi* ApiPvSourceFake::api_ = nullptr;

const LocalPv* find(const std::vector<LocalPv>& pvs, const std::string& name) {
  for (const auto& pv : pvs)
    if (pv.name == name) return &pv;
  return nullptr;
}

TEST_F(ApiPvSourceFake, PagesClaimsAndVms) {
  auto src = source();
  auto before = src->list(host_, cfg_);
  ASSERT_FALSE(before);
  EXPECT_EQ(before.error().code, EAGAIN);

  long seq = api_->lastSeq();
  src->refresh();
  auto got = src->list(host_, cfg_);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_EQ(got->pvs.size(), 3u) << got->detail;
  EXPECT_NE(got->detail.find("5 PersistentVolumes in 3 pages"), std::string::npos) << got->detail;
  EXPECT_NE(got->detail.find("3 pinned to node-a"), std::string::npos) << got->detail;
  const LocalPv* alice = find(got->pvs, "pv-alice");
  ASSERT_TRUE(alice);
  EXPECT_EQ(alice->claim, "vms/alice-root");
  EXPECT_EQ(alice->claim_phase, "Bound");
  EXPECT_EQ(alice->vm, "vms/alice");  // through the DataVolume's owner
  EXPECT_EQ(alice->phase, "Bound");
  EXPECT_EQ(alice->volume_handle, "lv-pv-alice");
  EXPECT_EQ(find(got->pvs, "pv-bob")->vm, "vms/bob");
  EXPECT_EQ(find(got->pvs, "pv-gone")->claim_phase, "Missing");
  EXPECT_FALSE(find(got->pvs, "pv-other-1"));

  auto reqs = requestsSince(seq);
  EXPECT_EQ(count(reqs, "GET /api/v1/persistentvolumes?limit=2 "), 1u)
      << ::testing::PrintToString(reqs);
  EXPECT_EQ(count(reqs, "GET /api/v1/persistentvolumes?limit=2&continue="), 2u);
  EXPECT_EQ(count(reqs, "/persistentvolumeclaims/"), 3u);
  EXPECT_EQ(count(reqs, "/datavolumes/alice-root"), 1u);
  EXPECT_EQ(count(reqs, "POST"), 0u);
  EXPECT_EQ(count(reqs, "PATCH"), 0u);

  // The next refresh lists from the last resourceVersion and looks up no claim again.
  seq = api_->lastSeq();
  src->refresh();
  reqs = requestsSince(seq);
  EXPECT_EQ(count(reqs, "resourceVersionMatch=NotOlderThan"), 1u) << ::testing::PrintToString(reqs);
  EXPECT_EQ(count(reqs, "/persistentvolumeclaims/"), 0u) << ::testing::PrintToString(reqs);
  ASSERT_TRUE(src->list(host_, cfg_));
  EXPECT_EQ(src->list(host_, cfg_)->pvs.size(), 3u);

  // A PV that changes (its claim deleted: Released) has its claim looked up again.
  api_->call("PATCH", "/api/v1/persistentvolumes/pv-bob/status",
             {{"status", {{"phase", "Released"}}}}, "application/merge-patch+json");
  seq = api_->lastSeq();
  src->refresh();
  reqs = requestsSince(seq);
  EXPECT_EQ(count(reqs, "/persistentvolumeclaims/bob-root"), 1u) << ::testing::PrintToString(reqs);
  EXPECT_EQ(count(reqs, "/persistentvolumeclaims/"), 1u);
  EXPECT_EQ(find(src->list(host_, cfg_)->pvs, "pv-bob")->phase, "Released");
  api_->call("PATCH", "/api/v1/persistentvolumes/pv-bob/status", {{"status", {{"phase", "Bound"}}}},
             "application/merge-patch+json");
}

TEST_F(ApiPvSourceFake, ForbiddenIsEaccesAndNotRetried) {
  auto src = source();
  long seq = api_->lastSeq();
  api_->fault({{"path_re", "/persistentvolumes$"},
               {"status", 403},
               {"count", 1},
               {"message",
                "persistentvolumes is forbidden: User \"system:serviceaccount:nodegate:nodegate\" "
                "cannot list resource \"persistentvolumes\""}});
  src->refresh();
  auto got = src->list(host_, cfg_);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, EACCES);
  EXPECT_NE(got.error().message.find("HTTP 403: persistentvolumes is forbidden"), std::string::npos)
      << got.error().message;
  EXPECT_EQ(count(requestsSince(seq), "/persistentvolumes?"), 1u);
}

TEST_F(ApiPvSourceFake, RetryAfterAndServerErrorsAreRetried) {
  auto src = source();
  api_->fault(
      {{"path_re", "/persistentvolumes$"}, {"status", 429}, {"retry_after", 1}, {"count", 1}});
  api_->fault({{"path_re", "/persistentvolumes$"}, {"status", 500}, {"count", 2}});
  long seq = api_->lastSeq();
  auto t0 = std::chrono::steady_clock::now();
  src->refresh();
  auto waited = std::chrono::steady_clock::now() - t0;
  auto got = src->list(host_, cfg_);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->pvs.size(), 3u);
  EXPECT_GE(waited, std::chrono::milliseconds(900));  // Retry-After: 1 was honoured
  auto reqs = requestsSince(seq);
  EXPECT_EQ(count(reqs, " 429"), 1u) << ::testing::PrintToString(reqs);
  EXPECT_EQ(count(reqs, " 500"), 2u);
}

TEST_F(ApiPvSourceFake, GoneRestartsTheListOnce) {
  auto src = source();
  src->refresh();
  ASSERT_TRUE(src->list(host_, cfg_));
  // Our resourceVersion or continue token fell out of the server's window.
  api_->fault({{"path_re", "/persistentvolumes$"}, {"status", 410}, {"count", 1}});
  long seq = api_->lastSeq();
  src->refresh();
  auto reqs = requestsSince(seq);
  EXPECT_EQ(count(reqs, " 410"), 1u) << ::testing::PrintToString(reqs);
  // The retry starts over without a resourceVersion.
  EXPECT_EQ(count(reqs, "GET /api/v1/persistentvolumes?limit=2 200"), 1u)
      << ::testing::PrintToString(reqs);
  ASSERT_TRUE(src->list(host_, cfg_));
  EXPECT_EQ(src->list(host_, cfg_)->pvs.size(), 3u);
}

TEST_F(ApiPvSourceFake, FailuresKeepTheLastViewForAWhile) {
  auto src = source(5, 600);
  src->refresh();
  ASSERT_TRUE(src->list(host_, cfg_));
  api_->fault({{"path_re", "/persistentvolumes$"}, {"status", 500}, {"count", 4}});
  src->refresh();
  auto got = src->list(host_, cfg_);
  ASSERT_TRUE(got);
  EXPECT_NE(got->detail.find("the last refresh failed: failed to list persistentvolumes: HTTP 500"),
            std::string::npos)
      << got->detail;
  // Past api_max_age_seconds the failure is the answer.
  auto strict = source(5, 0);
  api_->fault({{"path_re", "/persistentvolumes$"}, {"status", 500}, {"count", 4}});
  strict->refresh();
  EXPECT_FALSE(strict->list(host_, cfg_));
}

TEST_F(ApiPvSourceFake, TimeoutsAreReported) {
  auto src = source(/*timeout_s=*/1, /*max_age_s=*/0);
  api_->fault({{"path_re", "/persistentvolumes$"}, {"delay", 2}, {"count", 4}});
  src->refresh();
  auto got = src->list(host_, cfg_);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, ETIMEDOUT) << got.error().message;
  EXPECT_NE(got.error().message.find("failed to list persistentvolumes"), std::string::npos);
}

TEST_F(ApiPvSourceFake, OwnThreadRefreshesAndStopsPromptly) {
  auto client = loadKubeconfig(api_->kubeconfig());
  ASSERT_TRUE(client);
  ApiPvOptions o;
  o.node_name = "node-a";
  o.resync = std::chrono::milliseconds(200);
  auto src = std::make_unique<ApiPvSource>(
      std::make_shared<Connection>(std::move(client).value(), ConnectionSettings{}, registry_), o);
  EXPECT_TRUE(testing::eventually([&] { return static_cast<bool>(src->list(host_, cfg_)); }));
  long seq = api_->lastSeq();
  EXPECT_TRUE(
      testing::eventually([&] { return count(requestsSince(seq), "/persistentvolumes?") >= 2; }));
  auto t0 = std::chrono::steady_clock::now();
  src.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(ApiPvSourceFake, UnsettledClaimsAreLookedAtAgain) {
  // The PV controller binds the PV first and the claim a moment later.
  auto dave = api_->call("POST", "/api/v1/namespaces/vms/persistentvolumeclaims",
                         {{"metadata", {{"name", "dave-root"}}}});
  ASSERT_EQ(dave.code, 201);
  ASSERT_EQ(api_->call("POST", "/api/v1/persistentvolumes",
                       pinnedPv("pv-dave", "node-a",
                                {{"namespace", "vms"},
                                 {"name", "dave-root"},
                                 {"uid", dave.body["metadata"]["uid"]}}))
                .code,
            201);
  auto src = source();
  src->refresh();
  ASSERT_TRUE(src->list(host_, cfg_));
  EXPECT_EQ(find(src->list(host_, cfg_)->pvs, "pv-dave")->claim_phase, "Pending");
  api_->call("PATCH", "/api/v1/namespaces/vms/persistentvolumeclaims/dave-root/status",
             {{"status", {{"phase", "Bound"}}}}, "application/merge-patch+json");
  src->refresh();
  EXPECT_EQ(find(src->list(host_, cfg_)->pvs, "pv-dave")->claim_phase, "Bound");
  // Bound now: settled, not looked up again.
  long seq = api_->lastSeq();
  src->refresh();
  EXPECT_EQ(count(requestsSince(seq), "/persistentvolumeclaims/"), 0u);
  api_->call("DELETE", "/api/v1/persistentvolumes/pv-dave");
  api_->call("DELETE", "/api/v1/namespaces/vms/persistentvolumeclaims/dave-root");
}

}  // namespace
}  // namespace nodegate::kube
