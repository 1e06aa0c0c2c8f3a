// The Kubernetes publisher: one thread reconciles the latest snapshot against the last Node
// it observed (writing only differences), another watches the Node so that anyone else's
// edit of our labels, conditions or taint is seen and undone. publish() only hands over.
#include <curl/curl.h>

#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "dns_path.h"
#include "nodegate/agent_settings.h"
#include "nodegate/log.h"
#include "publish/kube/kube.h"
#include "publish/kube/publisher.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// Repeats of the same transition within this window are folded into one event's series.
constexpr auto kSeriesWindow = std::chrono::minutes(30);
constexpr int kMaxEventAttempts = 5;
constexpr int kMaxConflictRetries = 5;

std::string rvOf(const json& obj) {
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return {};
  return md->value("resourceVersion", "");
}

// resourceVersions are opaque to clients, but every server in practice (etcd revisions, and
// our fake) issues increasing integers; when both parse, an older one is never adopted.
bool newerRv(const std::string& a, const std::string& b) {
  if (b.empty()) return true;
  char* ea = nullptr;
  char* eb = nullptr;
  unsigned long long na = std::strtoull(a.c_str(), &ea, 10);
  unsigned long long nb = std::strtoull(b.c_str(), &eb, 10);
  if (!a.empty() && !b.empty() && ea && *ea == '\0' && eb && *eb == '\0') return na > nb;
  return a != b;
}

