#include "kube/pv_source.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <random>

#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

// 400 pages of 500: 200k PersistentVolumes. Past that something is wrong with the server (or the
// continue tokens loop), and one refresh must stay bounded.
constexpr std::size_t kMaxPages = 400;
// A node holds hundreds of volumes at most; a page claiming more pinned here is not believed.
constexpr std::size_t kMaxPinned = 10000;
constexpr int kAttempts = 4;

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json* obj(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

bool isInteger(const std::string& s, long long* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

// One requirement of a node selector term against a value that may be absent.
Result<bool> requirementHolds(const std::string& op, const std::string* actual,
                              const std::vector<std::string>& values) {
  const bool in = actual && std::find(values.begin(), values.end(), *actual) != values.end();
  if (op == "In") return in;
  if (op == "NotIn") return !in;
  if (op == "Exists") return actual != nullptr;
  if (op == "DoesNotExist") return actual == nullptr;
  if (op == "Gt" || op == "Lt") {
    long long have = 0, want = 0;
    if (values.size() != 1 || !isInteger(values[0], &want))
      return Error{EINVAL, "operator " + op + " needs one integer value"};
    if (!actual || !isInteger(*actual, &have)) return false;
    return op == "Gt" ? have > want : have < want;
  }
  return Error{EINVAL, "unknown operator \"" + op + "\""};
}

Result<std::vector<std::string>> stringList(const json& req) {
  std::vector<std::string> out;
  auto it = req.find("values");
  if (it == req.end() || it->is_null()) return out;
  if (!it->is_array()) return Error{EINVAL, "values is not a list"};
  for (const auto& v : *it) {
    if (!v.is_string()) return Error{EINVAL, "a value is not a string"};
    out.push_back(v.get<std::string>());
  }
  return out;
}

int errnoOf(long code, const std::string& transport) {
  if (code == 401 || code == 403) return EACCES;
  if (code == 0 && transport.find("imeout") != std::string::npos) return ETIMEDOUT;
  return EIO;
}

}  // namespace

std::vector<std::string> defaultNodeKeys() {
  // kubelet's hostname label (local volumes), TopoLVM (old and new group), OpenEBS lvm-localpv.
  return {"kubernetes.io/hostname", "topology.topolvm.io/node", "topology.topolvm.cybozu.com/node",
          "openebs.io/nodename"};
}

Result<NodeIdentity> parseNode(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  const json* md = obj(j, "metadata");
  if (!md || str(*md, "name").empty())
    return Error{EINVAL, "failed to parse node: no metadata.name"};
  NodeIdentity n;
  n.name = str(*md, "name");
  if (const json* labels = obj(*md, "labels"))
    for (const auto& [k, v] : labels->items())
      if (v.is_string()) n.labels[k] = v.get<std::string>();
  return n;
}

Result<bool> pinnedToNode(const json& aff, const NodeIdentity& node,
                          const std::vector<std::string>& node_keys) {
  if (aff.is_null()) return false;
  if (!aff.is_object()) return Error{EINVAL, "nodeAffinity is not an object"};
  auto req = aff.find("required");
  if (req == aff.end() || req->is_null()) return false;
  if (!req->is_object()) return Error{EINVAL, "nodeAffinity.required is not an object"};
  auto terms = req->find("nodeSelectorTerms");
  if (terms == req->end() || terms->is_null()) return false;
  if (!terms->is_array()) return Error{EINVAL, "nodeSelectorTerms is not a list"};
  for (const auto& term : *terms) {
    if (!term.is_object()) return Error{EINVAL, "a node selector term is not an object"};
    bool holds = true, names_node = false, any = false;
    for (const char* section : {"matchExpressions", "matchFields"}) {
      auto list = term.find(section);
      if (list == term.end() || list->is_null()) continue;
      if (!list->is_array()) return Error{EINVAL, std::string(section) + " is not a list"};
      const bool fields = section[5] == 'F';
      for (const auto& r : *list) {
        if (!r.is_object() || str(r, "key").empty() || str(r, "operator").empty())
          return Error{EINVAL, std::string(section) + " entry without key or operator"};
        auto values = stringList(r);
        if (!values) return Error{EINVAL, std::string(section) + ": " + values.error().message};
        const std::string key = str(r, "key"), op = str(r, "operator");
        const std::string* actual = nullptr;
        if (fields) {
          // The only field a node selector may use.
          if (key != "metadata.name") return Error{EINVAL, "matchFields key \"" + key + "\""};
          actual = &node.name;
        } else if (auto it = node.labels.find(key); it != node.labels.end()) {
          actual = &it->second;
        }
        auto ok = requirementHolds(op, actual, *values);
        if (!ok) return ok.error();
        any = true;
        holds = holds && *ok;
        if (op == "In" &&
            (fields || std::find(node_keys.begin(), node_keys.end(), key) != node_keys.end()))
          names_node = true;
      }
    }
    // An empty term selects nothing (the API's rule); a zone-wide term is not a pin.
    if (any && holds && names_node) return true;
  }
  return false;
}

Result<PvPage> parsePvPage(std::string_view body, const NodeIdentity& node,
                           const std::vector<std::string>& node_keys) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{EINVAL, "failed to parse PersistentVolumeList: not a JSON object"};
  if (auto kind = str(j, "kind"); !kind.empty() && kind != "PersistentVolumeList")
    return Error{EINVAL, "failed to parse PersistentVolumeList: kind is " + kind};
  PvPage page;
  if (const json* md = obj(j, "metadata")) {
    page.resource_version = str(*md, "resourceVersion");
    page.continue_token = str(*md, "continue");
  }
  auto items = j.find("items");
  if (items == j.end() || items->is_null()) return page;
  if (!items->is_array())
    return Error{EINVAL, "failed to parse PersistentVolumeList: items is not a list"};
  for (const auto& item : *items) {
    ++page.items;
    auto skip = [&](const std::string& name, const std::string& why) {
      if (page.skipped++ == 0) page.first_skip = (name.empty() ? "an item" : name) + ": " + why;
    };
    const json* md = obj(item, "metadata");
    const json* spec = obj(item, "spec");
    const std::string name = md ? str(*md, "name") : std::string();
    if (name.empty() || !spec) {
      skip(name, "no metadata.name or spec");
      continue;
    }
    auto aff = spec->find("nodeAffinity");
    auto pinned = pinnedToNode(aff == spec->end() ? json() : *aff, node, node_keys);
    if (!pinned) {
      skip(name, pinned.error().message);
      continue;
    }
    if (!*pinned) continue;
    if (page.pinned.size() >= kMaxPinned) {
      skip(name, "more than " + std::to_string(kMaxPinned) + " PVs pinned to one node");
      continue;
    }
    LocalPv pv;
    pv.name = name;
    pv.attached = false;
    pv.from_api = true;
    pv.block = str(*spec, "volumeMode") == "Block";
    pv.reclaim = str(*spec, "persistentVolumeReclaimPolicy");
    if (auto csi = spec->find("csi"); csi != spec->end()) {
      if (!csi->is_object() || str(*csi, "driver").empty()) {
        skip(name, "spec.csi without a driver");
        continue;
      }
      pv.driver = str(*csi, "driver");
      pv.volume_handle = str(*csi, "volumeHandle");
      if (const json* attrs = obj(*csi, "volumeAttributes"))
        pv.volume_group = str(*attrs, "openebs.io/volgroup");
    } else if (const json* local = obj(*spec, "local")) {
      pv.driver = "kubernetes.io/local";
      pv.local_path = str(*local, "path");
      if (pv.local_path.empty() || pv.local_path.front() != '/') {
        skip(name, "spec.local.path is not an absolute path");
        continue;
      }
    }
    if (const json* status = obj(item, "status")) pv.phase = str(*status, "phase");
    std::string claim_uid;
    if (const json* ref = obj(*spec, "claimRef")) {
      if (!str(*ref, "name").empty()) pv.claim = str(*ref, "namespace") + "/" + str(*ref, "name");
      claim_uid = str(*ref, "uid");
    }
    page.pinned.push_back(std::move(pv));
    page.claim_uids.push_back(claim_uid);
    page.resource_versions.push_back(str(*md, "resourceVersion"));
  }
  return page;
}

