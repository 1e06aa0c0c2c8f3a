// Base64 (RFC 4648, standard alphabet) as kubeconfig *-data fields and PEM bodies use it.
#pragma once

#include <string>
#include <string_view>

namespace nodegate::kube {

// Decodes; line breaks, spaces and padding are skipped. *ok is false on any other character.
std::string base64Decode(std::string_view in, bool* ok);

}  // namespace nodegate::kube
