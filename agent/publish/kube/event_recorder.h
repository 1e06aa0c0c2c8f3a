// Kubernetes Events (events.k8s.io/v1) for condition transitions, as client-go's recorder does:
// best effort (a few attempts, then dropped with a warning), and a transition repeated within
// 30 minutes is folded into the first event's series instead of a new event. Used by the
// publisher's reconcile thread only.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/connection.h"
#include "publish/kube/node_state.h"

namespace nodegate::kube {

struct EventSettings {
  std::string node_name;
  std::string prefix = "nodegate.io";       // reportingController is <prefix>/agent
  std::string event_namespace = "default";  // kube.event_namespace (kubelet puts Node events there)
};

class EventRecorder {
 public:
  EventRecorder(ApiClient& api, EventSettings settings) : api_(api), s_(std::move(settings)) {}

  void queue(const std::vector<Transition>& changes, Clock::time_point at);
  // A Warning about the Node that is not a condition transition (a label nodegate refuses to
  // touch); `reason` is CamelCase, `note` one line.
  void queueWarning(const std::string& reason, const std::string& note, Clock::time_point at);
  // Posts what is queued about `node`. The failed answer when the caller should retry later.
  std::optional<HttpResponse> flush(const nlohmann::json& node);

 private:
  struct Pending {
    std::string series_key;  // repeats of the same key fold into one event's series
    std::string action, reason, type, note;
    Clock::time_point at;
    int attempts;
    // The Event's name if it is created: given when queued, so that a retry after a lost answer
    // finds its own event (409), and unique, so that transitions queued together do not share it.
    std::string name = {};
  };
  struct Series {
    std::string name;
    int count;
    Clock::time_point last;
  };
  HttpResponse post(const Pending& e, const nlohmann::json& node);
  std::string eventsPath() const;

  ApiClient& api_;
  EventSettings s_;
  std::deque<Pending> pending_;
  std::map<std::string, Series> series_;  // Pending::series_key -> its event
  std::uint64_t queued_ = 0;              // events queued so far: part of each name
  void named(Pending& e);
};

}  // namespace nodegate::kube