Result<ClaimInfo> parseClaim(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  const json* md = obj(j, "metadata");
  if (!md) return Error{EINVAL, "failed to parse PersistentVolumeClaim: no metadata"};
  ClaimInfo c;
  c.uid = str(*md, "uid");
  const std::string ns = str(*md, "namespace");
  if (const json* status = obj(j, "status")) c.phase = str(*status, "phase");
  if (const json* labels = obj(*md, "labels"))
    c.created_by = str(*labels, "kubevirt.io/created-by");
  auto refs = md->find("ownerReferences");
  if (refs != md->end() && refs->is_array()) {
    for (const auto& r : *refs) {
      const std::string kind = str(r, "kind"), api = str(r, "apiVersion"), name = str(r, "name");
      if (name.empty()) continue;
      // A VM owns the claim directly when CDI garbage-collected the DataVolume and handed the
      // claim to the DataVolume's owner, or when the claim was made for the VM by hand.
      if (kind == "VirtualMachine" && api.rfind("kubevirt.io/", 0) == 0) c.vm = ns + "/" + name;
      if (kind == "DataVolume" && api.rfind("cdi.kubevirt.io/", 0) == 0) {
        c.datavolume = ns + "/" + name;
        c.datavolume_uid = str(r, "uid");
      }
    }
  }
  return c;
}

