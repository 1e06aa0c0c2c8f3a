// Declarations that everything else is derived from. A probe declares itself once, in a
// ProbeSpec beside its class: its name, the triggers that re-run it, the Node condition it feeds,
// whether the default gate requires it and its settings (type, default, bounds, meaning). The
// agent's own config sections (`kube`) declare their settings the same way in a SectionSpec.
// probes/registry.cpp lists every spec; from that list come the Node conditions, the default
// gate, config validation (parseConfig) and the settings tables of the docs (a test asserts the
// docs match). Specs are constants: nothing writes to them after start.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nodegate {

// What may cause a probe to re-run. The periodic resync runs everything; the others run only the
// probes that list them.
enum Trigger : std::uint32_t {
  kTriggerTimer = 1u << 0,
  kTriggerUdevMisc = 1u << 1,   // misc devices: kvm, vhost-net, tun
  kTriggerUdevBlock = 1u << 2,  // block devices: storage probes
  kTriggerNetLink = 1u << 3,    // netlink link add/remove
  kTriggerDBusTime = 1u << 4,   // timedate1 PropertiesChanged
  kTriggerDns = 1u << 5,        // DNS tracer verdict changed
  kTriggerMounts = 1u << 6,     // mount table changed
  kTriggerKube = 1u << 7,       // the Node or a pod bound to it changed what kubevirt-node reads
};

// Trigger names as used in config, docs and metrics: timer, udev-misc, udev-block, netlink,
// dbus-time, dns, mounts, kube.
std::string_view triggerName(std::uint32_t bit);  // "other" for an unknown bit
std::optional<std::uint32_t> parseTriggerName(std::string_view name);
const std::vector<std::string>& triggerNames();
std::string triggerList(std::uint32_t bits);  // "timer, udev-misc"

enum class SettingType {
  Number,   // any finite number within [min, max]
  Integer,  // a whole number within [min, max]
  Flag,     // true or false
  Text,     // a string of at most `max` bytes, one of `choices` when there are any
  List,     // a list of at most `max` strings, each one of `choices` when there are any
};
std::string_view toString(SettingType t);

// One setting of one section of `checks` in --config, e.g. checks.lvm.data_warn_percent.
struct SettingSpec {
  std::string section;  // the check name ("lvm") or an agent section ("kube")
  std::string key;      // "data_warn_percent"
  SettingType type = SettingType::Number;
  // The default. Null when the owner computes it at run time from something else (a flag, the
  // resync period); `derived` then says how, for the docs.
  nlohmann::json fallback;
  double min = 0, max = 0;  // Number/Integer: the value; Text: bytes; List: entries (min ignored)
  std::vector<std::string> choices;  // Text and List entries: the accepted values (empty: any)
  std::string doc;                   // one line: what it changes, with its unit
  std::string derived;

  // Why value is not accepted ("must be a number from 0 to 100"), or nullopt when it is.
  std::optional<std::string> check(const nlohmann::json& value) const;
  // The default as the docs show it: "80", "\"lvm\"", "[\"coredns\"]" or `derived`.
  std::string defaultText() const;
  // The accepted values as the docs show them: "0 – 100", "true/false", "≤ 4096 bytes".
  std::string boundsText() const;
};

// Helpers that keep declarations short; every setting gets bounds.
SettingSpec numberSetting(std::string section, std::string key, double fallback, double min,
                          double max, std::string doc);
SettingSpec integerSetting(std::string section, std::string key, double fallback, double min,
                           double max, std::string doc);
SettingSpec flagSetting(std::string section, std::string key, bool fallback, std::string doc);
SettingSpec textSetting(std::string section, std::string key, std::string fallback, std::string doc,
                        std::vector<std::string> choices = {}, std::size_t max_bytes = 4096);
SettingSpec listSetting(std::string section, std::string key, std::vector<std::string> fallback,
                        std::string doc, std::vector<std::string> choices = {},
                        std::size_t max_entries = 256);
// The same setting with its default computed at run time (described by `how`).
SettingSpec derivedDefault(SettingSpec s, std::string how);

// A section of `checks` that is not a check: the agent's own parts (kube).
struct SectionSpec {
  std::string name;
  std::string summary;
  std::vector<const SettingSpec*> settings;
};

struct ProbeSpec {
  std::string name;  // kebab-case, stable: metric label, API path, config section
  std::string summary;
  std::uint32_t triggers = kTriggerTimer;
  std::string condition;          // the Node condition it feeds ("" none)
  bool default_required = false;  // in the default gate.required
  std::vector<const SettingSpec*> settings;
  // The checks whose results this probe reads (ProbeContext::read). The runner starts the probe
  // after those of the same cycle have finished or missed their deadline, and a cycle that runs
  // one of them runs the probe too, so it never compares against an older verdict than the one
  // just published. A check not run in the cycle is read as its latest run. No cycles: a probe
  // that reads itself, directly or not, is refused when the runner is built.
  std::vector<std::string> reads = {};
};

// Settings every check has, read by the agent's loop under checks.<check>.<key>. Their
// `section` is empty: they apply to whichever check they are set for.
extern const SettingSpec kProbeTimeoutSetting;   // timeout_seconds: the probe's deadline
extern const SettingSpec kProbeTriggersSetting;  // triggers: extra trigger names
const std::vector<const SettingSpec*>& commonProbeSettings();

// Everything --config may name: checks (gate.required, damping, checks.<check>) and the agent's
// sections (checks.<section>). probes/registry.cpp builds the one the binary uses.
struct ConfigSchema {
  std::vector<const ProbeSpec*> checks;
  std::vector<const SectionSpec*> sections;
  // Bounds of damping.<check>.
  int max_damping = 100;

  const ProbeSpec* check(std::string_view name) const;
  const SectionSpec* section(std::string_view name) const;
  std::set<std::string> defaultRequired() const;
  std::vector<std::string> checkNames() const;
  // condition type -> the checks that feed it, in registry order.
  std::vector<std::pair<std::string, std::vector<std::string>>> conditions() const;
};

// What the docs and the chart show, derived from a schema (a test keeps docs/config.md and
// charts/nodegate/values.schema.json equal to these):
// a Markdown table per check and section, and the JSON Schema of the chart's `config` value.
std::string settingsMarkdown(const ConfigSchema& schema);
nlohmann::json configJsonSchema(const ConfigSchema& schema);

}  // namespace nodegate
