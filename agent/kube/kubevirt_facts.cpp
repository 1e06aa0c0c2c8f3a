#include "kube/kubevirt_facts.h"

namespace nodegate::kube {

namespace {
constexpr const char* kNoPodWatch =
    "no pod view: kube.pod_watch is false, so the virt-handler pods are not watched";
}

KubeVirtFactsBoard::KubeVirtFactsBoard(std::shared_ptr<PodSource> pods) : pods_(std::move(pods)) {
  if (pods_) listener_ = pods_->subscribe([this] { podsChanged(); });
}

KubeVirtFactsBoard::~KubeVirtFactsBoard() {
  if (pods_) pods_->unsubscribe(listener_);
}

KubeVirtFacts KubeVirtFactsBoard::facts() {
  KubeVirtFacts f;
  {
    std::lock_guard l(mu_);
    f.node = node_;
  }
  if (!f.node) f.node_error = "not seen yet (the agent's watch of the Node reads it)";
  if (!pods_) {
    f.pods_error = kNoPodWatch;
    return f;
  }
  HandlerView h = pods_->handlers();
  if (!h.complete) {
    std::lock_guard l(mu_);
    if (last_complete_ && incomplete_since_ &&
        std::chrono::steady_clock::now() - *incomplete_since_ < kPodViewGrace) {
      // Briefly incomplete: the last complete view, with why it is not fresh.
      f.pods_complete = true;
      f.handlers = last_complete_->handlers;
      f.pods_error = h.why;
      f.pods_stale = true;
      return f;
    }
  }
  f.pods_complete = h.complete;
  f.pods_error = h.why;
  f.handlers = std::move(h.handlers);
  return f;
}

void KubeVirtFactsBoard::nodeSeen(const nlohmann::json& node) {
  KubeVirtNodeView view = kubevirtNodeView(node);
  {
    std::lock_guard l(mu_);
    if (node_ && *node_ == view) return;  // another field of the Node changed, not KubeVirt's
    node_ = std::move(view);
  }
  changed();
}

void KubeVirtFactsBoard::podsChanged() {
  // The pod source reports every change of its views; only the virt-handler pods and the
  // view's state matter here.
  HandlerView h = pods_->handlers();
  {
    std::lock_guard l(mu_);
    if (h.complete) {
      last_complete_ = h;
      incomplete_since_.reset();
    } else if (!incomplete_since_) {
      incomplete_since_ = std::chrono::steady_clock::now();
    }
    if (handlers_ && *handlers_ == h) return;
    handlers_ = std::move(h);
  }
  changed();
}

void KubeVirtFactsBoard::onChange(std::function<void()> fn) {
  std::lock_guard l(mu_);
  on_change_ = std::move(fn);
}

bool KubeVirtFactsBoard::waitUntilSeen(std::chrono::milliseconds timeout) {
  std::unique_lock l(mu_);
  return seen_cv_.wait_for(l, timeout,
                           [&] { return node_ && (!pods_ || (handlers_ && handlers_->complete)); });
}

void KubeVirtFactsBoard::changed() {
  seen_cv_.notify_all();
  std::function<void()> fn;
  {
    std::lock_guard l(mu_);
    fn = on_change_;
  }
  if (fn) fn();
}

}  // namespace nodegate::kube
