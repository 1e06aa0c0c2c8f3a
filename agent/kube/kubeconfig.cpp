#include "kube/kubeconfig.h"

#include <nlohmann/json.hpp>

#include "kube/base64.h"
#include "kube/yaml_lite.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty()) return p;
  return base_dir + "/" + p;
}

const json* namedEntry(const json& doc, const char* list, const std::string& name,
                       const char* inner) {
  auto it = doc.find(list);
  if (it == doc.end() || !it->is_array()) return nullptr;
  for (const auto& e : *it)
    if (e.is_object() && e.value("name", "") == name && e.contains(inner) && e[inner].is_object())
      return &e[inner];
  return nullptr;
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<ClientConfig> parseKubeconfig(std::string_view text, const std::string& base_dir) {
  auto parsed = parseYamlSubset(text);
  if (!parsed) return Error{EINVAL, "failed to load kubeconfig: " + parsed.error().message};
  const json& doc = *parsed;
  if (!doc.is_object()) return Error{EINVAL, "failed to load kubeconfig: not a mapping"};
  std::string ctx_name = str(doc, "current-context");
  if (ctx_name.empty()) return Error{EINVAL, "failed to load kubeconfig: no current-context"};
  const json* ctx = namedEntry(doc, "contexts", ctx_name, "context");
  if (!ctx)
    return Error{EINVAL, "failed to load kubeconfig: context \"" + ctx_name + "\" not found"};
  std::string cluster_name = str(*ctx, "cluster"), user_name = str(*ctx, "user");
  const json* cluster = namedEntry(doc, "clusters", cluster_name, "cluster");
  if (!cluster)
    return Error{EINVAL, "failed to load kubeconfig: cluster \"" + cluster_name + "\" not found"};

  ClientConfig c;
  c.source = "kubeconfig context " + ctx_name;
  c.server = str(*cluster, "server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.empty())
    return Error{EINVAL,
                 "failed to load kubeconfig: cluster \"" + cluster_name + "\" has no server"};
  bool ok = true;
  if (auto d = str(*cluster, "certificate-authority-data"); !d.empty()) {
    c.ca_pem = base64Decode(d, &ok);
    if (!ok)
      return Error{EINVAL, "failed to load kubeconfig: certificate-authority-data is not base64"};
  }
  c.ca_file = resolve(base_dir, str(*cluster, "certificate-authority"));
  c.insecure = cluster->value("insecure-skip-tls-verify", false) == true;

  const json* user = user_name.empty() ? nullptr : namedEntry(doc, "users", user_name, "user");
  if (!user_name.empty() && !user)
    return Error{EINVAL, "failed to load kubeconfig: user \"" + user_name + "\" not found"};
  if (user) {
    if (user->contains("exec") || user->contains("auth-provider"))
      return Error{ENOTSUP, "failed to load kubeconfig: user \"" + user_name +
                                "\" uses exec/auth-provider credentials, which nodegate does not "
                                "support (use a token, tokenFile or client certificate)"};
    c.token = str(*user, "token");
    c.token_file = resolve(base_dir, str(*user, "tokenFile"));
    if (auto d = str(*user, "client-certificate-data"); !d.empty()) {
      c.cert_pem = base64Decode(d, &ok);
      if (!ok)
        return Error{EINVAL, "failed to load kubeconfig: client-certificate-data is not base64"};
    }
    if (auto d = str(*user, "client-key-data"); !d.empty()) {
      c.key_pem = base64Decode(d, &ok);
      if (!ok) return Error{EINVAL, "failed to load kubeconfig: client-key-data is not base64"};
    }
    c.cert_file = resolve(base_dir, str(*user, "client-certificate"));
    c.key_file = resolve(base_dir, str(*user, "client-key"));
  }
  return c;
}

Result<ClientConfig> loadKubeconfig(const std::string& path) {
  auto text = readCredentialFile(path, "kubeconfig");
  if (!text) return text.error();
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  auto c = parseKubeconfig(*text, dir);
  if (!c) return c;
  ClientConfig cfg = std::move(c).value();
  if (!cfg.cert_file.empty()) {
    auto pem = readCredentialFile(cfg.cert_file, "client certificate");
    if (!pem) return pem.error();
    cfg.cert_pem = *pem;
  }
  if (!cfg.key_file.empty()) {
    auto pem = readCredentialFile(cfg.key_file, "client key");
    if (!pem) return pem.error();
    cfg.key_pem = *pem;
  }
  cfg.source = "kubeconfig " + path + " " + cfg.source.substr(std::string("kubeconfig ").size());
  return cfg;
}

}  // namespace nodegate::kube
