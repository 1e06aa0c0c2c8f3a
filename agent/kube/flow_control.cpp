#include "kube/flow_control.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <string>

namespace nodegate::kube {

std::optional<double> parseRetryAfter(std::string_view value,
                                      std::chrono::system_clock::time_point now) {
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
    value.remove_prefix(1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())))
    value.remove_suffix(1);
  std::string v(value);
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (v.size() > 9) return std::nullopt;
    return std::stod(v);
  }
  // IMF-fixdate, the only date form RFC 9110 senders may produce.
  std::tm tm{};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
  return std::max(0.0, std::chrono::duration<double>(at - now).count());
}

bool Stopper::sleepFor(std::chrono::duration<double> d) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, d, [&] { return stopped_.load(); });
  return !stopped_.load();
}

void Stopper::stop() {
  {
    std::lock_guard lk(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

RateLimiter::RateLimiter(double qps, double burst)
    : qps_(qps > 0 ? qps : 5),
      burst_(burst >= 1 ? burst : 1),
      tokens_(burst_),
      last_(std::chrono::steady_clock::now()) {}

std::chrono::duration<double> RateLimiter::reserve(std::chrono::steady_clock::time_point now) {
  std::lock_guard lk(mu_);
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  // A negative balance is a queue of reservations; each waits for its share of refill.
  return std::chrono::duration<double>(tokens_ >= 0 ? 0 : -tokens_ / qps_);
}

bool RateLimiter::acquire(Stopper& stopper) {
  auto wait = reserve(std::chrono::steady_clock::now());
  if (wait.count() <= 0) return !stopper.stopped();
  return stopper.sleepFor(wait);
}

Backoff::Backoff(double base_s, double cap_s, std::uint64_t seed)
    : base_(base_s), cap_(cap_s), rng_(seed) {}

double Backoff::next() {
  double ceiling = std::min(cap_, base_ * static_cast<double>(1ULL << std::min(attempt_, 30)));
  ++attempt_;
  // Half fixed, half random: never hammers at once, still spreads a fleet that failed together.
  std::uniform_real_distribution<double> d(ceiling / 2, ceiling);
  return d(rng_);
}

}  // namespace nodegate::kube
