// Logging: one line per record, `level=info msg="..." key=value ...` on stderr.
// error = the agent cannot do its job; warn = a probe degraded; info = lifecycle and status
// changes (once); debug = per-run detail.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace nodegate::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

using Field = std::pair<std::string_view, std::string>;

void setLevel(Level level);
Level level();
bool parseLevel(std::string_view text, Level* out);
void write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});

inline void debug(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Debug, m, f);
}
inline void info(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Info, m, f);
}
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Warn, m, f);
}
inline void error(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::Error, m, f);
}

}  // namespace nodegate::log
