// Where the API server is and how to authenticate to it: the in-cluster service account or a
// kubeconfig (kube/kubeconfig.h), chosen by --kube and --kubeconfig. Loaded once per process
// (the composition root builds one kube::Connection from it).
#pragma once

#include <cstddef>
#include <string>

#include "nodegate/result.h"

namespace nodegate::kube {

// Where the service-account token, CA and namespace live inside a pod.
inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ClientConfig {
  std::string server;   // https://host:port, no trailing slash
  std::string ca_file;  // reloaded when it changes
  std::string ca_pem;   // inline CA (kubeconfig certificate-authority-data)
  bool insecure = false;
  std::string token;                // static bearer token
  std::string token_file;           // re-read periodically and on 401 (bound tokens rotate)
  std::string cert_file, key_file;  // client certificate auth
  std::string cert_pem, key_pem;
  std::string namespace_name;  // the context's namespace (kubectl's default), "" when none
  std::string source;          // "in-cluster" or "kubeconfig <path> context <name>", for logs
};

// `url` with the user information (https://user:password@host) masked: what logs, evidence and
// errors show of a server URL.
std::string redactedUrl(const std::string& url);

// In-cluster: $KUBERNETES_SERVICE_HOST/PORT plus the token and CA under sa_dir.
bool inClusterAvailable(const std::string& sa_dir = kServiceAccountDir);
Result<ClientConfig> loadInCluster(const std::string& sa_dir = kServiceAccountDir);

// The credentials --kube MODE and --kubeconfig FILE select (auto: in-cluster when available,
// else the kubeconfig; kubeconfig mode falls back to $KUBECONFIG, a path list as for kubectl).
Result<ClientConfig> loadClientConfig(const std::string& mode, const std::string& kubeconfig);

// Reads one of the files credentials come from (kubeconfig, token, CA, client certificate or
// key); `what` names it in the error. Only regular files of at most kMaxCredentialFileBytes are
// read (a kubeconfig with inline certificates is tens of KiB, a CA bundle some hundreds): a
// device, FIFO or huge file is a clear error instead of a hang or an allocation failure.
inline constexpr std::size_t kMaxCredentialFileBytes = 4u << 20;
Result<std::string> readCredentialFile(const std::string& path, const std::string& what);

}  // namespace nodegate::kube