Result<std::string> vmOfDataVolume(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  const json* md = obj(j, "metadata");
  if (!md) return Error{EINVAL, "failed to parse DataVolume: no metadata"};
  auto refs = md->find("ownerReferences");
  if (refs != md->end() && refs->is_array())
    for (const auto& r : *refs)
      if (str(r, "kind") == "VirtualMachine" &&
          str(r, "apiVersion").rfind("kubevirt.io/", 0) == 0 && !str(r, "name").empty())
        return str(*md, "namespace") + "/" + str(r, "name");
  return std::string();
}

ApiPvSource::ApiPvSource(std::shared_ptr<Connection> connection, ApiPvOptions options)
    : o_(std::move(options)), conn_(std::move(connection)), http_(*conn_, stop_) {
  if (o_.start_thread) thread_ = std::thread([this] { loop(); });
}

ApiPvSource::~ApiPvSource() {
  stop_.stop();
  if (thread_.joinable()) thread_.join();
}

void ApiPvSource::loop() {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  while (!stop_.stopped()) {
    refresh();
    if (!stop_.sleepFor(o_.resync * jitter(rng))) return;
  }
}

HttpResponse ApiPvSource::get(const std::string& verb, const std::string& path) {
  Backoff backoff(0.5, 8, std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    auto r = http_.request(verb, "GET", path, {}, {}, o_.timeout_s);
    const bool retry = r.code == 0 || r.code == 429 || r.code >= 500;
    if (!retry || attempt >= kAttempts || stop_.stopped()) return r;
    // Retry-After is the server's promise of when to come back; otherwise back off.
    double wait = r.retry_after && (r.code == 429 || r.code == 503) ? std::min(*r.retry_after, 30.0)
                                                                    : backoff.next();
    if (!stop_.sleepFor(std::chrono::duration<double>(wait))) return r;
  }
}

void ApiPvSource::refresh() {
  auto fail = [&](Error e) {
    log::warn("failed to refresh persistent volumes",
              {{"node", o_.node_name}, {"error", e.message}});
    std::lock_guard lk(mu_);
    error_ = std::move(e);
  };
  auto n = get("get", "/api/v1/nodes/" + o_.node_name);
  if (n.code != 200) {
    fail(
        Error{errnoOf(n.code, n.error), "failed to get node " + o_.node_name + ": " + describe(n)});
    return;
  }
  auto node = parseNode(n.body);
  if (!node) return fail(node.error());
  auto listing = listPinned(*node);
  if (!listing) return fail(listing.error());
  std::lock_guard lk(mu_);
  view_ = std::move(listing).value();
  have_view_ = true;
  view_at_ = std::chrono::steady_clock::now();
  error_.reset();
}

