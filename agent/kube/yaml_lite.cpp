#include "kube/yaml_lite.h"

#include <string>
#include <vector>

namespace nodegate::kube {
namespace {

using nlohmann::json;

struct Line {
  int number;  // 1-based, for messages
  std::size_t indent;
  std::string text;  // without indent and trailing comment
};

Error yamlError(int line, const std::string& what) {
  return Error{EINVAL, "failed to parse yaml: line " + std::to_string(line) + ": " + what};
}

// Drops a trailing " # comment" that is outside quotes.
std::string stripComment(const std::string& s) {
  char quote = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == '\\' && quote == '"') {
        ++i;
        continue;
      }
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) return s.substr(0, i);
  }
  return s;
}

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

Result<json> scalar(const std::string& raw, int line) {
  std::string s = rtrim(raw);
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return json(nullptr);
  if (s == "true" || s == "True" || s == "TRUE") return json(true);
  if (s == "false" || s == "False" || s == "FALSE") return json(false);
  if (s == "{}") return json::object();
  if (s == "[]") return json::array();
  if (s[0] == '{' || s[0] == '[') return yamlError(line, "flow collections are not supported");
  if (s[0] == '&' || s[0] == '*' || s[0] == '|' || s[0] == '>' || s[0] == '!')
    return yamlError(line, "anchors, tags and block scalars are not supported");
  if (s[0] == '\'') {
    if (s.size() < 2 || s.back() != '\'') return yamlError(line, "unterminated single quote");
    std::string out;
    for (std::size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\'' && i + 2 < s.size() && s[i + 1] == '\'') ++i;  // '' is a quote
      out += s[i];
    }
    return json(out);
  }
  if (s[0] == '"') {
    if (s.size() < 2 || s.back() != '"') return yamlError(line, "unterminated double quote");
    std::string out;
    for (std::size_t i = 1; i + 1 < s.size(); ++i) {
      char c = s[i];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i + 1 > s.size() - 1) return yamlError(line, "dangling escape");
      switch (s[i]) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        default:
          return yamlError(line, std::string("unsupported escape \\") + s[i]);
      }
    }
    return json(out);
  }
  return json(s);
}

// Position of the ':' that ends a mapping key, or npos.
std::size_t keyColon(const std::string& s) {
  char quote = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if ((c == '"' || c == '\'') && i == 0) {
      quote = c;
      continue;
    }
    if (c == ':' && (i + 1 == s.size() || s[i + 1] == ' ' || s[i + 1] == '\t')) return i;
  }
  return std::string::npos;
}

bool isDash(const std::string& s) {
  return s == "-" || s.rfind("- ", 0) == 0;
}

class Parser {
 public:
  explicit Parser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  Result<json> document() {
    if (lines_.empty()) return json(nullptr);
    auto v = node(lines_[0].indent);
    if (!v) return v;
    if (pos_ < lines_.size()) return yamlError(lines_[pos_].number, "unexpected indentation");
    return v;
  }

 private:
  Result<json> node(std::size_t indent) {
    const Line& l = lines_[pos_];
    if (isDash(l.text)) return sequence(indent);
    if (keyColon(l.text) != std::string::npos) return mapping(indent);
    ++pos_;
    return scalar(l.text, l.number);
  }

  // The value after "key:" or "- " when it is on the following lines.
  Result<json> nested(std::size_t parent_indent, bool allow_same_indent_seq) {
    if (pos_ >= lines_.size()) return json(nullptr);
    const Line& next = lines_[pos_];
    if (next.indent > parent_indent) return node(next.indent);
    if (allow_same_indent_seq && next.indent == parent_indent && isDash(next.text))
      return sequence(parent_indent);
    return json(nullptr);
  }

  Result<json> sequence(std::size_t indent) {
    json out = json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && isDash(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      std::string rest = l.text.size() > 1 ? l.text.substr(2) : "";
      std::size_t lead = rest.find_first_not_of(' ');
      if (lead == std::string::npos) {
        ++pos_;
        auto v = nested(indent, false);
        if (!v) return v;
        out.push_back(*v);
        continue;
      }
      // "- key: value" opens a mapping whose further keys align with "key".
      l.indent = indent + 2 + lead;
      l.text = rest.substr(lead);
      auto v = node(l.indent);
      if (!v) return v;
      out.push_back(*v);
    }
    return out;
  }

  Result<json> mapping(std::size_t indent) {
    json out = json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent) {
      const Line& l = lines_[pos_];
      if (isDash(l.text)) return yamlError(l.number, "sequence item where a key was expected");
      std::size_t colon = keyColon(l.text);
      if (colon == std::string::npos) return yamlError(l.number, "expected \"key: value\"");
      auto key = scalar(l.text.substr(0, colon), l.number);
      if (!key) return key.error();
      std::string k = key->is_string() ? key->get<std::string>() : key->dump();
      std::string rest = colon + 1 < l.text.size() ? l.text.substr(colon + 1) : "";
      std::size_t lead = rest.find_first_not_of(" \t");
      int number = l.number;
      ++pos_;
      Result<json> v =
          lead == std::string::npos ? nested(indent, true) : scalar(rest.substr(lead), number);
      if (!v) return v;
      if (out.contains(k)) return yamlError(number, "duplicate key \"" + k + "\"");
      out[k] = *v;
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent)
      return yamlError(lines_[pos_].number, "unexpected indentation");
    return out;
  }

  std::vector<Line> lines_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<json> parseYamlSubset(std::string_view text) {
  std::vector<Line> lines;
  int number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string raw(text.substr(start, end - start));
    start = end + 1;
    ++number;
    if (raw.find('\t') != std::string::npos && raw.find_first_not_of(" \t") != std::string::npos &&
        raw.find_first_not_of(' ') < raw.size() && raw[raw.find_first_not_of(' ')] == '\t')
      return yamlError(number, "tabs are not allowed for indentation");
    std::string body = rtrim(stripComment(raw));
    std::size_t indent = body.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    body = body.substr(indent);
    if (body == "---" || body.rfind("%", 0) == 0) continue;
    if (body == "...") break;
    lines.push_back({number, indent, body});
    if (start > text.size()) break;
  }
  try {
    return Parser(std::move(lines)).document();
  } catch (const std::exception& e) {
    return Error{EINVAL, std::string("failed to parse yaml: ") + e.what()};
  }
}

}  // namespace nodegate::kube
