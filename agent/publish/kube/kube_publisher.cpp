// The reconcile side of the Kubernetes publisher (see publisher.h for its parts).
#include <random>
#include <thread>

#include "nodegate/log.h"
#include "publish/kube/event_recorder.h"
#include "publish/kube/gate_hold.h"
#include "publish/kube/node_cache.h"
#include "publish/kube/node_watch.h"
#include "publish/kube/publisher.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr int kMaxConflictRetries = 5;

class KubePublisher final : public Publisher {
 public:
  KubePublisher(std::shared_ptr<Connection> connection, PublisherOptions o,
                std::shared_ptr<PodSource> pods)
      : o_(std::move(o)),
        conn_(std::move(connection)),
        pods_(std::move(pods)),
        rng_(o_.seed ? o_.seed : std::random_device{}()),
        backoff_(0.5, 30, rng_()),
        api_(*conn_, stop_),
        events_(api_, {o_.publish.node_name, o_.publish.prefix, o_.event_namespace}) {
    std::uniform_real_distribution<double> spread(1.0, 1.1);
    // Each agent's heartbeat drifts a little so a fleet started together does not stay in step.
    heartbeat_ = std::chrono::seconds(
        static_cast<long long>(static_cast<double>(o_.heartbeat.count()) * spread(rng_)));
    startup_delay_ =
        std::uniform_real_distribution<double>(0, std::max(0.0, o_.startup_jitter_s))(rng_);
    const std::uint64_t watch_seed = rng_();
    log::info("kubernetes publisher started", {{"server", redactedUrl(conn_->config().server)},
                                               {"source", conn_->config().source},
                                               {"node", o_.publish.node_name}});
    cache_.setObserver(o_.node_seen);
    if (pods_) pods_listener_ = pods_->subscribe([this] { cache_.wake(); });
    reconciler_ = std::thread([this] { reconcileLoop(); });
    watcher_ = std::make_unique<NodeWatcher>(
        *conn_, NodeWatchOptions{o_.publish.node_name, o_.watch_timeout_s, watch_seed}, cache_);
  }

  ~KubePublisher() override {
    if (pods_) pods_->unsubscribe(pods_listener_);
    stop_.stop();
    cache_.stop();
    reconciler_.join();
    watcher_.reset();
  }

  void publish(const Snapshot& snapshot) override { cache_.setSnapshot(snapshot); }

 private:
  struct Next {
    SteadyClock::time_point at;
    bool retry;
  };

  std::string nodePath() const { return "/api/v1/nodes/" + o_.publish.node_name; }

  void reconcileLoop() {
    if (!stop_.sleepFor(std::chrono::duration<double>(startup_delay_))) return;
    auto wake = SteadyClock::now() + std::chrono::hours(24);
    bool force = false;  // a retry is due even though nothing changed
    while (auto work = cache_.take(wake, force)) {
      force = false;
      wake = SteadyClock::now() + std::chrono::hours(24);
      // Before every probe has run once, absent labels would look stale: write nothing yet.
      if (!work->snapshot.complete) continue;
      Next next = reconcileOnce(work->snapshot, std::move(work->node));
      if (next.retry) {
        // Hold off even if snapshots keep coming: Retry-After and backoff are promises.
        if (!stop_.sleepFor(next.at - SteadyClock::now())) return;
        force = true;
        continue;
      }
      wake = next.at;
    }
  }

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

  // Labels, ownership annotation and taint; `node` becomes what the server answered.
  std::optional<Next> writeMetadata(const Desired& want, json* node) {
    for (int attempt = 0;; ++attempt) {
      auto patch = nodePatch(want, *node, o_.publish);
      if (!patch) return std::nullopt;
      auto r =
          api_.request("patch", "PATCH", nodePath(), "application/merge-patch+json", patch->dump());
      if (r.ok()) {
        if (auto n = parseObject(r.body)) {
          *node = *n;
          cache_.adoptWritten(*node);
        }
        log::info("updated node metadata",
                  {{"node", o_.publish.node_name}, {"patch", patch->dump()}});
        return std::nullopt;
      }
      // Someone changed the Node (usually its taints) since we read it: read again and redo.
      if (r.code == 409 && attempt < kMaxConflictRetries) {
        auto g = api_.request("get", "GET", nodePath());
        auto n = g.ok() ? parseObject(g.body) : std::nullopt;
        if (!n) return failed(g, "get node " + o_.publish.node_name);
        *node = *n;
        cache_.offer(*node);
        continue;
      }
      return failed(r, "patch node " + o_.publish.node_name);
    }
  }

