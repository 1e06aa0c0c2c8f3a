// kubeconfig files: the current context's cluster and user, as kubectl reads them (kube/yaml.h:
// block or flow style, JSON, anchors; only a file's first YAML document counts).
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
// A $KUBECONFIG path list (files separated by ':'), merged as kubectl merges it: files that do
// not exist are skipped; the first file to set current-context wins, and so does the first to
// define a cluster, context or user of a given name (whole: later files do not fill in its
// fields); relative paths are relative to the file that names them.
Result<ClientConfig> loadKubeconfigList(const std::string& list);

}  // namespace nodegate::kube
