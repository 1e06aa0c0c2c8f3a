#include "nodegate/config.h"

#include <algorithm>
#include <utility>

#include "nodegate/host_root.h"

namespace nodegate {
namespace {

Error configError(const std::string& what) {
  return Error{EINVAL, "failed to parse config: " + what};
}

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// Parses JSON and reports the first key that appears twice in one object (nlohmann keeps the
// last one silently). The callback sees keys as they are read, one set of names per open object.
Result<nlohmann::json> parseStrict(std::string_view text) {
  std::vector<std::pair<std::string, std::set<std::string>>> open;  // (path, keys seen)
  std::string pending_key, duplicate;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (ev) {
      case E::object_start: {
        std::string path = open.empty() ? "" : open.back().first;
        if (!pending_key.empty()) path += (path.empty() ? "" : ".") + pending_key;
        open.emplace_back(std::move(path), std::set<std::string>{});
        pending_key.clear();
        break;
      }
      case E::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case E::key: {
        pending_key = parsed.get<std::string>();
        if (!open.empty() && !open.back().second.insert(pending_key).second && duplicate.empty())
          duplicate = open.back().first + (open.back().first.empty() ? "" : ".") + pending_key;
        break;
      }
      case E::array_start:
      case E::array_end:
      case E::value:
        pending_key.clear();
        break;
    }
    return true;
  };
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), cb, false);
  if (doc.is_discarded()) return configError("not valid JSON");
  if (!duplicate.empty()) return configError("key \"" + duplicate + "\" is given twice");
  return doc;
}

// gate.required: a list of known check names.
Result<void> parseGate(const nlohmann::json& gate, const ConfigSchema& schema, Config& cfg) {
  if (!gate.is_object()) return configError("gate is not an object");
  for (auto it = gate.begin(); it != gate.end(); ++it)
    if (it.key() != "required") return configError("unknown key gate." + it.key());
  auto req = gate.find("required");
  if (req == gate.end()) return {};
  if (!req->is_array()) return configError("gate.required is not a list");
  cfg.required.clear();
  for (const auto& e : *req) {
    if (!e.is_string()) return configError("gate.required holds " + shown(e) + ", not a name");
    if (!schema.check(e.get<std::string>()))
      return configError("gate.required names unknown check " + shown(e) +
                         " (known: " + joined(schema.checkNames()) + ")");
    cfg.required.insert(e.get<std::string>());
  }
  return {};
}

// checks.<name>: a check's own settings plus the loop's, or an agent section's settings.
Result<void> parseChecks(const nlohmann::json& checks, const ConfigSchema& schema) {
  if (!checks.is_object()) return configError("checks is not an object");
  for (auto sec = checks.begin(); sec != checks.end(); ++sec) {
    std::vector<const SettingSpec*> settings;
    if (const auto* c = schema.check(sec.key())) {
      settings = c->settings;
      const auto& common = commonProbeSettings();
      settings.insert(settings.end(), common.begin(), common.end());
    } else if (const auto* s = schema.section(sec.key())) {
      settings = s->settings;
    } else {
      std::vector<std::string> known = schema.checkNames();
      for (const auto* s : schema.sections) known.push_back(s->name);
      return configError("unknown check or section checks." + sec.key() +
                         " (known: " + joined(known) + ")");
    }
    if (!sec->is_object()) return configError("checks." + sec.key() + " is not an object");
    for (auto kv = sec->begin(); kv != sec->end(); ++kv) {
      auto spec = std::find_if(settings.begin(), settings.end(),
                               [&](const SettingSpec* s) { return s->key == kv.key(); });
      const std::string path = "checks." + sec.key() + "." + kv.key();
      if (spec == settings.end()) {
        std::vector<std::string> keys;
        for (const auto* s : settings) keys.push_back(s->key);
        return configError("unknown key " + path + " (known: " + joined(keys) + ")");
      }
      if (auto why = (*spec)->check(*kv))
        return configError(path + " = " + shown(*kv) + ": " + *why);
    }
  }
  return {};
}

Result<void> parseDamping(const nlohmann::json& damping, const ConfigSchema& schema, Config& cfg) {
  if (!damping.is_object()) return configError("damping is not an object");
  for (auto d = damping.begin(); d != damping.end(); ++d) {
    const std::string path = "damping." + d.key();
    if (!schema.check(d.key()))
      return configError("unknown check " + path + " (known: " + joined(schema.checkNames()) + ")");
    if (!d->is_number_integer() || d->get<double>() < 1 || d->get<double>() > schema.max_damping)
      return configError(path + " = " + shown(*d) + ": must be a whole number from 1 to " +
                         std::to_string(schema.max_damping));
    cfg.damping[d.key()] = d->get<int>();
  }
  return {};
}

