// local-pv's API source: PersistentVolumeList pages in the shapes TopoLVM, OpenEBS lvm-localpv
// and the local volume provisioner write (node affinity, volume handle, VG), claims and
// DataVolumes as CDI and KubeVirt write them, malformed items, and a huge list.
#include "kube/pv_source.h"

#include <gtest/gtest.h>

namespace nodegate::kube {
namespace {

using nlohmann::json;

NodeIdentity nodeA() {
  // The hostname label need not equal the node name (cloud nodes): affinity sees labels.
  return NodeIdentity{"node-a",
                      {{"kubernetes.io/hostname", "host-a"},
                       {"topology.topolvm.io/node", "node-a"},
                       {"openebs.io/nodename", "node-a"},
                       {"topology.kubernetes.io/zone", "z1"},
                       {"disks", "3"}}};
}

json term(json exprs) {
  return json{{"matchExpressions", std::move(exprs)}};
}
json expr(const std::string& key, const std::string& op, json values = json::array()) {
  json e = {{"key", key}, {"operator", op}};
  if (!values.empty()) e["values"] = std::move(values);
  return e;
}
json fieldTerm(json e) {
  json t = json::object();
  t["matchFields"] = json::array({std::move(e)});
  return t;
}
json affinity(json terms) {
  return {{"required", {{"nodeSelectorTerms", std::move(terms)}}}};
}

// A TopoLVM PV as its controller writes it (volumeHandle = the LV name, a UUID).
json topolvmPv(const std::string& name, const std::string& node, const std::string& handle) {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "PersistentVolume",
    "metadata": {"name": ")" +
                     name + R"(", "resourceVersion": "812",
                 "annotations": {"pv.kubernetes.io/provisioned-by": "topolvm.io"},
                 "finalizers": ["kubernetes.io/pv-protection"]},
    "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"},
             "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "vms",
                          "name": "alice-root", "uid": "c1a1"},
             "csi": {"driver": "topolvm.io", "fsType": "xfs", "volumeHandle": ")" +
                     handle + R"(",
                     "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "1700-topolvm.io",
                                          "topolvm.io/device-class": "ssd"}},
             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
               {"key": "topology.topolvm.io/node", "operator": "In", "values": [")" +
                     node + R"("]}]}]}},
             "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "topolvm-ssd",
             "volumeMode": "Block"},
    "status": {"phase": "Bound"}})");
}

// OpenEBS lvm-localpv: volumeHandle = PV name = LV name, VG in the volume attributes.
json lvmLocalPv(const std::string& name, const std::string& node) {
  return json::parse(R"({
    "metadata": {"name": ")" +
                     name + R"(", "resourceVersion": "900"},
    "spec": {"claimRef": {"namespace": "vms", "name": "bob-root", "uid": "c2b2"},
             "csi": {"driver": "local.csi.openebs.io", "fsType": "ext4", "volumeHandle": ")" +
                     name + R"(",
                     "volumeAttributes": {"openebs.io/cas-type": "localpv-lvm", "openebs.io/volgroup": "lvmvg"}},
             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
               {"key": "openebs.io/nodename", "operator": "In", "values": [")" +
                     node + R"("]}]}]}},
             "persistentVolumeReclaimPolicy": "Delete", "volumeMode": "Filesystem"},
    "status": {"phase": "Bound"}})");
}

// A static local volume (sig-storage-local-static-provisioner): pinned by the hostname label.
json localPv(const std::string& name, const std::string& host) {
  return json::parse(R"({
    "metadata": {"name": ")" +
                     name + R"(", "resourceVersion": "77"},
    "spec": {"local": {"path": "/mnt/disks/ssd1"}, "storageClassName": "local-storage",
             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
               {"key": "kubernetes.io/hostname", "operator": "In", "values": [")" +
                     host + R"("]}]}]}},
             "persistentVolumeReclaimPolicy": "Retain"},
    "status": {"phase": "Available"}})");
}

