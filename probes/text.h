// Small text helpers the parsers share. All work on string_view and never allocate per line.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace nodegate {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// Calls fn(line) for every line, without the newline.
template <typename Fn>
void forEachLine(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    fn(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// Calls fn(word) for every run of non-blank characters.
template <typename Fn>
void forEachWord(std::string_view text, Fn&& fn) {
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) fn(text.substr(i, j - i));
    i = j;
  }
}

// "key : value" -> {"key", "value"}, both trimmed; {"", ""} when there is no separator.
inline std::pair<std::string_view, std::string_view> splitKeyValue(std::string_view line,
                                                                   char sep) {
  auto pos = line.find(sep);
  if (pos == std::string_view::npos) return {{}, {}};
  return {trim(line.substr(0, pos)), trim(line.substr(pos + 1))};
}

// Strict unsigned integer parse of a trimmed field; nullopt on anything else.
inline std::optional<std::uint64_t> parseU64(std::string_view s) {
  s = trim(s);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// A metav1.Time as the API server marshals it ("2026-11-29T14:10:50Z", RFC 3339 in UTC);
// fractional seconds are accepted and dropped; any other zone than "Z" is refused.
inline std::optional<std::chrono::system_clock::time_point> parseApiTime(std::string_view text) {
  const std::string t(text);
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  std::string_view rest = text.substr(static_cast<std::size_t>(consumed));
  if (!rest.empty() && rest[0] == '.') {
    std::size_t i = 1;
    while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') ++i;
    rest.remove_prefix(i);
  }
  if (rest != "Z") return std::nullopt;
  // system_clock counts nanoseconds in 64 bits (years 1678-2262): refuse what it cannot hold.
  if (tm.tm_year < 1970 || tm.tm_year > 2200 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
      tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60 || tm.tm_hour < 0 ||
      tm.tm_min < 0 || tm.tm_sec < 0)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::time_t secs = timegm(&tm);
  if (secs == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(secs);
}

}  // namespace nodegate
