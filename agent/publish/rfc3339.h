// RFC 3339 timestamps in UTC, the one formatter of the agent: the Kubernetes API's metav1.Time
// (0 fraction digits) and metav1.MicroTime (6), the page and API's times (3).
#pragma once

#include <chrono>
#include <string>

namespace nodegate {

// "2026-11-29T14:10:50Z", "2026-11-29T14:10:50.001Z" (fraction_digits 3), "...50.001500Z" (6).
// fraction_digits is clamped to 0..9; the fraction is truncated, not rounded.
std::string formatRfc3339(std::chrono::system_clock::time_point t, int fraction_digits = 0);

// (Parsing what the API server emits: parseApiTime, probes/text.h.)

}  // namespace nodegate
