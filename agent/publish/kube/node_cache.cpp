#include "publish/kube/node_cache.h"

#include <cstdlib>

namespace nodegate::kube {

using nlohmann::json;

std::string rvOf(const json& obj) {
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return {};
  auto rv = md->find("resourceVersion");
  return rv != md->end() && rv->is_string() ? rv->get<std::string>() : std::string();
}

std::string uidOf(const json& obj) {
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return {};
  auto uid = md->find("uid");
  return uid != md->end() && uid->is_string() ? uid->get<std::string>() : std::string();
}

std::optional<json> parseObject(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool newerRv(const std::string& a, const std::string& b) {
  if (b.empty()) return true;
  char* ea = nullptr;
  char* eb = nullptr;
  unsigned long long na = std::strtoull(a.c_str(), &ea, 10);
  unsigned long long nb = std::strtoull(b.c_str(), &eb, 10);
  if (!a.empty() && !b.empty() && ea && *ea == '\0' && eb && *eb == '\0') return na > nb;
  return a != b;
}

void NodeCache::setSnapshot(const Snapshot& snapshot) {
  {
    std::lock_guard lk(mu_);
    latest_ = snapshot;
    snapshot_dirty_ = true;
  }
  cv_.notify_all();
}

void NodeCache::offer(const json& node) {
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
    adopted();
  }
  cv_.notify_all();
}

void NodeCache::reset(const json& node) {
  {
    std::lock_guard lk(mu_);
    node_ = node;
    written_rv_.clear();
    node_dirty_ = true;
    adopted();
  }
  cv_.notify_all();
}

void NodeCache::adoptWritten(const json& node) {
  std::lock_guard lk(mu_);
  std::string rv = rvOf(node);
  const bool same_node = node_ && uidOf(node) == uidOf(*node_);
  if (!same_node) written_rv_.clear();
  if (!rv.empty() && newerRv(rv, written_rv_)) written_rv_ = rv;
  if (!same_node || newerRv(rv, rvOf(*node_))) {
    node_ = node;
    adopted();
  }
}

void NodeCache::wake() {
  {
    std::lock_guard lk(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

std::optional<NodeCache::Work> NodeCache::take(SteadyClock::time_point until, bool force) {
  std::unique_lock lk(mu_);
  for (;;) {
    bool ready = cv_.wait_until(lk, until, [&] {
      return stopping_ || ((snapshot_dirty_ || node_dirty_ || woken_ || force) && latest_ && node_);
    });
    if (stopping_) return std::nullopt;
    if (!ready) {
      // The time came (a heartbeat or retry): due as soon as both are known.
      force = true;
      until = SteadyClock::now() + std::chrono::hours(24);
      continue;
    }
    snapshot_dirty_ = node_dirty_ = woken_ = false;
    return Work{*latest_, *node_};
  }
}

void NodeCache::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

}  // namespace nodegate::kube
