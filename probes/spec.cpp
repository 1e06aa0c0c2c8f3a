#include "nodegate/spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nodegate {
namespace {

struct TriggerNameEntry {
  std::uint32_t bit;
  std::string_view name;
};
constexpr TriggerNameEntry kTriggerNames[] = {
    {kTriggerTimer, "timer"},          {kTriggerUdevMisc, "udev-misc"},
    {kTriggerUdevBlock, "udev-block"}, {kTriggerNetLink, "netlink"},
    {kTriggerDBusTime, "dbus-time"},   {kTriggerDns, "dns"},
    {kTriggerMounts, "mounts"},        {kTriggerKube, "kube"},
};

std::string fmtNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

std::string joined(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

SettingSpec base(std::string section, std::string key, SettingType type, std::string doc) {
  SettingSpec s;
  s.section = std::move(section);
  s.key = std::move(key);
  s.type = type;
  s.doc = std::move(doc);
  return s;
}

// A whole number as a JSON integer, so defaults print as "80", not "80.0".
nlohmann::json numberJson(double v) {
  if (std::floor(v) == v && std::fabs(v) < 9e15) return static_cast<std::int64_t>(v);
  return v;
}

}  // namespace

std::string_view triggerName(std::uint32_t bit) {
  for (const auto& t : kTriggerNames)
    if (t.bit == bit) return t.name;
  return "other";
}

std::optional<std::uint32_t> parseTriggerName(std::string_view name) {
  for (const auto& t : kTriggerNames)
    if (t.name == name) return t.bit;
  return std::nullopt;
}

const std::vector<std::string>& triggerNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& t : kTriggerNames) out.emplace_back(t.name);
    return out;
  }();
  return names;
}

std::string triggerList(std::uint32_t bits) {
  std::vector<std::string> out;
  for (const auto& t : kTriggerNames)
    if (bits & t.bit) out.emplace_back(t.name);
  return joined(out, ", ");
}

std::string_view toString(SettingType t) {
  switch (t) {
    case SettingType::Number:
      return "number";
    case SettingType::Integer:
      return "integer";
    case SettingType::Flag:
      return "boolean";
    case SettingType::Text:
      return "string";
    case SettingType::List:
      return "list of strings";
  }
  return "?";
}

std::optional<std::string> SettingSpec::check(const nlohmann::json& v) const {
  auto oneOf = [&](const std::string& s) {
    return choices.empty() || std::find(choices.begin(), choices.end(), s) != choices.end();
  };
  switch (type) {
    case SettingType::Number:
    case SettingType::Integer: {
      const bool integer = type == SettingType::Integer;
      if (!v.is_number() || !std::isfinite(v.get<double>()) ||
          (integer && std::floor(v.get<double>()) != v.get<double>()) || v.get<double>() < min ||
          v.get<double>() > max)
        return std::string("must be ") + (integer ? "a whole number" : "a number") + " from " +
               fmtNumber(min) + " to " + fmtNumber(max);
      return std::nullopt;
    }
    case SettingType::Flag:
      if (!v.is_boolean()) return "must be true or false";
      return std::nullopt;
    case SettingType::Text:
      if (!v.is_string()) return "must be a string";
      if (v.get_ref<const std::string&>().size() > max)
        return "must be at most " + fmtNumber(max) + " bytes";
      if (!oneOf(v.get<std::string>())) return "must be one of " + joined(choices, ", ");
      return std::nullopt;
    case SettingType::List:
      if (!v.is_array()) return "must be a list of strings";
      if (v.size() > max) return "must have at most " + fmtNumber(max) + " entries";
      for (const auto& e : v) {
        if (!e.is_string()) return "must be a list of strings (" + e.dump() + " is not one)";
        if (!oneOf(e.get<std::string>()))
          return "holds " + e.dump() + ": entries must be one of " + joined(choices, ", ");
      }
      return std::nullopt;
  }
  return "has an unknown type";
}

std::string SettingSpec::defaultText() const {
  if (fallback.is_null()) return derived;
  return fallback.dump();
}

