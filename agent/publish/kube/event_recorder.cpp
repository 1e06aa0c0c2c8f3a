#include "publish/kube/event_recorder.h"

#include <cstdio>

#include "nodegate/log.h"
#include "publish/kube/node_cache.h"
#include "publish/rfc3339.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

// Repeats of the same transition within this window are folded into one event's series.
constexpr auto kSeriesWindow = std::chrono::minutes(30);
constexpr int kMaxEventAttempts = 5;

std::string microTime(Clock::time_point t) {
  return formatRfc3339(t, 6);  // metav1.MicroTime
}

}  // namespace

std::string EventRecorder::eventsPath() const {
  return "/apis/events.k8s.io/v1/namespaces/" + s_.event_namespace + "/events";
}

void EventRecorder::named(Pending& e) {
  // <node>.<time in ns>.<sequence>, hex: kubelet's <object>.<time> form, with the sequence for
  // the several transitions one reconcile queues at the same time (they used to share a name,
  // and every one after the first was refused with 409 until dropped).
  auto nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(e.at.time_since_epoch()).count();
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, ".%llx.%llx", static_cast<unsigned long long>(nanos),
                static_cast<unsigned long long>(queued_++));
  e.name = s_.node_name + suffix;
}

void EventRecorder::queue(const std::vector<Transition>& changes, Clock::time_point at) {
  for (const auto& t : changes) {
    pending_.push_back({t.to.type + "|" + t.to.status + "|" + t.to.reason, "CheckStatus",
                        t.to.reason, t.to.status == "True" ? "Normal" : "Warning",
                        t.to.type + " is " + t.to.status + ": " + t.to.message, at, 0});
    named(pending_.back());
  }
}

void EventRecorder::queueWarning(const std::string& reason, const std::string& note,
                                 Clock::time_point at) {
  pending_.push_back(
      {"warning|" + reason + "|" + note, "PublishLabels", reason, "Warning", note, at, 0});
  named(pending_.back());
}

std::optional<HttpResponse> EventRecorder::flush(const json& node) {
  while (!pending_.empty()) {
    auto& e = pending_.front();
    auto r = post(e, node);
    if (r.ok()) {
      pending_.pop_front();
      continue;
    }
    if (++e.attempts >= kMaxEventAttempts) {
      log::warn("failed to post event, dropping it",
                {{"node", s_.node_name}, {"reason", e.reason}, {"error", describe(r)}});
      pending_.pop_front();
      continue;
    }
    return r;
  }
  return std::nullopt;
}

HttpResponse EventRecorder::post(const Pending& e, const json& node) {
  const std::string& key = e.series_key;
  auto now = Clock::now();
  if (auto it = series_.find(key); it != series_.end() && now - it->second.last < kSeriesWindow) {
    json patch = {
        {"series", {{"count", it->second.count + 1}, {"lastObservedTime", microTime(e.at)}}}};
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
  const std::string& name = e.name;
  json ev = {
      {"apiVersion", "events.k8s.io/v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name}, {"namespace", s_.event_namespace}}},
      {"eventTime", microTime(e.at)},
      {"reportingController", s_.prefix + "/agent"},
      {"reportingInstance", (s_.prefix + "/agent-" + s_.node_name).substr(0, 128)},
      {"action", e.action},
      {"reason", e.reason},
      {"type", e.type},
      {"note", e.note.substr(0, 1024)},
      {"regarding",
       {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", s_.node_name}, {"uid", uidOf(node)}}},
  };
  auto r = api_.request("create", "POST", eventsPath(), "application/json", ev.dump());
  // 409: an earlier attempt created it and its answer was lost (the name is this event's own).
  if (r.code == 409) r.code = 201;
  if (r.ok()) series_[key] = {name, 1, now};
  return r;
}

}  // namespace nodegate::kube