std::optional<json> parseJson(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

class KubePublisher final : public Publisher {
 public:
  KubePublisher(ClientConfig client, PublisherOptions o, prometheus::Registry& registry)
      : o_(std::move(o)),
        creds_(std::move(client)),
        limiter_(o_.qps, o_.burst),
        counter_(requestCounter(registry)),
        rng_(o_.seed ? o_.seed : std::random_device{}()),
        backoff_(0.5, 30, rng_()),
        api_(creds_, limiter_, stop_, counter_),
        watch_api_(creds_, limiter_, stop_, counter_),
        cluster_api_(creds_, limiter_, stop_, counter_) {
    std::uniform_real_distribution<double> spread(1.0, 1.1);
    // Each agent's heartbeat drifts a little so a fleet started together does not stay in step.
    heartbeat_ = std::chrono::seconds(
        static_cast<long long>(static_cast<double>(o_.heartbeat.count()) * spread(rng_)));
    startup_delay_ =
        std::uniform_real_distribution<double>(0, std::max(0.0, o_.startup_jitter_s))(rng_);
    watch_seed_ = rng_();
    log::info("kubernetes publisher started", {{"server", creds_.config().server},
                                               {"source", creds_.config().source},
                                               {"node", o_.publish.node_name}});
    reconciler_ = std::thread([this] { reconcileLoop(); });
    watcher_ = std::thread([this] { watchLoop(); });
    if (o_.cluster_dns) cluster_reader_ = std::thread([this] { clusterDnsLoop(); });
  }

  ~KubePublisher() override {
    // Shutdown writes nothing: labels stay, so a restart does not flap the gate.
    stop_.stop();
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    reconciler_.join();
    watcher_.join();
    if (cluster_reader_.joinable()) cluster_reader_.join();
  }

  void publish(const Snapshot& snapshot) override {
    {
      std::lock_guard lk(mu_);
      latest_ = snapshot;
      snapshot_dirty_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::string nodePath() const { return "/api/v1/nodes/" + o_.publish.node_name; }

  static std::string uidOf(const json& obj) {
    auto md = obj.find("metadata");
    return md != obj.end() && md->is_object() ? md->value("uid", "") : std::string();
  }

  // Adopts a Node seen in a response, a relist or a watch event unless it is no newer than
  // what we hold or than what we wrote ourselves: a stale copy (a watch event delivered late,
  // a GET answered before our PATCH landed) would otherwise make us "repair" our own write.
  // A different uid is a Node deleted and created again, always adopted.
  void offerNode(const json& node) {
    {
      std::lock_guard lk(mu_);
      if (node_ && uidOf(node) == uidOf(*node_)) {
        if (!newerRv(rvOf(node), rvOf(*node_))) return;
        if (!written_rv_.empty() && !newerRv(rvOf(node), written_rv_)) return;
      } else {
        written_rv_.clear();
      }
      node_ = node;
      node_dirty_ = true;
    }
    cv_.notify_all();
  }

  void adoptWritten(const json& node) {
    std::lock_guard lk(mu_);
    // Our own write is already reconciled: keep it without waking the loop again.
    std::string rv = rvOf(node);
    if (!rv.empty() && newerRv(rv, written_rv_)) written_rv_ = rv;
    if (!node_ || newerRv(rv, rvOf(*node_))) node_ = node;
  }

  void reconcileLoop() {
    if (!stop_.sleepFor(std::chrono::duration<double>(startup_delay_))) return;
    auto wake = SteadyClock::now() + std::chrono::hours(24);
    bool force = false;  // a retry or heartbeat is due even though nothing changed
    std::unique_lock lk(mu_);
    for (;;) {
      bool ready = cv_.wait_until(lk, wake, [&] {
        return stopping_ || ((snapshot_dirty_ || node_dirty_ || force) && latest_ && node_);
      });
      if (stopping_) return;
      if (!ready) force = true;  // the heartbeat (or retry) time came
      wake = SteadyClock::now() + std::chrono::hours(24);
      if (!latest_ || !node_) continue;
      snapshot_dirty_ = node_dirty_ = force = false;
      // Before every probe has run once, absent labels would look stale: write nothing yet.
      if (!latest_->complete) continue;
      Snapshot snap = *latest_;
      json node = *node_;
      lk.unlock();
      Next next = reconcileOnce(snap, node);
      if (next.retry) {
        // Hold off even if snapshots keep coming: Retry-After and backoff are promises.
        if (!stop_.sleepFor(next.at - SteadyClock::now())) return;
        lk.lock();
        force = true;
        continue;
      }
      lk.lock();
      wake = next.at;
    }
  }

  struct Next {
    SteadyClock::time_point at;
    bool retry;
  };

  SteadyClock::time_point retryAfter(const HttpResponse& r) {
    double delay = r.retry_after && (r.code == 429 || r.code == 503)
                       ? std::min(*r.retry_after, 300.0)
                       : backoff_.next();
    return SteadyClock::now() + std::chrono::milliseconds(static_cast<long long>(delay * 1000));
  }

  Next failed(const HttpResponse& r, const std::string& what) {
    log::warn("failed to " + what, {{"node", o_.publish.node_name}, {"error", describe(r)}});
    return {retryAfter(r), true};
  }

  Next reconcileOnce(const Snapshot& snap, json node) {
    const Desired want = desiredState(snap, o_.publish);

    for (int attempt = 0;; ++attempt) {
      auto patch = nodePatch(want, node, o_.publish);
      if (!patch) break;
      auto r =
          api_.request("patch", "PATCH", nodePath(), "application/merge-patch+json", patch->dump());
      if (r.ok()) {
        if (auto n = parseJson(r.body)) {
          node = *n;
          adoptWritten(node);
        }
        log::info("updated node metadata",
                  {{"node", o_.publish.node_name}, {"patch", patch->dump()}});
        break;
      }
      // Someone changed the Node (usually its taints) since we read it: read again and redo.
      if (r.code == 409 && attempt < kMaxConflictRetries) {
        auto g = api_.request("get", "GET", nodePath());
        auto n = g.ok() ? parseJson(g.body) : std::nullopt;
        if (!n) return failed(g, "get node " + o_.publish.node_name);
        node = *n;
        offerNode(node);
        continue;
      }
      return failed(r, "patch node " + o_.publish.node_name);
    }

    auto now = std::chrono::system_clock::now();
    auto changes = transitions(want, node);
    if (auto sp = statusPatch(want, node, now, heartbeat_)) {
      auto r = api_.request("patch", "PATCH", nodePath() + "/status",
                            "application/strategic-merge-patch+json", sp->dump());
      if (!r.ok()) return failed(r, "patch node status " + o_.publish.node_name);
      if (auto n = parseJson(r.body)) {
        node = *n;
        adoptWritten(node);
      }
      for (const auto& t : changes) {
        log::info("node condition changed", {{"node", o_.publish.node_name},
                                             {"condition", t.to.type},
                                             {"from", t.from.empty() ? "none" : t.from},
                                             {"to", t.to.status},
                                             {"reason", t.to.reason}});
        pending_events_.push_back({t, now, 0});
      }
      log::debug("updated node status", {{"node", o_.publish.node_name}, {"patch", sp->dump()}});
    }
    if (auto retry = flushEvents(node)) return *retry;
    backoff_.reset();

    auto due = nextHeartbeat(want, node, heartbeat_);
    if (due == std::chrono::system_clock::time_point::max())
      return {SteadyClock::now() + std::chrono::hours(24), false};
    auto in = std::max<std::chrono::system_clock::duration>(due - std::chrono::system_clock::now(),
                                                            std::chrono::seconds(1));
    return {SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(in), false};
  }

  struct PendingEvent {
    Transition t;
    std::chrono::system_clock::time_point at;
    int attempts;
  };
  struct Series {
    std::string name;
    int count;
    std::chrono::system_clock::time_point last;
  };

  std::string eventsPath() const {
    return "/apis/events.k8s.io/v1/namespaces/" + o_.event_namespace + "/events";
  }

  // Events are best effort, as in client-go: a few attempts, then dropped with a warning.
  std::optional<Next> flushEvents(const json& node) {
    while (!pending_events_.empty()) {
      auto& e = pending_events_.front();
      auto r = postEvent(e, node);
      if (r.ok()) {
        pending_events_.pop_front();
        continue;
      }
      if (++e.attempts >= kMaxEventAttempts) {
        log::warn(
            "failed to post event, dropping it",
            {{"node", o_.publish.node_name}, {"condition", e.t.to.type}, {"error", describe(r)}});
        pending_events_.pop_front();
        continue;
      }
      return failed(r, "post event for " + o_.publish.node_name);
    }
    return std::nullopt;
  }

  HttpResponse postEvent(const PendingEvent& e, const json& node) {
    const Transition& t = e.t;
    std::string key = t.to.type + "|" + t.to.status + "|" + t.to.reason;
    auto now = std::chrono::system_clock::now();
    if (auto it = series_.find(key); it != series_.end() && now - it->second.last < kSeriesWindow) {
      json patch = {
          {"series",
           {{"count", it->second.count + 1}, {"lastObservedTime", formatMicroTime(e.at)}}}};
      auto r = api_.request("patch", "PATCH", eventsPath() + "/" + it->second.name,
                            "application/merge-patch+json", patch.dump());
      if (r.ok()) {
        it->second.count += 1;
        it->second.last = now;
        return r;
      }
      if (r.code != 404) return r;
      series_.erase(it);  // expired on the server (events have a TTL): start a new one
    }
    auto nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(e.at.time_since_epoch()).count();
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".%llx", static_cast<unsigned long long>(nanos));
    std::string name = o_.publish.node_name + suffix;
    std::string uid = node.contains("metadata") ? node["metadata"].value("uid", "") : "";
    json ev = {
        {"apiVersion", "events.k8s.io/v1"},
        {"kind", "Event"},
        {"metadata", {{"name", name}, {"namespace", o_.event_namespace}}},
        {"eventTime", formatMicroTime(e.at)},
        {"reportingController", o_.publish.prefix + "/agent"},
        {"reportingInstance",
         (o_.publish.prefix + "/agent-" + o_.publish.node_name).substr(0, 128)},
        {"action", "CheckStatus"},
        {"reason", t.to.reason},
        {"type", t.to.status == "True" ? "Normal" : "Warning"},
        {"note", (t.to.type + " is " + t.to.status + ": " + t.to.message).substr(0, 1024)},
        {"regarding",
         {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", o_.publish.node_name}, {"uid", uid}}},
    };
    auto r = api_.request("create", "POST", eventsPath(), "application/json", ev.dump());
    if (r.ok()) series_[key] = {name, 1, now};
    return r;
  }

  // Reads only: Cilium's ConfigMap and CoreDNS's EndpointSlices, every o_.cluster.refresh (plus
  // or minus 10%, so a fleet does not read in step). A failed read is published as such: the
  // dns-path check says what it could not see.
  void clusterDnsLoop() {
    if (!stop_.sleepFor(std::chrono::duration<double>(startup_delay_))) return;
    std::mt19937_64 rng(watch_seed_ ^ 0x5851f42d4c957f2dULL);
    std::optional<ClusterDnsFacts> last;
    while (!stop_.stopped()) {
      ClusterDnsFacts f = fetchClusterDns(cluster_api_, o_.cluster);
      if (stop_.stopped()) return;
      if (!last || last->cilium_detail != f.cilium_detail ||
          last->endpoints_detail != f.endpoints_detail) {
        auto level = f.cilium_read == ApiRead::Forbidden || f.cilium_read == ApiRead::Failed ||
                             f.endpoints_read != ApiRead::Ok
                         ? log::Level::Warn
                         : log::Level::Info;
        log::write(level, "cluster dns facts",
                   {{"cilium", f.cilium_detail}, {"coredns", f.endpoints_detail}});
      }
      o_.cluster_dns->publish(f);
      last = std::move(f);
      double period = static_cast<double>(std::max<long long>(1, o_.cluster.refresh.count())) *
                      std::uniform_real_distribution<double>(0.9, 1.1)(rng);
      if (!stop_.sleepFor(std::chrono::duration<double>(period))) return;
    }
  }

  void watchLoop() {
    Backoff bo(0.5, 30, watch_seed_);
    std::mt19937_64 rng(watch_seed_ ^ 0x9e3779b97f4a7c15ULL);
    std::string rv;
    auto pause = [&](const HttpResponse& r) {
      double d = r.retry_after && (r.code == 429 || r.code == 503) ? std::min(*r.retry_after, 300.0)
                                                                   : bo.next();
      return stop_.sleepFor(std::chrono::duration<double>(d));
    };
    while (!stop_.stopped()) {
      if (rv.empty()) {
        auto r = watch_api_.request("get", "GET", nodePath());
        auto n = r.ok() ? parseJson(r.body) : std::nullopt;
        if (!n) {
          log::warn("failed to get node " + o_.publish.node_name, {{"error", describe(r)}});
          if (!pause(r)) return;
          continue;
        }
        rv = rvOf(*n);
        offerNode(*n);
      }
      auto timeout = static_cast<long long>(o_.watch_timeout_s *
                                            std::uniform_real_distribution<double>(1.0, 1.5)(rng));
      std::string path = "/api/v1/nodes?fieldSelector=metadata.name%3D" + o_.publish.node_name +
                         "&watch=true&allowWatchBookmarks=true&resourceVersion=" + rv +
                         "&timeoutSeconds=" + std::to_string(timeout);
      bool relist = false, failed_event = false;
      int events = 0;
      auto started = SteadyClock::now();
      auto r = watch_api_.stream(
          path,
          [&](std::string_view line) {
            auto ev = parseJson(line);
            if (!ev || !ev->contains("type") || !ev->contains("object")) return true;
            const std::string type = ev->value("type", "");
            const json& obj = (*ev)["object"];
            if (type == "ERROR") {
              // 410 Gone: our resourceVersion fell out of the server's window; start over.
              if (obj.is_object() && obj.value("code", 0) == 410)
                relist = true;
              else
                failed_event = true;
              return false;
            }
            ++events;
            // Resume from the newest version seen: a late event must not rewind the watch.
            if (auto v = rvOf(obj); !v.empty() && newerRv(v, rv)) rv = v;
            if (type == "ADDED" || type == "MODIFIED") offerNode(obj);
            if (type == "DELETED") {
              relist = true;
              return false;
            }
            return true;
          },
          static_cast<double>(timeout) + 30);
      if (stop_.stopped()) return;
      if (relist || r.code == 410) {
        rv.clear();
        continue;
      }
      bool short_lived = SteadyClock::now() - started < std::chrono::seconds(1) && events == 0;
      if (r.code == 200 && !failed_event && !short_lived) {
        bo.reset();
        continue;
      }
      if (r.code != 200 || failed_event)
        log::warn("node watch ended", {{"node", o_.publish.node_name}, {"error", describe(r)}});
      if (!pause(r)) return;
    }
  }

  PublisherOptions o_;
  Credentials creds_;
  RateLimiter limiter_;
  RequestCounter& counter_;
  Stopper stop_;
  std::mt19937_64 rng_;
  Backoff backoff_;
  HttpClient api_;          // reconcile thread only
  HttpClient watch_api_;    // watch thread only
  HttpClient cluster_api_;  // cluster DNS thread only
  std::chrono::seconds heartbeat_{0};
  double startup_delay_ = 0;
  std::uint64_t watch_seed_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<Snapshot> latest_;
  bool snapshot_dirty_ = false;
  std::optional<json> node_;
  bool node_dirty_ = false;
  std::string written_rv_;  // newest resourceVersion our own writes produced

  std::deque<PendingEvent> pending_events_;  // reconcile thread only
  std::map<std::string, Series> series_;     // reconcile thread only

  std::thread reconciler_, watcher_, cluster_reader_;
};

}  // namespace

PublisherOptions publisherOptions(const Options& opts, const Config& config) {
  PublisherOptions o;
  o.publish.node_name = opts.node_name;
  o.publish.prefix = opts.prefix;
  o.publish.gate_label = opts.gateLabel();
  o.publish.taint = opts.taint;
  o.publish.required = config.required;
  o.qps = config.number(kKubeQpsSetting);
  o.burst = config.number(kKubeBurstSetting);
  o.heartbeat = std::chrono::seconds(static_cast<long long>(config.number(kKubeHeartbeatSetting)));
  o.startup_jitter_s = config.number(kKubeStartupJitterSetting);
  o.watch_timeout_s = config.number(kKubeWatchTimeoutSetting);
  o.event_namespace = config.text(kKubeEventNamespaceSetting);
  o.cluster_dns = processClusterDns();
  // Cilium's settings and CoreDNS's pods change rarely; two cached reads per node every 5
  // minutes is 33 requests/s for 5,000 nodes, where the resync cadence (60 s) would be 167.
  o.cluster.refresh = std::chrono::seconds(static_cast<long long>(
      std::max(opts.resync_seconds, config.number(kKubeClusterDnsRefreshSetting))));
  o.cluster.cilium_namespace = config.text(kDnsPathCiliumNamespaceSetting);
  o.cluster.cilium_configmap = config.text(kDnsPathCiliumConfigMapSetting);
  o.cluster.dns_namespace = config.text(kDnsPathDnsNamespaceSetting);
  o.cluster.dns_service = config.text(kDnsPathDnsServiceSetting);
  return o;
}

std::unique_ptr<Publisher> startPublisher(ClientConfig client, PublisherOptions options,
                                          prometheus::Registry& registry) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::make_unique<KubePublisher>(std::move(client), std::move(options), registry);
}

}  // namespace nodegate::kube

namespace nodegate {

Result<std::unique_ptr<Publisher>> makeKubePublisher(const Options& opts, const Config& config,
                                                     prometheus::Registry& registry) {
  auto o = kube::publisherOptions(opts, config);
  if (o.publish.node_name.empty())
    return Error{EINVAL,
                 "failed to start kubernetes publisher: no node name (--node-name or $NODE_NAME)"};
  if (o.qps <= 0 || o.burst < 1 || o.heartbeat.count() < 0 || o.watch_timeout_s < 1)
    return Error{EINVAL,
                 "failed to start kubernetes publisher: kube.qps must be > 0, kube.burst >= 1, "
                 "kube.heartbeat_seconds >= 0, kube.watch_timeout_seconds >= 1"};
  auto client = kube::loadClientConfig(opts.kube, opts.kubeconfig);
  if (!client)
    return Error{client.error().code,
                 "failed to start kubernetes publisher: " + client.error().message};
  return kube::startPublisher(std::move(client).value(), std::move(o), registry);
}

}  // namespace nodegate
