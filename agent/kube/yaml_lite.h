// A YAML reader for the subset kubeconfig files use (kubectl writes them; people edit them):
// block mappings and sequences (including "- " at the parent key's indent), plain, single- and
// double-quoted scalars, comments, empty flow collections ({} and []), true/false/null.
// Anything else (anchors, block scalars, non-empty flow collections) is a clear error rather
// than a guess. Every scalar that is not true/false/null comes back as a JSON string.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "nodegate/result.h"

namespace nodegate::kube {

Result<nlohmann::json> parseYamlSubset(std::string_view text);

}  // namespace nodegate::kube