std::string listOf(json items, const std::string& rv = "1000", const std::string& cont = "") {
  json list = {{"kind", "PersistentVolumeList"},
               {"apiVersion", "v1"},
               {"metadata", {{"resourceVersion", rv}}},
               {"items", std::move(items)}};
  if (!cont.empty()) list["metadata"]["continue"] = cont;
  return list.dump();
}

bool pinned(const json& aff) {
  auto r = pinnedToNode(aff, nodeA(), defaultNodeKeys());
  EXPECT_TRUE(r) << r.error().message;
  return r && *r;
}

TEST(PinnedToNode, SelectorSemantics) {
  EXPECT_TRUE(pinned(affinity({term({expr("topology.topolvm.io/node", "In", {"node-a"})})})));
  EXPECT_FALSE(pinned(affinity({term({expr("topology.topolvm.io/node", "In", {"node-b"})})})));
  // Terms are ORed, expressions ANDed.
  EXPECT_TRUE(pinned(affinity({term({expr("openebs.io/nodename", "In", {"node-b"})}),
                               term({expr("openebs.io/nodename", "In", {"node-a"})})})));
  EXPECT_FALSE(pinned(affinity(
      {term({expr("openebs.io/nodename", "In", {"node-a"}), expr("disks", "Gt", {"5"})})})));
  EXPECT_TRUE(pinned(
      affinity({term({expr("openebs.io/nodename", "In", {"node-a"}), expr("disks", "Lt", {"5"}),
                      expr("disks", "Exists"), expr("gpu", "DoesNotExist"),
                      expr("topology.kubernetes.io/zone", "NotIn", {"z2"})})})));
  // Selecting a whole zone is not a pin, even though this node is in it.
  EXPECT_FALSE(pinned(affinity({term({expr("topology.kubernetes.io/zone", "In", {"z1"})})})));
  // matchFields on the node name pins.
  EXPECT_TRUE(pinned(affinity(json::array({fieldTerm(expr("metadata.name", "In", {"node-a"}))}))));
  // The hostname label, not the node name.
  EXPECT_TRUE(pinned(affinity({term({expr("kubernetes.io/hostname", "In", {"host-a"})})})));
  EXPECT_FALSE(pinned(affinity({term({expr("kubernetes.io/hostname", "In", {"node-a"})})})));
  // No affinity, no required part, an empty term: nothing selected.
  EXPECT_FALSE(pinned(json()));
  EXPECT_FALSE(pinned(json::object()));
  EXPECT_FALSE(pinned(affinity({json::object()})));
  // Malformed: an error, never a guess.
  json no_operator = json::object();
  no_operator["key"] = "k";
  json int_values = expr("k", "In");
  int_values["values"] = json::array({1, 2});
  std::vector<json> bad = {
      json("x"),
      affinity(json("x")),
      affinity(json::array({term(json::array({expr("k", "Near", {"a"})}))})),
      affinity(json::array({term(json::array({no_operator}))})),
      affinity(json::array({term(json::array({expr("disks", "Gt", {"many"})}))})),
      affinity(json::array({fieldTerm(expr("spec.x", "In", {"a"}))})),
      affinity(json::array({term(json::array({int_values}))}))};
  for (const json& b : bad) EXPECT_FALSE(pinnedToNode(b, nodeA(), defaultNodeKeys())) << b.dump();
}

