#include "lvm_report.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "text.h"

namespace nodegate {
namespace {

using nlohmann::json;

// lvm's reports nest four levels deep; anything much deeper is not a report, and refusing it
// early keeps hostile input away from the recursive parts of the JSON library.
constexpr int kMaxDepth = 32;

bool isWarningLine(std::string_view line) {
  line = trim(line);
  return line.rfind("WARNING:", 0) == 0 || line.rfind("WARNING ", 0) == 0;
}

int nestingDepth(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[')
      max_depth = std::max(max_depth, ++depth);
    else if (c == '}' || c == ']')
      --depth;
  }
  return max_depth;
}

// A field as text whatever form the report used: json's strings, json_std's numbers and null.
std::string text(const json& obj, const char* key, bool* saw_std = nullptr) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (it != obj.end() && saw_std) *saw_std = true;
    return {};
  }
  if (it->is_string()) return it->get<std::string>();
  if (saw_std) *saw_std = true;
  if (it->is_boolean()) return it->get<bool>() ? "1" : "0";
  if (it->is_number_unsigned()) return std::to_string(it->get<std::uint64_t>());
  if (it->is_number_integer()) return std::to_string(it->get<std::int64_t>());
  if (it->is_number_float()) {
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, it->get<double>());
    return ec == std::errc() ? std::string(buf, p) : std::string();
  }
  return {};
}

std::optional<double> parseDouble(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Bytes from "1073741824" (--units b --nosuffix) or lvm's human form "<1.47g", "4.00m", "0 ".
// Lower-case units are powers of 1024, upper-case powers of 1000 (lvm(8) --units).
std::optional<std::uint64_t> parseSize(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  if (auto v = parseU64(s)) return v;
  if (s.front() == '<' || s.front() == '>') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  double mult = 1;
  const char unit = s.back();
  static constexpr std::string_view kUnits = "bskmgtpe";
  if (auto pos = kUnits.find(static_cast<char>(unit | 0x20));
      pos != std::string_view::npos && !(unit >= '0' && unit <= '9')) {
    s.remove_suffix(1);
    const bool si = unit >= 'A' && unit <= 'Z';
    if (pos == 1) mult = 512;  // sectors
    for (std::size_t i = 2; i <= pos; ++i) mult *= si ? 1000.0 : 1024.0;
  }
  auto v = parseDouble(s);
  if (!v || *v < 0 || *v * mult > 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(*v * mult));
}

// lvm prints binary fields as "1"/"0" with binary_values_as_numeric, as the field's name
// ("partial", "missing") or "" otherwise, and as true/1/null in json_std.
bool parseFlag(std::string_view s, std::string_view word) {
  s = trim(s);
  return s == "1" || s == word || s == "true";
}

Result<json> parseJsonDocument(std::string_view text, std::vector<std::string>* warnings) {
  std::string cleaned;
  cleaned.reserve(text.size());
  forEachLine(text, [&](std::string_view line) {
    if (isWarningLine(line)) {
      if (warnings->size() < kMaxLvmWarnings) warnings->emplace_back(trim(line));
      return;
    }
    cleaned.append(line);
    cleaned.push_back('\n');
  });
  std::string_view body = cleaned;
  auto first = body.find('{');
  auto last = body.rfind('}');
  if (first == std::string_view::npos || last == std::string_view::npos || last < first)
    return Error{EINVAL, "failed to parse lvm report: no JSON object in the output"};
  if (!trim(body.substr(0, first)).empty())
    return Error{EINVAL, "failed to parse lvm report: unexpected text before the JSON: \"" +
                             std::string(trim(body.substr(0, first)).substr(0, 60)) + "\""};
  if (!trim(body.substr(last + 1)).empty())
    return Error{EINVAL, "failed to parse lvm report: unexpected text after the JSON: \"" +
                             std::string(trim(body.substr(last + 1)).substr(0, 60)) + "\""};
  body = body.substr(first, last - first + 1);
  if (nestingDepth(body) > kMaxDepth)
    return Error{EINVAL, "failed to parse lvm report: JSON nested deeper than a report can be"};
  try {
    return json::parse(body);
  } catch (const std::exception& e) {
    return Error{EINVAL, std::string("failed to parse lvm report: ") + e.what()};
  }
}

// The objects of one sub-report ("vg", "pv", "lv"); missing is empty, anything else an error.
Result<std::vector<const json*>> section(const json& element, const char* key) {
  std::vector<const json*> out;
  auto it = element.find(key);
  if (it == element.end()) return out;
  if (!it->is_array())
    return Error{EINVAL, std::string("failed to parse lvm report: \"") + key + "\" is not a list"};
  for (const auto& e : *it) {
    if (!e.is_object())
      return Error{EINVAL,
                   std::string("failed to parse lvm report: \"") + key + "\" holds a non-object"};
    out.push_back(&e);
  }
  return out;
}

}  // namespace

