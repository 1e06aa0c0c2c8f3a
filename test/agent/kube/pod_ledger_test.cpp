// The pod source's bookkeeping: list pages, watch events, what counts as a change.
#include "kube/pod_ledger.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace nodegate::kube {
namespace {

using nlohmann::json;

json fixture(const std::string& name) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/kubevirt/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

json launcher(const std::string& name, const std::string& phase = "Running") {
  json p = fixture("virt-launcher-pod.json");
  p["metadata"]["name"] = name;
  p["metadata"]["uid"] = "uid-" + name;
  p["status"]["phase"] = phase;
  return p;
}

TEST(PodLedger, ParsesAListPage) {
  json list = {{"kind", "PodList"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", "77"}, {"continue", "abc"}}},
               {"items", {launcher("a"), fixture("virt-handler-pod.json")}}};
  auto page = parsePodListPage(list.dump());
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->resource_version, "77");
  EXPECT_EQ(page->continue_token, "abc");
  EXPECT_EQ(page->items.size(), 2u);
  EXPECT_FALSE(parsePodListPage("{\"kind\":\"Status\"}").ok());
  EXPECT_FALSE(parsePodListPage("not json").ok());
}

TEST(PodLedger, ViewsAndChanges) {
  PodLedger l;
  l.replace({launcher("a"), launcher("done", "Succeeded"), fixture("virt-handler-pod.json")});
  PodView v = l.view(true, "");
  ASSERT_EQ(v.pods.size(), 2u);  // the Succeeded one is not kubelet's to admit again
  ASSERT_EQ(l.handlers().size(), 1u);
  EXPECT_TRUE(l.handlers()[0].ready);

  // A status heartbeat that changes nothing the views show is not a change.
  json a = launcher("a");
  a["status"]["conditions"][0]["lastProbeTime"] = "2030-01-01T00:00:00Z";
  EXPECT_FALSE(l.apply("MODIFIED", a));
  a["spec"]["nodeSelector"]["nodegate.io/vm-ready"] = "true";
  EXPECT_TRUE(l.apply("MODIFIED", a));
  EXPECT_TRUE(l.apply("ADDED", launcher("b")));
  EXPECT_EQ(l.view(true, "").pods.size(), 3u);
  EXPECT_TRUE(l.apply("DELETED", launcher("b")));
  EXPECT_FALSE(l.apply("DELETED", launcher("b")));
  EXPECT_FALSE(l.apply("BOOKMARK", launcher("c")));

  json h = fixture("virt-handler-pod.json");
  h["status"]["conditions"][1]["status"] = "False";
  EXPECT_TRUE(l.apply("MODIFIED", h));
  EXPECT_FALSE(l.handlers()[0].ready);

  // A pod whose affinity does not parse is named, not dropped.
  json odd = launcher("odd");
  odd["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = 7;
  EXPECT_TRUE(l.apply("ADDED", odd));
  EXPECT_EQ(l.view(true, "").unreadable, (std::vector<std::string>{"default/odd"}));
  EXPECT_FALSE(l.apply("ADDED", json::array()));
}

// KubeVirt copies the VMI's dnsPolicy and dnsConfig to its launcher pod (the captured pod has the
// default, ClusterFirst): the pod says where its guest asks first.
TEST(PodLedger, LauncherPodsGiveEachVmiItsDnsConfiguration) {
  auto c = launcherDnsConfig(fixture("virt-launcher-pod.json"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->vmi, "default/cat8kv-01");  // the VirtualMachineInstance owning the pod
  EXPECT_EQ(c->dns_policy, "ClusterFirst");
  EXPECT_TRUE(c->nameservers.empty());
  EXPECT_FALSE(launcherDnsConfig(fixture("virt-handler-pod.json")));
  EXPECT_FALSE(launcherDnsConfig(json::array()));

  json none = launcher("custom");
  none["metadata"]["ownerReferences"][0]["name"] = "vm-custom";
  none["spec"]["dnsPolicy"] = "None";
  none["spec"]["dnsConfig"] = {{"nameservers", {"10.96.0.99", "8.8.8.8", 7}},
                               {"searches", {"example.com"}}};
  c = launcherDnsConfig(none);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->vmi, "default/vm-custom");
  EXPECT_EQ(c->dns_policy, "None");
  EXPECT_EQ(c->nameservers, (std::vector<std::string>{"10.96.0.99", "8.8.8.8"}));  // 7: no string
  // Without an owner reference, the domain label names the VMI.
  json orphan = launcher("orphan");
  orphan["metadata"].erase("ownerReferences");
  orphan["metadata"]["labels"]["kubevirt.io/domain"] = "vm-orphan";
  ASSERT_TRUE(launcherDnsConfig(orphan));
  EXPECT_EQ(launcherDnsConfig(orphan)->vmi, "default/vm-orphan");

  PodLedger l;
  json done = launcher("done", "Succeeded");
  done["metadata"]["ownerReferences"][0]["name"] = "vm-done";
  // A migration's target pod of the same VMI next to its source: one VMI.
  l.replace({launcher("a"), launcher("a-target"), none, done, fixture("virt-handler-pod.json")});
  auto vmis = l.vmiDns();
  ASSERT_EQ(vmis.size(), 2u);
  EXPECT_EQ(vmis[0].vmi, "default/cat8kv-01");
  EXPECT_EQ(vmis[1].vmi, "default/vm-custom");
  // A change of the DNS configuration is a change of the view.
  none["spec"]["dnsConfig"]["nameservers"] = {"10.96.0.10"};
  EXPECT_TRUE(l.apply("MODIFIED", none));
  EXPECT_EQ(l.vmiDns()[1].nameservers, (std::vector<std::string>{"10.96.0.10"}));
}

}  // namespace
}  // namespace nodegate::kube
