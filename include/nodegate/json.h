// JSON forms of the result model: `nodegate check --output json`, /api/v1/checks and the golden
// files under test/fixtures all use exactly this shape.
#pragma once

#include <nlohmann/json.hpp>

#include "nodegate/check.h"

namespace nodegate {

// duration is left out when include_duration is false (golden files must be deterministic).
nlohmann::json toJson(const CheckResult& r, bool include_duration = true);

}  // namespace nodegate