std::string_view toString(LvHealth h) {
  switch (h) {
    case LvHealth::Ok:
      return "ok";
    case LvHealth::Partial:
      return "partial";
    case LvHealth::RefreshNeeded:
      return "refresh needed";
    case LvHealth::MismatchesExist:
      return "mismatches exist";
    case LvHealth::WriteMostly:
      return "writemostly";
    case LvHealth::Failed:
      return "failed";
    case LvHealth::OutOfData:
      return "out_of_data";
    case LvHealth::MetadataReadOnly:
      return "metadata_read_only";
    case LvHealth::Error:
      return "error";
    case LvHealth::Unknown:
      return "unknown";
    case LvHealth::Other:
      return "other";
  }
  return "other";
}

LvHealth parseLvHealth(std::string_view t) {
  t = trim(t);
  if (t.empty()) return LvHealth::Ok;
  for (auto h : {LvHealth::Partial, LvHealth::RefreshNeeded, LvHealth::MismatchesExist,
                 LvHealth::WriteMostly, LvHealth::Failed, LvHealth::OutOfData,
                 LvHealth::MetadataReadOnly, LvHealth::Error, LvHealth::Unknown})
    if (t == toString(h)) return h;
  return LvHealth::Other;
}

bool isProblem(LvHealth h) {
  return h != LvHealth::Ok && h != LvHealth::WriteMostly && h != LvHealth::Unknown;
}

LvAttr parseLvAttr(std::string_view t) {
  LvAttr a;
  if (t.size() != 10) return a;
  a.valid = true;
  a.type = t[0];
  a.permission = t[1];
  a.allocation = t[2];
  a.fixed_minor = t[3] == 'm';
  a.state = t[4];
  a.open = t[5];
  a.target = t[6];
  a.zero = t[7] == 'z';
  a.health = t[8];
  a.skip_activation = t[9] == 'k';
  return a;
}

namespace {

struct AttrWord {
  char letter;
  const char* word;
};

// lvs(8) "lv_attr bits", position by position.
constexpr AttrWord kTypeWords[] = {{'C', "cache"},
                                   {'m', "mirrored"},
                                   {'M', "mirrored without initial sync"},
                                   {'o', "snapshot origin"},
                                   {'O', "origin with merging snapshot"},
                                   {'r', "raid"},
                                   {'R', "raid without initial sync"},
                                   {'s', "snapshot"},
                                   {'S', "merging snapshot"},
                                   {'p', "pvmove"},
                                   {'v', "virtual"},
                                   {'i', "mirror or raid image"},
                                   {'I', "mirror or raid image out of sync"},
                                   {'l', "mirror log"},
                                   {'c', "under conversion"},
                                   {'V', "thin volume"},
                                   {'t', "thin pool"},
                                   {'T', "thin pool data"},
                                   {'d', "vdo pool"},
                                   {'D', "vdo pool data"},
                                   {'e', "raid or pool metadata"},
                                   {'g', "integrity"}};
constexpr AttrWord kPermissionWords[] = {
    {'w', "writeable"}, {'r', "read-only"}, {'R', "read-only activation of a writeable volume"}};
constexpr AttrWord kStateWords[] = {{'a', "active"},
                                    {'h', "historical"},
                                    {'s', "suspended"},
                                    {'I', "invalid snapshot"},
                                    {'S', "invalid suspended snapshot"},
                                    {'m', "snapshot merge failed"},
                                    {'M', "suspended snapshot merge failed"},
                                    {'d', "mapped device present without tables"},
                                    {'i', "mapped device present with inactive table"},
                                    {'c', "thin pool check needed"},
                                    {'C', "suspended thin pool check needed"},
                                    {'X', "state unknown"}};
constexpr AttrWord kOpenWords[] = {{'o', "open"}, {'X', "open state unknown"}};
constexpr AttrWord kTargetWords[] = {
    {'C', "cache target"},    {'m', "mirror target"}, {'r', "raid target"},
    {'s', "snapshot target"}, {'t', "thin target"},   {'u', "unknown target"},
    {'v', "virtual target"},  {'d', "vdo target"},    {'g', "integrity target"}};
constexpr AttrWord kHealthWords[] = {
    {'p', "partial (a PV is missing)"}, {'X', "health unknown"},     {'r', "refresh needed"},
    {'m', "mismatches exist"},          {'w', "writemostly"},        {'F', "failed"},
    {'D', "out of data space"},         {'M', "metadata read-only"}, {'E', "error"}};

template <std::size_t N>
const char* wordOf(const AttrWord (&table)[N], char c) {
  for (const auto& w : table)
    if (w.letter == c) return w.word;
  return nullptr;
}

}  // namespace

