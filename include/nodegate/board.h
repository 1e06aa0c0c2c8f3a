// Board<T>: one value that one part of the process writes and others read, each from its own
// thread. The composition root (agent/agent.cpp) builds every board and hands it to its writer
// and its readers, so two parts share a fact only where the wiring says so; there is no
// process-wide instance to reach for.
#pragma once

#include <mutex>
#include <optional>
#include <utility>

namespace nodegate {

template <typename T>
class Board {
 public:
  void publish(T value) {
    std::lock_guard lock(mu_);
    value_ = std::move(value);
  }
  // The writer stopped: readers see "nothing known" again, not a stale value.
  void clear() {
    std::lock_guard lock(mu_);
    value_.reset();
  }
  // A copy: readers never hold the lock while they use it.
  std::optional<T> get() const {
    std::lock_guard lock(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<T> value_;
};

}  // namespace nodegate