std::string SettingSpec::boundsText() const {
  switch (type) {
    case SettingType::Number:
    case SettingType::Integer:
      return fmtNumber(min) + " to " + fmtNumber(max);
    case SettingType::Flag:
      return "true, false";
    case SettingType::Text:
      return choices.empty() ? "up to " + fmtNumber(max) + " bytes" : joined(choices, ", ");
    case SettingType::List:
      return "up to " + fmtNumber(max) + " entries" +
             (choices.empty() ? "" : " of " + joined(choices, ", "));
  }
  return "";
}

SettingSpec numberSetting(std::string section, std::string key, double fallback, double min,
                          double max, std::string doc) {
  auto s = base(std::move(section), std::move(key), SettingType::Number, std::move(doc));
  s.fallback = numberJson(fallback);
  s.min = min;
  s.max = max;
  return s;
}

SettingSpec integerSetting(std::string section, std::string key, double fallback, double min,
                           double max, std::string doc) {
  auto s = numberSetting(std::move(section), std::move(key), fallback, min, max, std::move(doc));
  s.type = SettingType::Integer;
  return s;
}

SettingSpec flagSetting(std::string section, std::string key, bool fallback, std::string doc) {
  auto s = base(std::move(section), std::move(key), SettingType::Flag, std::move(doc));
  s.fallback = fallback;
  return s;
}

SettingSpec textSetting(std::string section, std::string key, std::string fallback, std::string doc,
                        std::vector<std::string> choices, std::size_t max_bytes) {
  auto s = base(std::move(section), std::move(key), SettingType::Text, std::move(doc));
  s.fallback = std::move(fallback);
  s.choices = std::move(choices);
  s.max = static_cast<double>(max_bytes);
  return s;
}

SettingSpec listSetting(std::string section, std::string key, std::vector<std::string> fallback,
                        std::string doc, std::vector<std::string> choices,
                        std::size_t max_entries) {
  auto s = base(std::move(section), std::move(key), SettingType::List, std::move(doc));
  s.fallback = std::move(fallback);
  s.choices = std::move(choices);
  s.max = static_cast<double>(max_entries);
  return s;
}

SettingSpec derivedDefault(SettingSpec s, std::string how) {
  s.fallback = nullptr;
  s.derived = std::move(how);
  return s;
}

const SettingSpec kProbeTimeoutSetting =
    numberSetting("", "timeout_seconds", 10, 0.05, 3600,
                  "bound of one run in seconds: lvm's command and each D-Bus call of time-sync "
                  "and node-services (at most 30 s, 1 s when unset) time out at it; a run "
                  "still going 1 s later is published UNKNOWN/ProbeTimeout");
const SettingSpec kProbeTriggersSetting =
    listSetting("", "triggers", {}, "more triggers that re-run the check", triggerNames(), 16);

const std::vector<const SettingSpec*>& commonProbeSettings() {
  static const std::vector<const SettingSpec*> common = {&kProbeTimeoutSetting,
                                                         &kProbeTriggersSetting};
  return common;
}

const ProbeSpec* ConfigSchema::check(std::string_view name) const {
  for (const auto* c : checks)
    if (c->name == name) return c;
  return nullptr;
}

const SectionSpec* ConfigSchema::section(std::string_view name) const {
  for (const auto* s : sections)
    if (s->name == name) return s;
  return nullptr;
}

std::set<std::string> ConfigSchema::defaultRequired() const {
  std::set<std::string> out;
  for (const auto* c : checks)
    if (c->default_required) out.insert(c->name);
  return out;
}

std::vector<std::string> ConfigSchema::checkNames() const {
  std::vector<std::string> out;
  for (const auto* c : checks) out.push_back(c->name);
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> ConfigSchema::conditions() const {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto* c : checks) {
    if (c->condition.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& e) { return e.first == c->condition; });
    if (it == out.end()) it = out.insert(out.end(), {c->condition, {}});
    it->second.push_back(c->name);
  }
  return out;
}