std::string describeLvAttr(const LvAttr& a) {
  if (!a.valid) return "unparsable lv_attr";
  std::vector<const char*> w;
  const char* type = wordOf(kTypeWords, a.type);
  w.push_back(type ? type : "linear or striped");
  w.push_back(wordOf(kPermissionWords, a.permission));
  if (a.allocation >= 'A' && a.allocation <= 'Z') w.push_back("allocation locked");
  if (a.fixed_minor) w.push_back("fixed minor");
  const char* state = wordOf(kStateWords, a.state);
  w.push_back(state ? state : "inactive");
  w.push_back(wordOf(kOpenWords, a.open));
  w.push_back(wordOf(kTargetWords, a.target));
  if (a.zero) w.push_back("zeroes new blocks");
  w.push_back(wordOf(kHealthWords, a.health));
  if (a.skip_activation) w.push_back("skip activation");
  std::string out;
  for (const char* s : w) {
    if (!s) continue;
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

LvHealth LvmLv::effectiveHealth() const {
  if (health != LvHealth::Ok) return health;
  switch (attr.health) {
    case 'p':
      return LvHealth::Partial;
    case 'r':
      return LvHealth::RefreshNeeded;
    case 'm':
      return LvHealth::MismatchesExist;
    case 'w':
      return LvHealth::WriteMostly;
    case 'F':
      return LvHealth::Failed;
    case 'D':
      return LvHealth::OutOfData;
    case 'M':
      return LvHealth::MetadataReadOnly;
    case 'E':
      return LvHealth::Error;
    case 'X':
      return LvHealth::Unknown;
    default:
      return LvHealth::Ok;
  }
}

const LvmLv* LvmReport::findLv(std::string_view vg, std::string_view name) const {
  for (const auto& lv : lvs)
    if (lv.vg == vg && lv.name == name) return &lv;
  return nullptr;
}

Result<LvmReport> parseLvmReport(std::string_view input) {
  LvmReport rep;
  auto doc = parseJsonDocument(input, &rep.warnings);
  if (!doc) return doc.error();
  const json& root = *doc;
  if (!root.is_object())
    return Error{EINVAL, "failed to parse lvm report: top level is not an object"};
  auto reports = root.find("report");
  if (reports == root.end() || !reports->is_array())
    return Error{EINVAL, "failed to parse lvm report: no \"report\" list"};
  bool saw_std = false;
  for (const auto& element : *reports) {
    if (!element.is_object())
      return Error{EINVAL, "failed to parse lvm report: a report entry is not an object"};
    auto vgs = section(element, "vg");
    auto pvs = section(element, "pv");
    auto lvs = section(element, "lv");
    if (!vgs) return vgs.error();
    if (!pvs) return pvs.error();
    if (!lvs) return lvs.error();
    // fullreport emits one entry per VG; its PVs and LVs belong to that VG.
    std::string vg_name;
    for (const json* v : *vgs) {
      LvmVg vg;
      vg.name = text(*v, "vg_name", &saw_std);
      vg.uuid = text(*v, "vg_uuid", &saw_std);
      vg.attr = text(*v, "vg_attr", &saw_std);
      vg.size = parseSize(text(*v, "vg_size", &saw_std));
      vg.free = parseSize(text(*v, "vg_free", &saw_std));
      // vg_attr's fourth character is 'p' for a partial VG even when vg_partial is not asked for.
      vg.partial = parseFlag(text(*v, "vg_partial", &saw_std), "partial") ||
                   (vg.attr.size() >= 4 && vg.attr[3] == 'p');
      vg.missing_pv_count = parseU64(text(*v, "vg_missing_pv_count", &saw_std)).value_or(0);
      vg.pv_count = parseU64(text(*v, "pv_count", &saw_std)).value_or(0);
      if (vg_name.empty()) vg_name = vg.name;
      if (!vg.name.empty() || !vg.uuid.empty()) rep.vgs.push_back(std::move(vg));
    }
    for (const json* p : *pvs) {
      LvmPv pv;
      pv.name = text(*p, "pv_name", &saw_std);
      pv.uuid = text(*p, "pv_uuid", &saw_std);
      pv.attr = text(*p, "pv_attr", &saw_std);
      pv.vg = text(*p, "vg_name", &saw_std);
      if (pv.vg.empty()) pv.vg = vg_name;
      pv.missing = parseFlag(text(*p, "pv_missing", &saw_std), "missing") ||
                   (pv.attr.size() >= 3 && pv.attr[2] == 'm');
      pv.size = parseSize(text(*p, "pv_size", &saw_std));
      if (!pv.name.empty() || !pv.uuid.empty()) rep.pvs.push_back(std::move(pv));
    }
    for (const json* l : *lvs) {
      LvmLv lv;
      lv.name = text(*l, "lv_name", &saw_std);
      lv.full_name = text(*l, "lv_full_name", &saw_std);
      lv.uuid = text(*l, "lv_uuid", &saw_std);
      lv.vg = text(*l, "vg_name", &saw_std);
      if (lv.vg.empty()) {
        auto slash = lv.full_name.find('/');
        lv.vg = slash != std::string::npos ? lv.full_name.substr(0, slash) : vg_name;
      }
      lv.attr_text = text(*l, "lv_attr", &saw_std);
      lv.attr = parseLvAttr(lv.attr_text);
      lv.health_text = text(*l, "lv_health_status", &saw_std);
      lv.health = parseLvHealth(lv.health_text);
      lv.permissions = text(*l, "lv_permissions", &saw_std);
      lv.active = text(*l, "lv_active", &saw_std);
      lv.size = parseSize(text(*l, "lv_size", &saw_std));
      lv.data_percent = parseDouble(text(*l, "data_percent", &saw_std));
      lv.metadata_percent = parseDouble(text(*l, "metadata_percent", &saw_std));
      lv.pool_lv = text(*l, "pool_lv", &saw_std);
      lv.origin = text(*l, "origin", &saw_std);
      lv.when_full = text(*l, "lv_when_full", &saw_std);
      lv.layout = text(*l, "lv_layout", &saw_std);
      lv.role = text(*l, "lv_role", &saw_std);
      lv.path = text(*l, "lv_path", &saw_std);
      lv.dm_path = text(*l, "lv_dm_path", &saw_std);
      if (lv.full_name.empty() && !lv.vg.empty()) lv.full_name = lv.vg + "/" + lv.name;
      if (!lv.name.empty()) rep.lvs.push_back(std::move(lv));
    }
  }
  if (auto log = root.find("log"); log != root.end()) {
    if (!log->is_array()) return Error{EINVAL, "failed to parse lvm report: \"log\" is not a list"};
    for (const auto& e : *log) {
      if (!e.is_object()) continue;
      LvmLogEntry le;
      le.type = text(e, "log_type");
      le.context = text(e, "log_context");
      le.object = text(e, "log_object_name");
      le.message = text(e, "log_message");
      le.ret_code = static_cast<std::int64_t>(parseDouble(text(e, "log_ret_code")).value_or(0));
      rep.log.push_back(std::move(le));
    }
  }
  rep.format = saw_std ? "json_std" : "json";
  return rep;
}

Result<std::vector<std::string>> splitCommandLine(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (c == '\'') {
      auto end = line.find('\'', i + 1);
      if (end == std::string_view::npos)
        return Error{EINVAL, "failed to split command line: unterminated single quote"};
      cur.append(line.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < line.size() && line[j] != '"'; ++j) {
        // Inside double quotes a backslash only escapes the characters a shell lets it escape.
        if (line[j] == '\\' && j + 1 < line.size() && std::strchr("\"\\$`", line[j + 1]) != nullptr)
          ++j;
        cur.push_back(line[j]);
      }
      if (j >= line.size())
        return Error{EINVAL, "failed to split command line: unterminated double quote"};
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= line.size())
        return Error{EINVAL, "failed to split command line: trailing backslash"};
      cur.push_back(line[++i]);
      in_word = true;
    } else {
      cur.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

void collectLvmWarnings(std::string_view text, std::vector<std::string>* warnings) {
  forEachLine(text, [&](std::string_view line) {
    if (isWarningLine(line) && warnings->size() < kMaxLvmWarnings)
      warnings->emplace_back(trim(line));
  });
}

std::vector<std::string> lvmFullreportArgs(std::vector<std::string> argv) {
  // `-o` alone does not select fullreport's sub-report fields; --configreport per section
  // does, and keeps the output (and the parse) small on nodes with hundreds of LVs.
  for (const char* a :
       {"fullreport",
        "--reportformat",
        "json",
        "--units",
        "b",
        "--nosuffix",
        "--configreport",
        "vg",
        "-o",
        "vg_name,vg_uuid,vg_attr,vg_size,vg_free,vg_partial,vg_missing_pv_count,pv_count",
        "--configreport",
        "pv",
        "-o",
        "pv_name,pv_uuid,pv_attr,pv_missing,pv_size",
        "--configreport",
        "lv",
        "-o",
        "lv_name,lv_full_name,lv_uuid,lv_attr,lv_health_status,lv_permissions,lv_active,"
        "lv_size,data_percent,metadata_percent,pool_lv,origin,lv_when_full,lv_layout,lv_role,"
        "lv_path,lv_dm_path",
        "--configreport",
        "pvseg",
        "-o",
        "pvseg_start",
        "--configreport",
        "seg",
        "-o",
        "segtype"})
    argv.emplace_back(a);
  return argv;
}

}  // namespace nodegate
