// local-pv's API source: the PersistentVolumes whose node affinity pins them to this node, with
// their claim and the KubeVirt VM that owns the claim. Read only (list and get, never a write).
//
// A thread of its own refreshes the view on the resync period (jittered): it gets the Node (for
// its labels: affinity selects labels, not names), lists PVs in pages (limit/continue; after
// the first refresh with resourceVersion=<last>&resourceVersionMatch=NotOlderThan so the server
// may answer from its watch cache without going back in time), and gets each claim (and its
// DataVolume) only when the PV changed. list() hands the last view to the probe at once, so a
// slow API server never holds up a probe cycle. 429/503 wait for Retry-After, other 5xx and
// transport errors back off and retry; 401/403 fail at once (an RBAC problem is not transient).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <prometheus/registry.h>
#include <nlohmann/json.hpp>

#include "kube/connection.h"
#include "local_pv.h"
#include "nodegate/config.h"

namespace nodegate::kube {

// The Node as affinity sees it.
struct NodeIdentity {
  std::string name;
  std::map<std::string, std::string> labels;
};
Result<NodeIdentity> parseNode(std::string_view body);

// Label keys that name one node: a PV whose matching affinity term uses one of these (or
// matchFields metadata.name) is pinned to a node, not merely to a zone.
// checks.local-pv.api_node_keys overrides.
std::vector<std::string> defaultNodeKeys();

// Whether a PV's spec.nodeAffinity pins it to `node`. Error: the affinity is malformed.
Result<bool> pinnedToNode(const nlohmann::json& node_affinity, const NodeIdentity& node,
                          const std::vector<std::string>& node_keys);

// One page of a PersistentVolumeList: the PVs pinned to the node, and what the page said.
struct PvPage {
  std::vector<LocalPv> pinned;
  std::vector<std::string> claim_uids;         // per pinned PV: spec.claimRef.uid ("" if none)
  std::vector<std::string> resource_versions;  // per pinned PV: metadata.resourceVersion
  std::size_t items = 0, skipped = 0;          // items seen; malformed ones skipped
  std::string first_skip;                      // why the first skipped item was skipped
  std::string resource_version, continue_token;
};
Result<PvPage> parsePvPage(std::string_view body, const NodeIdentity& node,
                           const std::vector<std::string>& node_keys);

// What a claim adds: its phase and who owns it.
struct ClaimInfo {
  std::string uid, phase;
  std::string vm;          // "namespace/name" when a VirtualMachine owns the claim
  std::string datavolume;  // "namespace/name" when a DataVolume does (its VM is one get away)
  std::string datavolume_uid;
  std::string created_by;  // kubevirt.io/created-by: the VM's uid, when only that is known
};
Result<ClaimInfo> parseClaim(std::string_view body);
// The VirtualMachine owning a DataVolume ("namespace/name"), "" if none.
Result<std::string> vmOfDataVolume(std::string_view body);

struct ApiPvOptions {
  std::string node_name;
  std::chrono::duration<double> resync{60};
  std::size_t page_size = 500;       // checks.local-pv.api_page_size
  double timeout_s = 20;             // checks.local-pv.api_timeout_seconds, per request
  double max_age_s = 180;            // checks.local-pv.api_max_age_seconds: a failed refresh keeps
                                     // serving the last view this long (not after 401/403)
  std::size_t max_claim_gets = 100;  // per refresh; the rest wait for the next one
  std::vector<std::string> node_keys = defaultNodeKeys();
  bool start_thread = true;  // tests drive refresh() themselves
};

class ApiPvSource final : public PvSource {
 public:
  // Requests go through the process's shared connection (and its budget).
  ApiPvSource(std::shared_ptr<Connection> connection, ApiPvOptions options);
  ~ApiPvSource() override;
  ApiPvSource(const ApiPvSource&) = delete;
  ApiPvSource& operator=(const ApiPvSource&) = delete;

  std::string_view name() const override { return "api"; }
  // The last view; EAGAIN before the first refresh ends, EACCES after 401/403.
  Result<PvListing> list(const HostRoot& host, const Config& cfg) override;
  // One refresh, on the caller's thread.
  void refresh();

 private:
  struct Cached {
    std::string pv_rv, claim_uid;
    ClaimInfo claim;
    bool claim_found = false;
  };
  HttpResponse get(const std::string& verb, const std::string& path);
  Result<PvListing> listPinned(const NodeIdentity& node);
  void resolveClaims(std::vector<LocalPv>* pvs, const std::vector<std::string>& claim_uids,
                     const std::vector<std::string>& pv_rvs, std::string* note);
  void loop();

  ApiPvOptions o_;
  std::shared_ptr<Connection> conn_;
  Stopper stop_;
  ApiClient http_;                            // refresh thread only
  std::string last_rv_;                       // refresh thread only
  std::map<std::string, Cached> cache_;       // pv name -> claim details; refresh thread
  std::map<std::string, std::string> dv_vm_;  // DataVolume uid -> VM; refresh thread

  std::mutex mu_;
  bool have_view_ = false;
  PvListing view_;
  std::chrono::steady_clock::time_point view_at_{};
  std::optional<Error> error_;
  std::thread thread_;
};

}  // namespace nodegate::kube
