#include "nodegate/config.h"

#include "nodegate/host_root.h"

namespace nodegate {
namespace {

const nlohmann::json* setting(const nlohmann::json& checks, std::string_view probe,
                              std::string_view key) {
  auto p = checks.find(std::string(probe));
  if (p == checks.end() || !p->is_object()) return nullptr;
  auto k = p->find(std::string(key));
  return k == p->end() ? nullptr : &*k;
}

}  // namespace

double Config::number(std::string_view probe, std::string_view key, double fallback) const {
  const auto* v = setting(checks, probe, key);
  return v && v->is_number() ? v->get<double>() : fallback;
}

std::string Config::text(std::string_view probe, std::string_view key, std::string fallback) const {
  const auto* v = setting(checks, probe, key);
  return v && v->is_string() ? v->get<std::string>() : fallback;
}

bool Config::flag(std::string_view probe, std::string_view key, bool fallback) const {
  const auto* v = setting(checks, probe, key);
  return v && v->is_boolean() ? v->get<bool>() : fallback;
}

std::vector<std::string> Config::list(std::string_view probe, std::string_view key,
                                      std::vector<std::string> fallback) const {
  const auto* v = setting(checks, probe, key);
  if (!v || !v->is_array()) return fallback;
  std::vector<std::string> out;
  for (const auto& e : *v)
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

void Config::set(std::string_view probe, std::string_view key, nlohmann::json value) {
  checks[std::string(probe)][std::string(key)] = std::move(value);
}

Result<Config> parseConfig(std::string_view text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return Error{EINVAL, std::string("failed to parse config: ") + e.what()};
  }
  if (!doc.is_object()) return Error{EINVAL, "failed to parse config: top level is not an object"};
  Config cfg;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    if (key == "gate") {
      if (!it->is_object()) return Error{EINVAL, "failed to parse config: gate is not an object"};
      if (auto req = it->find("required"); req != it->end()) {
        if (!req->is_array())
          return Error{EINVAL, "failed to parse config: gate.required is not a list"};
        cfg.required.clear();
        for (const auto& e : *req) {
          if (!e.is_string())
            return Error{EINVAL, "failed to parse config: gate.required holds a non-string"};
          cfg.required.insert(e.get<std::string>());
        }
      }
    } else if (key == "checks") {
      if (!it->is_object()) return Error{EINVAL, "failed to parse config: checks is not an object"};
      cfg.checks = *it;
    } else if (key == "damping") {
      if (!it->is_object())
        return Error{EINVAL, "failed to parse config: damping is not an object"};
      for (auto d = it->begin(); d != it->end(); ++d) {
        if (!d->is_number_integer() || d->get<int>() < 1)
          return Error{EINVAL, "failed to parse config: damping." + d.key() + " must be >= 1"};
        cfg.damping[d.key()] = d->get<int>();
      }
    } else {
      return Error{EINVAL, "failed to parse config: unknown key \"" + key + "\""};
    }
  }
  return cfg;
}

Result<Config> loadConfig(const std::string& path) {
  auto text = readFile(path, 1u << 20);
  if (!text) return text.error();
  return parseConfig(*text);
}

}  // namespace nodegate