const nlohmann::json* configured(const nlohmann::json& checks, std::string_view section,
                                 std::string_view key) {
  auto p = checks.find(std::string(section));
  if (p == checks.end() || !p->is_object()) return nullptr;
  auto k = p->find(std::string(key));
  return k == p->end() ? nullptr : &*k;
}

// The value of s: configured, else derived, else the declared default. Values were validated at
// load; one that set() put there unchecked is used only if the spec accepts it.
template <typename T, typename Is>
T valueOf(const Config& c, const SettingSpec& s, const std::optional<T>& derived, Is is) {
  if (const auto* v = configured(c.checks, s.section, s.key); v && is(*v) && !s.check(*v))
    return v->get<T>();
  if (derived) return *derived;
  if (is(s.fallback)) return s.fallback.get<T>();
  return T{};
}

bool isNumber(const nlohmann::json& v) {
  return v.is_number();
}
bool isText(const nlohmann::json& v) {
  return v.is_string();
}
bool isFlag(const nlohmann::json& v) {
  return v.is_boolean();
}
bool isList(const nlohmann::json& v) {
  return v.is_array() &&
         std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); });
}

}  // namespace

double Config::number(const SettingSpec& s) const {
  return valueOf<double>(*this, s, std::nullopt, isNumber);
}
double Config::number(const SettingSpec& s, double derived) const {
  return valueOf<double>(*this, s, derived, isNumber);
}
std::string Config::text(const SettingSpec& s) const {
  return valueOf<std::string>(*this, s, std::nullopt, isText);
}
std::string Config::text(const SettingSpec& s, std::string derived) const {
  return valueOf<std::string>(*this, s, std::move(derived), isText);
}
bool Config::flag(const SettingSpec& s) const {
  return valueOf<bool>(*this, s, std::nullopt, isFlag);
}
std::vector<std::string> Config::list(const SettingSpec& s) const {
  return valueOf<std::vector<std::string>>(*this, s, std::nullopt, isList);
}
std::vector<std::string> Config::list(const SettingSpec& s,
                                      std::vector<std::string> derived) const {
  return valueOf<std::vector<std::string>>(*this, s, std::move(derived), isList);
}

bool Config::has(const SettingSpec& s) const {
  const auto* v = configured(checks, s.section, s.key);
  return v && !s.check(*v);
}

bool Config::hasProbeTimeout(std::string_view check) const {
  SettingSpec s = kProbeTimeoutSetting;
  s.section = std::string(check);
  return has(s);
}

double Config::probeTimeout(std::string_view check) const {
  SettingSpec s = kProbeTimeoutSetting;
  s.section = std::string(check);
  return number(s);
}

std::vector<std::string> Config::extraTriggers(std::string_view check) const {
  SettingSpec s = kProbeTriggersSetting;
  s.section = std::string(check);
  return list(s);
}

void Config::set(std::string_view section, std::string_view key, nlohmann::json value) {
  checks[std::string(section)][std::string(key)] = std::move(value);
}

Result<Config> parseConfig(std::string_view text, const ConfigSchema& schema) {
  auto doc = parseStrict(text);
  if (!doc) return doc.error();
  if (!doc->is_object()) return configError("top level is not an object");
  Config cfg;
  cfg.required = schema.defaultRequired();
  for (auto it = doc->begin(); it != doc->end(); ++it) {
    const std::string& key = it.key();
    Result<void> r;
    if (key == "gate") {
      r = parseGate(*it, schema, cfg);
    } else if (key == "checks") {
      r = parseChecks(*it, schema);
      if (r) cfg.checks = *it;
    } else if (key == "damping") {
      r = parseDamping(*it, schema, cfg);
    } else {
      r = configError("unknown key \"" + key + "\" (known: gate, checks, damping)");
    }
    if (!r) return r.error();
  }
  return cfg;
}

Result<Config> loadConfig(const std::string& path, const ConfigSchema& schema) {
  auto text = readFile(path, 1u << 20);
  if (!text) return text.error();
  auto cfg = parseConfig(*text, schema);
  if (!cfg) return Error{cfg.error().code, cfg.error().message + " (" + path + ")"};
  return cfg;
}

}  // namespace nodegate