TEST(ParsePvPage, DriverShapes) {
  auto page = parsePvPage(
      listOf({topolvmPv("pvc-t1", "node-a", "6b3c1a9e-0a4f"),
              topolvmPv("pvc-t2", "node-b", "7c4d2b0f-1b50"), lvmLocalPv("pvc-o1", "node-a"),
              localPv("local-pv-1", "host-a"), localPv("local-pv-2", "host-b")},
             "4711", "tok"),
      nodeA(), defaultNodeKeys());
  ASSERT_TRUE(page) << page.error().message;
  EXPECT_EQ(page->items, 5u);
  EXPECT_EQ(page->skipped, 0u);
  EXPECT_EQ(page->resource_version, "4711");
  EXPECT_EQ(page->continue_token, "tok");
  ASSERT_EQ(page->pinned.size(), 3u);
  const LocalPv& t = page->pinned[0];
  EXPECT_EQ(t.name, "pvc-t1");
  EXPECT_EQ(t.driver, "topolvm.io");
  EXPECT_EQ(t.volume_handle, "6b3c1a9e-0a4f");
  EXPECT_TRUE(t.block);
  EXPECT_FALSE(t.attached);
  EXPECT_TRUE(t.from_api);
  EXPECT_EQ(t.phase, "Bound");
  EXPECT_EQ(t.reclaim, "Retain");
  EXPECT_EQ(t.claim, "vms/alice-root");
  EXPECT_EQ(page->claim_uids[0], "c1a1");
  EXPECT_EQ(page->resource_versions[0], "812");
  const LocalPv& o = page->pinned[1];
  EXPECT_EQ(o.driver, "local.csi.openebs.io");
  EXPECT_EQ(o.volume_handle, "pvc-o1");
  EXPECT_EQ(o.volume_group, "lvmvg");
  EXPECT_FALSE(o.block);
  const LocalPv& l = page->pinned[2];
  EXPECT_EQ(l.name, "local-pv-1");
  EXPECT_EQ(l.driver, "kubernetes.io/local");
  EXPECT_EQ(l.local_path, "/mnt/disks/ssd1");
  EXPECT_EQ(l.phase, "Available");
  EXPECT_TRUE(l.claim.empty());
}

TEST(ParsePvPage, MalformedItemsAreSkippedAndCounted) {
  json no_name = topolvmPv("x", "node-a", "h");
  no_name["metadata"].erase("name");
  json bad_terms = topolvmPv("pvc-bad-terms", "node-a", "h");
  bad_terms["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = "node-a";
  json bad_csi = topolvmPv("pvc-bad-csi", "node-a", "h");
  bad_csi["spec"]["csi"] = {{"volumeHandle", "h"}};
  json bad_local = localPv("local-bad", "host-a");
  bad_local["spec"]["local"]["path"] = "relative/dir";
  json spec_string = topolvmPv("pvc-spec", "node-a", "h");
  spec_string["spec"] = "oops";
  auto page = parsePvPage(listOf({42, no_name, bad_terms, bad_csi, bad_local, spec_string,
                                  topolvmPv("pvc-good", "node-a", "lv-good")}),
                          nodeA(), defaultNodeKeys());
  ASSERT_TRUE(page) << page.error().message;
  EXPECT_EQ(page->items, 7u);
  EXPECT_EQ(page->skipped, 6u);
  EXPECT_EQ(page->first_skip, "an item: no metadata.name or spec");
  ASSERT_EQ(page->pinned.size(), 1u);
  EXPECT_EQ(page->pinned[0].name, "pvc-good");
}

TEST(ParsePvPage, BrokenDocumentsAreErrors) {
  for (const char* bad : {"", "not json", "[1,2]", R"({"kind":"NodeList","items":[]})",
                          R"({"kind":"PersistentVolumeList","items":{"a":1}})",
                          R"({"kind":"PersistentVolumeList","items":[)"}) {
    auto page = parsePvPage(bad, nodeA(), defaultNodeKeys());
    ASSERT_FALSE(page) << bad;
    EXPECT_EQ(page.error().message.rfind("failed to parse PersistentVolumeList", 0), 0u)
        << page.error().message;
  }
  auto empty = parsePvPage(
      R"({"kind":"PersistentVolumeList","metadata":{"resourceVersion":"5"},"items":null})", nodeA(),
      defaultNodeKeys());
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->items, 0u);
}