Result<PvListing> ApiPvSource::listPinned(const NodeIdentity& node) {
  std::vector<LocalPv> pinned;
  std::vector<std::string> uids, rvs;
  std::size_t items = 0, skipped = 0, pages = 0;
  std::string first_skip, list_rv, cont;
  bool restarted = false;
  for (;;) {
    std::string path = "/api/v1/persistentvolumes?limit=" + std::to_string(o_.page_size);
    if (!cont.empty())
      path += "&continue=" + urlEncode(cont);
    else if (!last_rv_.empty())
      path += "&resourceVersion=" + urlEncode(last_rv_) + "&resourceVersionMatch=NotOlderThan";
    auto r = get("list", path);
    // 410: the continue token (or our resourceVersion) fell out of the server's window; 504:
    // the server does not have our resourceVersion yet (a restored etcd). Start over, once.
    if ((r.code == 410 || (r.code == 504 && cont.empty() && !last_rv_.empty())) && !restarted) {
      restarted = true;
      last_rv_.clear();
      cont.clear();
      pinned.clear();
      uids.clear();
      rvs.clear();
      items = skipped = pages = 0;
      first_skip.clear();
      list_rv.clear();
      continue;
    }
    if (r.code != 200)
      return Error{errnoOf(r.code, r.error), "failed to list persistentvolumes: " + describe(r)};
    auto page = parsePvPage(r.body, node, o_.node_keys);
    if (!page) return page.error();
    ++pages;
    items += page->items;
    if (page->skipped && skipped == 0) first_skip = page->first_skip;
    skipped += page->skipped;
    if (list_rv.empty()) list_rv = page->resource_version;
    for (std::size_t i = 0; i < page->pinned.size(); ++i) {
      pinned.push_back(std::move(page->pinned[i]));
      uids.push_back(page->claim_uids[i]);
      rvs.push_back(page->resource_versions[i]);
    }
    if (page->continue_token.empty()) break;
    if (pages >= kMaxPages)
      return Error{E2BIG, "failed to list persistentvolumes: more than " +
                              std::to_string(kMaxPages) + " pages of " +
                              std::to_string(o_.page_size)};
    cont = page->continue_token;
  }
  last_rv_ = list_rv;
  std::string note;
  resolveClaims(&pinned, uids, rvs, &note);
  PvListing out;
  out.detail = redactedUrl(conn_->config().server) + ": " + std::to_string(items) +
               " PersistentVolumes in " + std::to_string(pages) +
               (pages == 1 ? " page" : " pages") + " at resourceVersion " +
               (list_rv.empty() ? "?" : list_rv) + ", " + std::to_string(pinned.size()) +
               " pinned to " + node.name;
  if (skipped)
    out.detail += ", " + std::to_string(skipped) + " malformed skipped (first: " + first_skip + ")";
  if (skipped)
    log::warn("skipped malformed persistent volumes",
              {{"count", std::to_string(skipped)}, {"first", first_skip}});
  out.detail += note;
  out.pvs = std::move(pinned);
  return out;
}

