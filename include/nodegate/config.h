// Config: the `--config FILE` policy. JSON, all keys optional:
//   { "gate":   { "required": ["cpu-virt", "kvm-device", "tun", "kernel-modules"] },
//     "checks": { "<probe>": { "<setting>": value, ... } },
//     "damping": { "<probe>": N } }
// Probes read their own settings with a default, so adding a setting never touches this file.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"

namespace nodegate {

struct Config {
  // Checks that must PASS for the gate to open (UNKNOWN, WARN and FAIL all close it).
  std::set<std::string> required{"cpu-virt", "kvm-device", "tun", "kernel-modules"};
  // Per-probe settings, keyed by probe name.
  nlohmann::json checks = nlohmann::json::object();
  // Consecutive runs a new status must hold before it is published, per probe.
  std::map<std::string, int> damping;

  double number(std::string_view probe, std::string_view key, double fallback) const;
  std::string text(std::string_view probe, std::string_view key, std::string fallback) const;
  bool flag(std::string_view probe, std::string_view key, bool fallback) const;
  std::vector<std::string> list(std::string_view probe, std::string_view key,
                                std::vector<std::string> fallback) const;
  void set(std::string_view probe, std::string_view key, nlohmann::json value);
};

// Parses a config document; unknown top-level keys are an error so typos do not pass silently.
Result<Config> parseConfig(std::string_view text);
Result<Config> loadConfig(const std::string& path);

}  // namespace nodegate
