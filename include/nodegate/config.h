// Config: the `--config FILE` policy. JSON, all keys optional:
//   { "gate":   { "required": ["cpu-virt", "kvm-device", "tun", "kernel-modules"] },
//     "checks": { "<check or section>": { "<setting>": value, ... } },
//     "damping": { "<check>": N } }
// Everything in it is validated against a ConfigSchema (nodegate/spec.h; the binary's is
// configSchema() in nodegate/registry.h): an unknown check, section or key, a value of the wrong
// type or out of bounds and a key given twice are errors that name the key and the value.
// Readers ask for a setting by its SettingSpec, so a setting's default lives in its declaration.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"
#include "nodegate/spec.h"

namespace nodegate {

struct Config {
  // Checks that must PASS for the gate to open (UNKNOWN, WARN and FAIL all close it). A
  // default-constructed Config requires nothing: parseConfig fills in the schema's default gate.
  std::set<std::string> required;
  // Per-section settings as validated, keyed by section and key.
  nlohmann::json checks = nlohmann::json::object();
  // Consecutive runs a new status must hold before it is published, per probe.
  std::map<std::string, int> damping;

  // The configured value, else the spec's default. For a setting whose default is derived at
  // run time (spec.fallback is null) the caller passes it. Only a value the spec accepts is
  // returned, so a reader never sees a wrong type or an out-of-bounds number.
  double number(const SettingSpec& s) const;
  double number(const SettingSpec& s, double derived) const;
  std::string text(const SettingSpec& s) const;
  std::string text(const SettingSpec& s, std::string derived) const;
  bool flag(const SettingSpec& s) const;
  std::vector<std::string> list(const SettingSpec& s) const;
  std::vector<std::string> list(const SettingSpec& s, std::vector<std::string> derived) const;
  // Whether the setting was given (in the file, or by set()) with a value its spec accepts.
  bool has(const SettingSpec& s) const;
  // The loop's settings of one check (commonProbeSettings()).
  bool hasProbeTimeout(std::string_view check) const;
  double probeTimeout(std::string_view check) const;  // seconds
  std::vector<std::string> extraTriggers(std::string_view check) const;

  // Sets checks.<section>.<key> without validation (a flag folded in, a test's policy); a value
  // its spec does not accept reads as the default.
  void set(std::string_view section, std::string_view key, nlohmann::json value);
};

// Parses a config document against schema; "{}" gives the schema's defaults.
Result<Config> parseConfig(std::string_view text, const ConfigSchema& schema);
// Reads it first: a FIFO, a device or a file over 1 MiB is an error, never a hang.
Result<Config> loadConfig(const std::string& path, const ConfigSchema& schema);

}  // namespace nodegate