TEST(ParsePvPage, HugeList) {
  // A big cluster's worth of PVs in one document (~7 MB: servers that ignore limit send this;
  // the source itself pages): every 100th is pinned here, every 1000th is malformed.
  // Built as text: a JSON tree of this size is slow to make in a debug build, and the parser
  // is what is under test.
  const std::string model = topolvmPv("@NAME@", "@NODE@", "@LV@").dump();
  auto fill = [&](int i) {
    std::string t = model;
    auto put = [&t](const std::string& key, const std::string& v) {
      t.replace(t.find(key), key.size(), v);
    };
    put("@NAME@", "pvc-" + std::to_string(i));
    put("@LV@", "lv-" + std::to_string(i));
    put("@NODE@", i % 100 == 0 ? "node-a" : "node-" + std::to_string(i % 97 + 1));
    if (i % 1000 == 999) put("\"nodeAffinity\":{", "\"nodeAffinity\":7,\"x\":{");
    return t;
  };
  std::string text =
      R"({"kind":"PersistentVolumeList","metadata":{"resourceVersion":"9"},"items":[)";
  for (int i = 0; i < 6000; ++i) text += (i ? "," : "") + fill(i);
  text += "]}";
  auto page = parsePvPage(text, nodeA(), defaultNodeKeys());
  ASSERT_TRUE(page) << page.error().message;
  EXPECT_EQ(page->items, 6000u);
  EXPECT_EQ(page->skipped, 6u);
  ASSERT_EQ(page->pinned.size(), 60u);
  EXPECT_EQ(page->pinned[59].name, "pvc-5900");
  EXPECT_EQ(page->pinned[59].volume_handle, "lv-5900");
}

TEST(ParseClaim, CdiAndKubevirtOwners) {
  // A claim CDI made for a VM's dataVolumeTemplate: owned by the DataVolume, with the VM's uid
  // in the label it copied from the DataVolume.
  auto dv_owned =
      parseClaim(R"({"metadata": {"name": "alice-root", "namespace": "vms", "uid": "c1a1",
      "labels": {"app": "containerized-data-importer", "kubevirt.io/created-by": "vm-uid-1"},
      "annotations": {"cdi.kubevirt.io/createdForDataVolume": "dv-uid-1"},
      "ownerReferences": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                           "name": "alice-root", "uid": "dv-uid-1", "controller": true}]},
      "status": {"phase": "Bound"}})");
  ASSERT_TRUE(dv_owned);
  EXPECT_EQ(dv_owned->uid, "c1a1");
  EXPECT_EQ(dv_owned->phase, "Bound");
  EXPECT_EQ(dv_owned->datavolume, "vms/alice-root");
  EXPECT_EQ(dv_owned->datavolume_uid, "dv-uid-1");
  EXPECT_EQ(dv_owned->created_by, "vm-uid-1");
  EXPECT_TRUE(dv_owned->vm.empty());
  // After CDI garbage-collects the DataVolume the VM owns the claim.
  auto vm_owned = parseClaim(R"({"metadata": {"name": "bob-root", "namespace": "vms",
      "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "bob"}]},
      "status": {"phase": "Bound"}})");
  ASSERT_TRUE(vm_owned);
  EXPECT_EQ(vm_owned->vm, "vms/bob");
  // Owners of other groups are not KubeVirt's.
  auto other = parseClaim(R"({"metadata": {"namespace": "x", "ownerReferences": [
      {"apiVersion": "example.com/v1", "kind": "VirtualMachine", "name": "impostor"}]}})");
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->vm.empty());
  EXPECT_FALSE(parseClaim("{}"));
  EXPECT_FALSE(parseClaim("garbage"));

  auto vm = vmOfDataVolume(R"({"metadata": {"name": "alice-root", "namespace": "vms",
      "labels": {"kubevirt.io/created-by": "vm-uid-1"},
      "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "alice",
                           "controller": true, "blockOwnerDeletion": true}]}})");
  ASSERT_TRUE(vm);
  EXPECT_EQ(*vm, "vms/alice");
  auto standalone = vmOfDataVolume(R"({"metadata": {"name": "golden", "namespace": "images"}})");
  ASSERT_TRUE(standalone);
  EXPECT_TRUE(standalone->empty());
}

TEST(ParseNode, NameAndLabels) {
  auto n = parseNode(
      R"({"metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "host-a"}}})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->name, "node-a");
  EXPECT_EQ(n->labels.at("kubernetes.io/hostname"), "host-a");
  EXPECT_FALSE(parseNode(R"({"metadata": {}})"));
}

}  // namespace
}  // namespace nodegate::kube
