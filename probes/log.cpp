#include "nodegate/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace nodegate::log {
namespace {
std::atomic<Level> g_level{Level::Info};
std::mutex g_mu;  // one record per line even when threads log at once

bool needsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v)
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
  return false;
}

void appendValue(std::string& out, std::string_view v) {
  if (!needsQuotes(v)) {
    out.append(v);
    return;
  }
  out += '"';
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
}
}  // namespace

void setLevel(Level l) {
  g_level = l;
}
Level level() {
  return g_level;
}

bool parseLevel(std::string_view text, Level* out) {
  static constexpr std::pair<std::string_view, Level> kNames[] = {{"debug", Level::Debug},
                                                                  {"info", Level::Info},
                                                                  {"warn", Level::Warn},
                                                                  {"error", Level::Error}};
  for (auto [name, l] : kNames)
    if (name == text) {
      *out = l;
      return true;
    }
  return false;
}

void write(Level l, std::string_view msg, std::initializer_list<Field> fields) {
  if (l < g_level) return;
  static constexpr const char* kLevel[] = {"debug", "info", "warn", "error"};
  char ts[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string line = "ts=";
  line += ts;
  line += " level=";
  line += kLevel[static_cast<int>(l)];
  line += " msg=";
  appendValue(line, msg);
  for (const auto& [k, v] : fields) {
    line += ' ';
    line.append(k);
    line += '=';
    appendValue(line, v);
  }
  line += '\n';
  std::lock_guard lock(g_mu);
  std::fputs(line.c_str(), stderr);
}

}  // namespace nodegate::log
