// Small text helpers the parsers share. All work on string_view and never allocate per line.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
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

}  // namespace nodegate