namespace {

std::string cell(std::string text) {
  std::string out;
  for (char c : text) out += c == '|' ? "\\|" : c == '<' ? "&lt;" : std::string(1, c);
  return out;
}

void settingRows(std::string& out, const std::vector<const SettingSpec*>& settings) {
  for (const auto* s : settings)
    out += "| `" + s->key + "` | " + std::string(toString(s->type)) + " | " +
           cell(s->fallback.is_null() ? s->derived : "`" + s->defaultText() + "`") + " | " +
           cell(s->boundsText()) + " | " + cell(s->doc) + " |\n";
}

nlohmann::json settingSchema(const SettingSpec& s) {
  nlohmann::json j;
  j["description"] = s.doc;
  switch (s.type) {
    case SettingType::Number:
    case SettingType::Integer:
      j["type"] = s.type == SettingType::Integer ? "integer" : "number";
      j["minimum"] = numberJson(s.min);
      j["maximum"] = numberJson(s.max);
      break;
    case SettingType::Flag:
      j["type"] = "boolean";
      break;
    case SettingType::Text:
      j["type"] = "string";
      j["maxLength"] = static_cast<std::int64_t>(s.max);
      if (!s.choices.empty()) j["enum"] = s.choices;
      break;
    case SettingType::List:
      j["type"] = "array";
      j["maxItems"] = static_cast<std::int64_t>(s.max);
      j["items"] = {{"type", "string"}};
      if (!s.choices.empty()) j["items"]["enum"] = s.choices;
      break;
  }
  return j;
}

nlohmann::json sectionSchema(const std::string& description,
                             const std::vector<const SettingSpec*>& settings) {
  nlohmann::json props = nlohmann::json::object();
  for (const auto* s : settings) props[s->key] = settingSchema(*s);
  return {{"type", "object"},
          {"description", description},
          {"properties", props},
          {"additionalProperties", false}};
}

}  // namespace

std::string settingsMarkdown(const ConfigSchema& schema) {
  std::string out;
  out += "Every check also takes these (the agent's loop reads them):\n\n";
  out += "| setting | type | default | accepted | meaning |\n|---|---|---|---|---|\n";
  settingRows(out, commonProbeSettings());
  for (const auto* c : schema.checks) {
    out +=
        "\n### `checks." + c->name + "`\n\n" + cell(c->summary) +
        ". Re-run on: " + triggerList(c->triggers) +
        (c->reads.empty() ? std::string()
                          : ", and in every cycle that runs " + joined(c->reads, ", ") +
                                " (it reads their results)") +
        ". Condition: " + (c->condition.empty() ? std::string("none") : "`" + c->condition + "`") +
        ". In the default gate: " + (c->default_required ? "yes" : "no") + ".\n";
    if (c->settings.empty()) {
      out += "\nNo settings of its own.\n";
      continue;
    }
    out += "\n| setting | type | default | accepted | meaning |\n|---|---|---|---|---|\n";
    settingRows(out, c->settings);
  }
  for (const auto* s : schema.sections) {
    out += "\n### `checks." + s->name + "` (not a check)\n\n" + s->summary + ".\n";
    out += "\n| setting | type | default | accepted | meaning |\n|---|---|---|---|---|\n";
    settingRows(out, s->settings);
  }
  return out;
}

nlohmann::json configJsonSchema(const ConfigSchema& schema) {
  nlohmann::json checks = nlohmann::json::object();
  nlohmann::json damping = nlohmann::json::object();
  for (const auto* c : schema.checks) {
    auto settings = c->settings;
    const auto& common = commonProbeSettings();
    settings.insert(settings.end(), common.begin(), common.end());
    checks[c->name] = sectionSchema(c->summary, settings);
    damping[c->name] = {{"type", "integer"}, {"minimum", 1}, {"maximum", schema.max_damping}};
  }
  for (const auto* s : schema.sections) checks[s->name] = sectionSchema(s->summary, s->settings);
  nlohmann::json gate = {{"type", "object"},
                         {"properties",
                          {{"required",
                            {{"type", "array"},
                             {"items", {{"type", "string"}, {"enum", schema.checkNames()}}},
                             {"description", "Checks that must PASS for the gate to open."}}}}},
                         {"additionalProperties", false},
                         {"required", {"required"}}};
  return {{"type", "object"},
          {"properties",
           {{"gate", gate},
            {"checks",
             {{"type", "object"},
              {"properties", checks},
              {"additionalProperties", false},
              {"description", "Per-check settings (docs/config.md)."}}},
            {"damping",
             {{"type", "object"},
              {"properties", damping},
              {"additionalProperties", false},
              {"description", "Runs a new status must hold before it is published, per check."}}}}},
          {"additionalProperties", false},
          {"required", {"gate"}},
          {"description",
           "The agent's --config file (include/nodegate/config.h), derived from the probes' "
           "specs (probes/registry.cpp)."}};
}

}  // namespace nodegate