  // Conditions (with a heartbeat when due); transitions are queued as events.
  std::optional<Next> writeStatus(const Desired& want, json* node) {
    auto now = Clock::now();
    auto changes = transitions(want, *node);
    auto sp = statusPatch(want, *node, now, heartbeat_);
    if (!sp) return std::nullopt;
    auto r = api_.request("patch", "PATCH", nodePath() + "/status",
                          "application/strategic-merge-patch+json", sp->dump());
    if (!r.ok()) return failed(r, "patch node status " + o_.publish.node_name);
    if (auto n = parseObject(r.body)) {
      *node = *n;
      cache_.adoptWritten(*node);
    }
    for (const auto& t : changes)
      log::info("node condition changed", {{"node", o_.publish.node_name},
                                           {"condition", t.to.type},
                                           {"from", t.from.empty() ? "none" : t.from},
                                           {"to", t.to.status},
                                           {"reason", t.to.reason}});
    events_.queue(changes, now);
    log::debug("updated node status", {{"node", o_.publish.node_name}, {"patch", sp->dump()}});
    return std::nullopt;
  }

  // Labels we refuse to touch are reported once per new situation (log and a Warning event),
  // not at every reconcile.
  void reportOwnership(const json& node) {
    std::string seen;
    auto problems = ownership(node, o_.publish).problems(o_.publish);
    for (const auto& p : problems) seen += p.note + "\n";
    if (seen == reported_ownership_) return;
    reported_ownership_ = seen;
    for (const auto& p : problems) {
      log::warn("failed to own label: " + p.note,
                {{"node", o_.publish.node_name}, {"reason", p.reason}});
      events_.queueWarning(p.reason, p.note, Clock::now());
    }
  }

  Next reconcileOnce(const Snapshot& snap, json node) {
    const auto now = Clock::now();
    const PodView view =
        pods_ ? pods_->view() : PodView{false, "no pod view: kube.pod_watch is false", {}, {}};
    const HoldContext ctx{&view, closed_.observe(node, o_.publish, now), now, o_.release_delay};
    const NodePlan plan = planNode(snap, node, o_.publish, ctx);
    if (o_.holds) o_.holds->update(plan.holds, view, o_.publish.node_name);
    const Desired& want = plan.want;
    reportOwnership(node);
    if (auto retry = writeMetadata(want, &node)) return *retry;
    if (auto retry = writeStatus(want, &node)) return *retry;
    if (auto r = events_.flush(node)) return failed(*r, "post event for " + o_.publish.node_name);
    backoff_.reset();

    // Our write may just have put the taint on: the release delay runs from now.
    const auto since = closed_.observe(node, o_.publish, Clock::now());
    auto due = std::min(nextHeartbeat(want, node, heartbeat_),
                        nextLook(plan.holds, (since ? *since : Clock::now()) + o_.release_delay));
    if (due == Clock::time_point::max())
      return {SteadyClock::now() + std::chrono::hours(24), false};
    auto in = std::max<Clock::duration>(due - Clock::now(), std::chrono::seconds(1));
    return {SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(in), false};
  }

  PublisherOptions o_;
  std::shared_ptr<Connection> conn_;
  std::shared_ptr<PodSource> pods_;
  int pods_listener_ = 0;
  ClosedSince closed_;  // reconcile thread only
  Stopper stop_;
  std::mt19937_64 rng_;
  Backoff backoff_;
  ApiClient api_;         // reconcile thread only
  EventRecorder events_;  // reconcile thread only
  NodeCache cache_;
  std::chrono::seconds heartbeat_{0};
  double startup_delay_ = 0;
  std::string reported_ownership_;  // reconcile thread only
  std::thread reconciler_;
  std::unique_ptr<NodeWatcher> watcher_;
};

}  // namespace

std::unique_ptr<Publisher> startPublisher(std::shared_ptr<Connection> connection,
                                          PublisherOptions options,
                                          std::shared_ptr<PodSource> pods) {
  return std::make_unique<KubePublisher>(std::move(connection), std::move(options),
                                         std::move(pods));
}

}  // namespace nodegate::kube
