#include "nodegate/check.h"

#include <strings.h>

#include "nodegate/json.h"

namespace nodegate {

std::string_view toString(Status s) {
  switch (s) {
    case Status::Pass:
      return "PASS";
    case Status::Warn:
      return "WARN";
    case Status::Fail:
      return "FAIL";
    case Status::Unknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

std::optional<Status> parseStatus(std::string_view text) {
  for (Status s : {Status::Pass, Status::Warn, Status::Fail, Status::Unknown}) {
    auto name = toString(s);
    if (name.size() == text.size() && strncasecmp(name.data(), text.data(), text.size()) == 0)
      return s;
  }
  return std::nullopt;
}

int severity(Status s) {
  switch (s) {
    case Status::Pass:
      return 0;
    case Status::Warn:
      return 1;
    case Status::Unknown:
      return 2;
    case Status::Fail:
      return 3;
  }
  return 2;
}

CheckResult makeResult(std::string check, Status status, std::string reason, std::string message,
                       std::string hint) {
  CheckResult r;
  r.check = std::move(check);
  r.status = status;
  r.reason = std::move(reason);
  r.message = std::move(message);
  r.hint = std::move(hint);
  return r;
}

nlohmann::json toJson(const CheckResult& r, bool include_duration) {
  nlohmann::json j;
  j["check"] = r.check;
  j["status"] = toString(r.status);
  j["reason"] = r.reason;
  j["message"] = r.message;
  j["hint"] = r.hint;
  j["evidence"] = nlohmann::json::array();
  for (const auto& e : r.evidence)
    j["evidence"].push_back({{"source", e.source}, {"observed", e.observed}});
  j["labels"] = r.labels;
  j["metrics"] = nlohmann::json::array();
  for (const auto& m : r.metrics)
    j["metrics"].push_back({{"name", m.name}, {"labels", m.labels}, {"value", m.value}});
  if (include_duration) j["duration_seconds"] = std::chrono::duration<double>(r.duration).count();
  return j;
}

}  // namespace nodegate
