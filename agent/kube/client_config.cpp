#include "kube/client_config.h"

#include <sys/stat.h>

#include <cstdlib>

#include "kube/kubeconfig.h"
#include "nodegate/host_root.h"

namespace nodegate::kube {

Result<std::string> readCredentialFile(const std::string& path, const std::string& what) {
  // The host-root reader: regular files only, opened non-blocking (a FIFO is an error, not a
  // hang; /dev/zero is not read forever) and bounded.
  auto r = readFile(path, kMaxCredentialFileBytes);
  if (r) return r;
  // readFile says "failed to <verb> <path>: <cause>"; name what the file was for.
  const std::string& m = r.error().message;
  auto at = m.find(path + ": ");
  std::string cause = at == std::string::npos ? m : m.substr(at + path.size() + 2);
  return Error{r.error().code, "failed to read " + what + " " + path + ": " + cause};
}

std::string redactedUrl(const std::string& url) {
  auto scheme = url.find("://");
  std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  // The authority ends at the first '/', '?' or '#'; user information is what precedes its
  // last '@' (a password may itself contain '@' when it was not percent-encoded).
  auto end = url.find_first_of("/?#", start);
  if (end == std::string::npos) end = url.size();
  auto at = url.rfind('@', end == 0 ? 0 : end - 1);
  if (at == std::string::npos || at < start) return url;
  return url.substr(0, start) + "REDACTED@" + url.substr(at + 1);
}

bool inClusterAvailable(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  struct stat st {};
  return host && *host && port && *port && ::stat((sa_dir + "/token").c_str(), &st) == 0;
}

Result<ClientConfig> loadInCluster(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return Error{ENOENT,
                 "failed to load in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set"};
  ClientConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_file = sa_dir + "/ca.crt";
  c.source = "in-cluster";
  for (const auto& f : {c.token_file, c.ca_file}) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) return errnoError(errno, "load in-cluster config: " + f);
  }
  return c;
}

Result<ClientConfig> loadClientConfig(const std::string& mode, const std::string& kubeconfig) {
  if (mode == "none") return Error{EINVAL, "--kube none"};
  if (mode == "incluster" || (mode == "auto" && inClusterAvailable())) return loadInCluster();
  if (mode == "kubeconfig" || (mode == "auto" && !kubeconfig.empty())) {
    if (!kubeconfig.empty()) return loadKubeconfig(kubeconfig);
    if (const char* env = std::getenv("KUBECONFIG"); env && *env) return loadKubeconfigList(env);
    return Error{EINVAL, "--kube kubeconfig needs --kubeconfig FILE (or $KUBECONFIG)"};
  }
  return Error{
      ENOENT,
      "failed to find kubernetes credentials: no in-cluster service account and no --kubeconfig"};
}

}  // namespace nodegate::kube
