// YAML as users write it (kubeconfig files), read with libyaml into JSON values: block and flow
// style, JSON itself, anchors and aliases, merge keys (<<), and multi-document streams.
//
// Scalars: a quoted scalar is a string; a plain one is null (null, Null, NULL, ~ or nothing),
// a boolean (YAML 1.1's spellings, as kubectl's go-yaml reads them: true/yes/on/y and
// false/no/off/n, lower, capitalised or upper case) or else a string, numbers included (every
// field nodegate reads is text). Mapping keys must be scalars; a repeated key keeps its last
// value (as kubectl). Aliases are expanded, so the result is bounded: at most kMaxYamlNodes
// values and kMaxYamlDepth levels of nesting (a "billion laughs" document is an error, not a
// hang).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"

namespace nodegate::kube {

inline constexpr std::size_t kMaxYamlNodes = 1'000'000;
inline constexpr int kMaxYamlDepth = 64;

// Every document of the stream, in order (an empty stream gives none). Errors name the line and
// column libyaml stopped at.
Result<std::vector<nlohmann::json>> parseYamlDocuments(std::string_view text);

}  // namespace nodegate::kube
