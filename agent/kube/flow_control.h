// Flow control towards the API server, shared by every reader and writer of the process: one
// token bucket (the configured kube.qps/kube.burst is the budget of the whole process, as one
// client-go rest.Config is), jittered backoff, Retry-After, and sleeps that shutdown interrupts.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

namespace nodegate::kube {

// Retry-After is delta-seconds or an HTTP date; returns seconds from `now`, never negative.
std::optional<double> parseRetryAfter(std::string_view value,
                                      std::chrono::system_clock::time_point now);

// Interruptible sleeps: stop() wakes every sleeper at once, so shutdown never waits on a backoff.
// Each component that talks to the API has its own (its lifetime is its own).
class Stopper {
 public:
  // false when stopped (before or during the sleep).
  bool sleepFor(std::chrono::duration<double> d);
  void stop();
  bool stopped() const { return stopped_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopped_{false};
};

// Token bucket: `qps` tokens per second, up to `burst` saved. reserve() takes a token and says
// how long the caller must wait for it (client-go's flowcontrol does the same). Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double qps, double burst);
  std::chrono::duration<double> reserve(std::chrono::steady_clock::time_point now);
  // Waits for a token; false when `stopper` stopped meanwhile (the token stays spent).
  bool acquire(Stopper& stopper);

 private:
  std::mutex mu_;
  double qps_, burst_, tokens_;
  std::chrono::steady_clock::time_point last_;
};

// Exponential backoff with full jitter between base and cap; reset() after a success.
class Backoff {
 public:
  Backoff(double base_s, double cap_s, std::uint64_t seed);
  double next();
  void reset() { attempt_ = 0; }

 private:
  double base_, cap_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace nodegate::kube
