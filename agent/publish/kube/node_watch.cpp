#include "publish/kube/node_watch.h"

#include <random>

#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

bool pause(Stopper& stop, const HttpResponse& r, Backoff& bo) {
  double d = r.retry_after && (r.code == 429 || r.code == 503) ? std::min(*r.retry_after, 300.0)
                                                               : bo.next();
  return stop.sleepFor(std::chrono::duration<double>(d));
}

}  // namespace

NodeWatcher::NodeWatcher(Connection& connection, NodeWatchOptions options, NodeCache& cache)
    : o_(std::move(options)), cache_(cache), api_(connection, stop_) {
  thread_ = std::thread([this] { loop(); });
}

NodeWatcher::~NodeWatcher() {
  stop_.stop();
  if (thread_.joinable()) thread_.join();
}

void NodeWatcher::loop() {
  Backoff bo(0.5, 30, o_.seed);
  std::mt19937_64 rng(o_.seed ^ 0x9e3779b97f4a7c15ULL);
  std::string rv;  // where the next watch resumes (bookmarks move it too); empty: GET first
  while (!stop_.stopped()) {
    if (rv.empty()) {
      auto r = api_.request("get", "GET", nodePath());
      auto n = r.ok() ? parseObject(r.body) : std::nullopt;
      if (!n) {
        log::warn("failed to get node " + o_.node_name, {{"error", describe(r)}});
        if (!pause(stop_, r, bo)) return;
        continue;
      }
      rv = rvOf(*n);
      // A GET reads the current state (a quorum read): older than what the watch showed us
      // means the server's history went back, not that this copy is late.
      const bool recreated = !seen_uid_.empty() && uidOf(*n) != seen_uid_;
      const bool backwards =
          !recreated && !seen_rv_.empty() && rv != seen_rv_ && !newerRv(rv, seen_rv_);
      if (recreated || backwards) {
        log::warn(recreated ? "node was recreated: relisted, reconciling it"
                            : "node resourceVersion went backwards: relisted, reconciling it",
                  {{"node", o_.node_name},
                   {"resource_version", rv},
                   {"previous_resource_version", seen_rv_},
                   {"uid", uidOf(*n)},
                   {"previous_uid", seen_uid_}});
        cache_.reset(*n);
      } else {
        cache_.offer(*n);
      }
      seen(*n);
    }
    const double timeout = static_cast<double>(static_cast<long long>(
        o_.watch_timeout_s * std::uniform_real_distribution<double>(1.0, 1.5)(rng)));
    if (!watchOnce(&rv, timeout, &bo)) rv.clear();
  }
}

void NodeWatcher::seen(const json& node) {
  const std::string v = rvOf(node), uid = uidOf(node);
  if (uid != seen_uid_ || newerRv(v, seen_rv_)) seen_rv_ = v;
  seen_uid_ = uid;
}

bool NodeWatcher::watchOnce(std::string* rv, double timeout_s, Backoff* bo) {
  std::string path = "/api/v1/nodes?fieldSelector=metadata.name%3D" + o_.node_name +
                     "&watch=true&allowWatchBookmarks=true&resourceVersion=" + *rv +
                     "&timeoutSeconds=" + std::to_string(static_cast<long long>(timeout_s));
  bool relist = false, failed_event = false;
  int events = 0;
  auto started = SteadyClock::now();
  auto r = api_.stream(
      path,
      [&](std::string_view line) {
        auto ev = parseObject(line);
        if (!ev || !ev->contains("type") || !ev->contains("object")) return true;
        const std::string type = ev->value("type", "");
        const json& obj = (*ev)["object"];
        if (type == "ERROR") {
          // 410 Gone: our resourceVersion fell out of the server's window; 504 "too large
          // resource version": the server is behind us (restored). Either way, start over.
          if (obj.is_object() && (obj.value("code", 0) == 410 || obj.value("code", 0) == 504))
            relist = true;
          else
            failed_event = true;
          return false;
        }
        ++events;
        // Resume from the newest version seen: a late event must not rewind the watch.
        if (auto v = rvOf(obj); !v.empty() && newerRv(v, *rv)) *rv = v;
        if (type == "ADDED" || type == "MODIFIED") {
          seen(obj);
          cache_.offer(obj);
        }
        if (type == "DELETED") {
          relist = true;
          return false;
        }
        return true;
      },
      timeout_s + 30);
  if (stop_.stopped()) return true;
  if (relist || r.code == 410) return false;
  if (r.code == 504) {
    log::warn("node watch: resourceVersion too large, relisting",
              {{"node", o_.node_name}, {"resource_version", *rv}, {"error", describe(r)}});
    return false;
  }
  bool short_lived = SteadyClock::now() - started < std::chrono::seconds(1) && events == 0;
  if (r.code == 200 && !failed_event && !short_lived) {
    bo->reset();
    return true;
  }
  if (r.code != 200 || failed_event)
    log::warn("node watch ended", {{"node", o_.node_name}, {"error", describe(r)}});
  pause(stop_, r, *bo);
  return true;
}

}  // namespace nodegate::kube
