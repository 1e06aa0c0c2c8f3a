#include "nodegate/runner.h"

#include <algorithm>
#include <exception>

#include "nodegate/log.h"

namespace nodegate {

CheckResult runProbe(Probe& probe, const ProbeContext& ctx) {
  auto start = std::chrono::steady_clock::now();
  CheckResult r;
  try {
    r = probe.run(ctx);
  } catch (const std::exception& e) {
    log::warn("probe threw", {{"check", std::string(probe.name())}, {"error", e.what()}});
    r = makeResult(std::string(probe.name()), Status::Unknown, "ProbeError",
                   std::string("probe failed: ") + e.what(),
                   "this is a nodegate bug: report it with the agent log");
  } catch (...) {
    log::warn("probe threw", {{"check", std::string(probe.name())}, {"error", "unknown"}});
    r = makeResult(std::string(probe.name()), Status::Unknown, "ProbeError",
                   "probe failed with an unknown exception",
                   "this is a nodegate bug: report it with the agent log");
  }
  r.check = std::string(probe.name());
  if (r.reason.empty()) r.reason = r.status == Status::Pass ? "Ok" : "Unspecified";
  // Every non-PASS line must tell the reader what to do next.
  if (r.status != Status::Pass && r.hint.empty())
    r.hint = "see `nodegate check` evidence for " + r.check;
  r.duration = std::chrono::steady_clock::now() - start;
  return r;
}

std::vector<std::string> gateBlockers(const std::vector<CheckResult>& results,
                                      const Config& config) {
  std::vector<std::string> blockers;
  for (const auto& name : config.required) {
    auto it = std::find_if(results.begin(), results.end(),
                           [&](const CheckResult& r) { return r.check == name; });
    if (it == results.end() || it->status != Status::Pass) blockers.push_back(name);
  }
  return blockers;
}

bool gateOpen(const std::vector<CheckResult>& results, const Config& config) {
  return gateBlockers(results, config).empty();
}

}  // namespace nodegate