void ApiPvSource::resolveClaims(std::vector<LocalPv>* pvs, const std::vector<std::string>& uids,
                                const std::vector<std::string>& rvs, std::string* note) {
  std::map<std::string, Cached> fresh;
  std::size_t gets = 0, unresolved = 0;
  std::string claim_problem, dv_problem;
  for (std::size_t i = 0; i < pvs->size(); ++i) {
    LocalPv& pv = (*pvs)[i];
    if (pv.claim.empty()) continue;
    Cached c;
    // The VM that owns a claim never changes, and a Bound claim stays Bound until its PV
    // changes too (Released). A claim in any other phase is looked at again each refresh: the
    // PV controller binds the claim after the PV, so a Pending seen once would otherwise stick.
    auto it = cache_.find(pv.name);
    const bool settled = it != cache_.end() && it->second.pv_rv == rvs[i] &&
                         it->second.claim_uid == uids[i] &&
                         (it->second.claim.phase == "Bound" ||
                          (it->second.claim.phase == "Missing" && !uids[i].empty()));
    if (settled) {
      c = it->second;
    } else if (gets >= o_.max_claim_gets || !claim_problem.empty()) {
      ++unresolved;
      continue;
    } else {
      ++gets;
      const auto slash = pv.claim.find('/');
      const std::string ns = pv.claim.substr(0, slash), name = pv.claim.substr(slash + 1);
      auto r = get("get", "/api/v1/namespaces/" + urlEncode(ns) + "/persistentvolumeclaims/" +
                              urlEncode(name));
      c.pv_rv = rvs[i];
      c.claim_uid = uids[i];
      if (r.code == 404) {
        c.claim.phase = "Missing";
      } else if (r.code != 200) {
        claim_problem = describe(r);
        ++unresolved;
        continue;
      } else if (auto info = parseClaim(r.body); !info) {
        claim_problem = info.error().message;
        ++unresolved;
        continue;
      } else if (!uids[i].empty() && !info->uid.empty() && info->uid != uids[i]) {
        // Same name, another claim: the one this PV was bound to is gone.
        c.claim.phase = "Missing";
      } else {
        c.claim = *info;
        c.claim_found = true;
      }
      if (c.claim_found && c.claim.vm.empty() && !c.claim.datavolume.empty()) {
        if (auto dv = dv_vm_.find(c.claim.datavolume_uid);
            !c.claim.datavolume_uid.empty() && dv != dv_vm_.end()) {
          c.claim.vm = dv->second;
        } else if (dv_problem.empty()) {
          const auto s = c.claim.datavolume.find('/');
          auto d = get("get", "/apis/cdi.kubevirt.io/v1beta1/namespaces/" +
                                  urlEncode(c.claim.datavolume.substr(0, s)) + "/datavolumes/" +
                                  urlEncode(c.claim.datavolume.substr(s + 1)));
          if (d.code == 200) {
            if (auto vm = vmOfDataVolume(d.body)) c.claim.vm = *vm;
          } else if (d.code != 404) {
            dv_problem = describe(d);
          }
          if (d.code == 200 || d.code == 404) dv_vm_[c.claim.datavolume_uid] = c.claim.vm;
        }
      }
    }
    pv.claim_phase = c.claim.phase;
    pv.vm = c.claim.vm;
    if (pv.vm.empty() && !c.claim.datavolume.empty())
      pv.owner = "DataVolume " + c.claim.datavolume;
    else if (pv.vm.empty() && !c.claim.created_by.empty())
      pv.owner = "VM uid " + c.claim.created_by;
    fresh[pv.name] = std::move(c);
  }
  cache_ = std::move(fresh);  // PVs that left take their entries with them
  if (unresolved)
    *note += ", " + std::to_string(unresolved) + " claims not looked up yet" +
             (claim_problem.empty() ? "" : " (" + claim_problem + ")");
  if (!dv_problem.empty()) *note += ", DataVolumes not readable (" + dv_problem + ")";
}

Result<PvListing> ApiPvSource::list(const HostRoot&, const Config&) {
  std::lock_guard lk(mu_);
  const double age =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - view_at_).count();
  if (error_ && (error_->code == EACCES || !have_view_ || age > o_.max_age_s)) return *error_;
  if (!have_view_) return Error{EAGAIN, "waiting for the first list of PersistentVolumes"};
  PvListing out = view_;
  out.detail += ", " + std::to_string(static_cast<long long>(age)) + " s old";
  if (error_) out.detail += " (the last refresh failed: " + error_->message + ")";
  return out;
}

}  // namespace nodegate::kube
