// kubeconfig files: the current context's cluster and user, as kubectl reads them.
#pragma once

#include <string>
#include <string_view>

#include "kube/client_config.h"
#include "nodegate/result.h"

namespace nodegate::kube {

// Relative paths in the file are relative to base_dir (the file's directory).
Result<ClientConfig> parseKubeconfig(std::string_view text, const std::string& base_dir);
// Reads the file, then the client certificate and key files it names (read once: they do not
// rotate under us the way bound tokens do).
Result<ClientConfig> loadKubeconfig(const std::string& path);

}  // namespace nodegate::kube
