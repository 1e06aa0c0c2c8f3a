// kubevirt-node's board: what the Node watch hands it becomes facts at once, and only a change of
// KubeVirt's part of the Node calls the hook (the agent's `kube` trigger). The board against the
// real pod source and Node watch is tested end to end (gate_e2e_test.py, kubevirt cases).
#include "kube/kubevirt_facts.h"

#include <gtest/gtest.h>

namespace nodegate::kube {
namespace {

using nlohmann::json;

json node(const std::string& rv, const std::string& heartbeat, const std::string& kvm) {
  return {{"metadata",
           {{"name", "n"},
            {"resourceVersion", rv},
            {"labels", {{"kubevirt.io/schedulable", "true"}}},
            {"annotations", {{"kubevirt.io/heartbeat", heartbeat}}}}},
          {"status",
           {{"capacity", {{"devices.kubevirt.io/kvm", "1k"}, {"cpu", "4"}}},
            {"allocatable", {{"devices.kubevirt.io/kvm", kvm}, {"cpu", "4"}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}, {"rv", rv}}})}}}};
}

TEST(KubeVirtFactsBoard, NodeChangesOfKubeVirtsPartCallTheHookOthersDoNot) {
  KubeVirtFactsBoard board(nullptr);
  KubeVirtFacts f = board.facts();
  EXPECT_FALSE(f.node);  // not seen yet: the check says NodeNotRead
  EXPECT_NE(f.node_error.find("not seen yet"), std::string::npos);
  EXPECT_FALSE(f.pods_complete);  // no pod source: the pods are never known
  EXPECT_NE(f.pods_error.find("kube.pod_watch"), std::string::npos);

  int calls = 0;
  board.onChange([&] { ++calls; });
  board.nodeSeen(node("1", "2026-12-02T10:00:00Z", "0"));
  EXPECT_EQ(calls, 1);
  f = board.facts();
  ASSERT_TRUE(f.node);
  EXPECT_EQ(f.node->allocatable.at("kvm"), "0");
  EXPECT_EQ(f.node->capacity.at("kvm"), "1k");
  EXPECT_EQ(f.node->heartbeat, "2026-12-02T10:00:00Z");

  // kubelet's status heartbeat (a new resourceVersion, conditions) is not KubeVirt's.
  board.nodeSeen(node("2", "2026-12-02T10:00:00Z", "0"));
  EXPECT_EQ(calls, 1);
  board.nodeSeen(node("3", "2026-12-02T10:01:00Z", "0"));  // virt-handler's heartbeat
  EXPECT_EQ(calls, 2);
  board.nodeSeen(node("4", "2026-12-02T10:01:00Z", "1k"));  // the plugin healthy again
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(board.facts().node->allocatable.at("kvm"), "1k");
}

}  // namespace
}  // namespace nodegate::kube
