#include "kube/yaml.h"

#include <yaml.h>

#include <algorithm>
#include <memory>
#include <string>

namespace nodegate::kube {
namespace {

using nlohmann::json;

std::string scalarText(const yaml_node_t& n) {
  return std::string(reinterpret_cast<const char*>(n.data.scalar.value), n.data.scalar.length);
}

std::string where(const yaml_mark_t& m) {
  return "line " + std::to_string(m.line + 1) + " column " + std::to_string(m.column + 1);
}

bool oneOf(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s == w) return true;
  return false;
}

// YAML 1.1 resolution of null and booleans, as go-yaml v2 (kubectl's reader) does it.
json plainScalar(const std::string& s) {
  if (s.empty() || oneOf(s, {"~", "null", "Null", "NULL"})) return nullptr;
  if (oneOf(s, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"}))
    return true;
  if (oneOf(s, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N"}))
    return false;
  return s;
}

// One document's node graph to JSON. Aliases point at the anchored node, so a node may be
// reached many times: the node budget bounds the expansion, the depth bound a cycle.
class Converter {
 public:
  explicit Converter(yaml_document_t* doc) : doc_(doc) {}

  Result<json> convert(int index, int depth) {
    const yaml_node_t* n = yaml_document_get_node(doc_, index);
    if (!n) return Error{EINVAL, "broken yaml document (no node " + std::to_string(index) + ")"};
    if (depth > kMaxYamlDepth)
      return fail(*n, "nested deeper than " + std::to_string(kMaxYamlDepth) +
                          " levels (or an alias refers to its own parent)");
    if (++nodes_ > kMaxYamlNodes)
      return fail(
          *n, "more than " + std::to_string(kMaxYamlNodes) + " values once aliases are expanded");
    switch (n->type) {
      case YAML_SCALAR_NODE:
        return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plainScalar(scalarText(*n))
                                                               : json(scalarText(*n));
      case YAML_SEQUENCE_NODE: {
        json out = json::array();
        for (auto* it = n->data.sequence.items.start; it < n->data.sequence.items.top; ++it) {
          auto v = convert(*it, depth + 1);
          if (!v) return v;
          out.push_back(std::move(v).value());
        }
        return out;
      }
      case YAML_MAPPING_NODE:
        return mapping(*n, depth);
      default:
        return fail(*n, "empty node");
    }
  }

 private:
  Result<json> mapping(const yaml_node_t& n, int depth) {
    json out = json::object();
    std::vector<json> merged;  // the values of << keys, earliest first
    for (auto* p = n.data.mapping.pairs.start; p < n.data.mapping.pairs.top; ++p) {
      const yaml_node_t* k = yaml_document_get_node(doc_, p->key);
      if (!k || k->type != YAML_SCALAR_NODE) return fail(n, "a mapping key that is not a scalar");
      std::string key = scalarText(*k);
      auto v = convert(p->value, depth + 1);
      if (!v) return v;
      if (key == "<<" && k->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        // A merge key: a mapping or a list of mappings whose keys fill in what this one lacks.
        if (v->is_object()) {
          merged.push_back(std::move(v).value());
        } else if (v->is_array() &&
                   std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_object(); })) {
          for (auto& e : *v) merged.push_back(std::move(e));
        } else {
          return fail(*k, "the merge key << wants a mapping or a list of mappings");
        }
        continue;
      }
      out[key] = std::move(v).value();  // a repeated key: the last one counts, as in kubectl
    }
    for (auto& m : merged)
      for (auto& [key, value] : m.items())
        if (!out.contains(key)) out[key] = value;
    return out;
  }

  Error fail(const yaml_node_t& n, const std::string& why) const {
    return Error{EINVAL, "failed to parse yaml: " + where(n.start_mark) + ": " + why};
  }

  yaml_document_t* doc_;
  std::size_t nodes_ = 0;
};

}  // namespace

Result<std::vector<json>> parseYamlDocuments(std::string_view text) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return Error{ENOMEM, "failed to set up the yaml parser"};
  std::unique_ptr<yaml_parser_t, void (*)(yaml_parser_t*)> own(&parser, yaml_parser_delete);
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  std::vector<json> docs;
  for (;;) {
    yaml_document_t doc;
    if (!yaml_parser_load(&parser, &doc)) {
      std::string why = parser.problem ? parser.problem : "malformed yaml";
      if (parser.context) why = std::string(parser.context) + ": " + why;
      return Error{EINVAL, "failed to parse yaml: " + where(parser.problem_mark) + ": " + why};
    }
    std::unique_ptr<yaml_document_t, void (*)(yaml_document_t*)> own_doc(&doc,
                                                                         yaml_document_delete);
    if (!yaml_document_get_root_node(&doc)) break;  // the end of the stream
    auto v = Converter(&doc).convert(1, 0);
    if (!v) return v.error();
    docs.push_back(std::move(v).value());
  }
  return docs;
}

}  // namespace nodegate::kube
