#include "kube/kubeconfig.h"

#include <cerrno>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/base64.h"
#include "kube/yaml.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty()) return p;
  return base_dir + "/" + p;
}

std::string dirOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A named entry (cluster, context or user) and the directory of the file that defined it, which
// its relative paths are relative to.
struct Entry {
  json value;
  std::string dir;
};

// What kubectl's loader makes of a list of kubeconfig files: the first file to set a value wins
// (current-context, and each cluster, context and user by name, whole), later ones only fill in.
struct Merged {
  std::string current_context;
  std::map<std::string, Entry> clusters, contexts, users;
};

Error bad(const std::string& file, const std::string& why) {
  return Error{EINVAL, "failed to load kubeconfig" + (file.empty() ? "" : " " + file) + ": " + why};
}

Result<void> mergeList(const json& doc, const char* list, const char* inner, const std::string& dir,
                       const std::string& file, std::map<std::string, Entry>* into) {
  auto it = doc.find(list);
  if (it == doc.end() || it->is_null()) return {};
  if (!it->is_array()) return bad(file, std::string(list) + " is not a list");
  for (const auto& e : *it) {
    if (!e.is_object())
      return bad(file, std::string(list) + " holds an entry that is not a mapping");
    const std::string name = str(e, "name");
    if (name.empty()) return bad(file, std::string(list) + " holds an entry without a name");
    auto v = e.find(inner);
    json value = v != e.end() && v->is_object() ? *v : json::object();
    into->try_emplace(name, Entry{value, dir});
  }
  return {};
}

// One file's text into the merge. Only its first YAML document counts, as for kubectl; an empty
// file (or first document) adds nothing.
Result<void> mergeText(std::string_view text, const std::string& dir, const std::string& file,
                       Merged* m) {
  auto docs = parseYamlDocuments(text);
  if (!docs) return bad(file, docs.error().message);
  if (docs->empty() || docs->front().is_null()) return {};
  const json& doc = docs->front();
  if (!doc.is_object()) return bad(file, "not a mapping");
  if (m->current_context.empty()) m->current_context = str(doc, "current-context");
  if (auto r = mergeList(doc, "clusters", "cluster", dir, file, &m->clusters); !r) return r;
  if (auto r = mergeList(doc, "contexts", "context", dir, file, &m->contexts); !r) return r;
  return mergeList(doc, "users", "user", dir, file, &m->users);
}

Result<std::string> inlineData(const json& j, const char* key) {
  std::string d = str(j, key);
  if (d.empty()) return d;
  bool ok = true;
  std::string out = base64Decode(d, &ok);
  if (!ok) return bad("", std::string(key) + " is not base64");
  return out;
}

Result<void> readUser(const std::string& user_name, const Entry& user, ClientConfig* c) {
  const json& u = user.value;
  if (u.contains("exec") || u.contains("auth-provider"))
    return Error{ENOTSUP, "failed to load kubeconfig: user \"" + user_name +
                              "\" uses exec/auth-provider credentials, which nodegate does not "
                              "support (use a token, tokenFile or client certificate)"};
  c->token = str(u, "token");
  c->token_file = resolve(user.dir, str(u, "tokenFile"));
  auto cert = inlineData(u, "client-certificate-data");
  if (!cert) return cert.error();
  auto key = inlineData(u, "client-key-data");
  if (!key) return key.error();
  c->cert_pem = *cert;
  c->key_pem = *key;
  c->cert_file = resolve(user.dir, str(u, "client-certificate"));
  c->key_file = resolve(user.dir, str(u, "client-key"));
  return {};
}

// The current context's cluster and user out of the merged files.
Result<ClientConfig> resolveMerged(const Merged& m) {
  const std::string& ctx_name = m.current_context;
  if (ctx_name.empty()) return bad("", "no current-context");
  auto ctx = m.contexts.find(ctx_name);
  if (ctx == m.contexts.end()) return bad("", "context \"" + ctx_name + "\" not found");
  const std::string cluster_name = str(ctx->second.value, "cluster");
  const std::string user_name = str(ctx->second.value, "user");
  auto cluster = m.clusters.find(cluster_name);
  if (cluster == m.clusters.end()) return bad("", "cluster \"" + cluster_name + "\" not found");
  const json& cl = cluster->second.value;

  ClientConfig c;
  c.source = "kubeconfig context " + ctx_name;
  c.namespace_name = str(ctx->second.value, "namespace");
  c.server = str(cl, "server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.empty()) return bad("", "cluster \"" + cluster_name + "\" has no server");
  auto ca = inlineData(cl, "certificate-authority-data");
  if (!ca) return ca.error();
  c.ca_pem = *ca;
  c.ca_file = resolve(cluster->second.dir, str(cl, "certificate-authority"));
  // Only a boolean counts (a quoted "true" is text, which kubectl refuses too); value() would
  // throw on a string.
  auto insecure = cl.find("insecure-skip-tls-verify");
  c.insecure = insecure != cl.end() && insecure->is_boolean() && insecure->get<bool>();

  if (!user_name.empty()) {
    auto user = m.users.find(user_name);
    if (user == m.users.end()) return bad("", "user \"" + user_name + "\" not found");
    if (auto r = readUser(user_name, user->second, &c); !r) return r.error();
  }
  return c;
}

// Reads the client certificate and key files the config names (once: they do not rotate under
// us the way bound tokens do).
Result<ClientConfig> withClientFiles(ClientConfig cfg) {
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
  return cfg;
}

}  // namespace

Result<ClientConfig> parseKubeconfig(std::string_view text, const std::string& base_dir) {
  Merged m;
  if (auto r = mergeText(text, base_dir, "", &m); !r) return r.error();
  return resolveMerged(m);
}

namespace {

// The files merged in order; a missing one is skipped when `skip_missing` (a $KUBECONFIG list),
// else an error (the one file --kubeconfig names).
Result<ClientConfig> loadFiles(const std::vector<std::string>& paths, bool skip_missing) {
  Merged m;
  std::string used;
  for (const auto& path : paths) {
    auto text = readCredentialFile(path, "kubeconfig");
    if (!text && skip_missing && text.error().code == ENOENT) continue;
    if (!text) return text.error();
    if (auto r = mergeText(*text, dirOf(path), path, &m); !r) return r.error();
    used += (used.empty() ? "" : ":") + path;
  }
  if (used.empty()) {
    std::string all;
    for (const auto& p : paths) all += (all.empty() ? "" : ":") + p;
    return Error{ENOENT, "failed to load kubeconfig: none of the files exists (" + all + ")"};
  }
  auto c = resolveMerged(m);
  if (!c) return Error{c.error().code, c.error().message + " (in " + used + ")"};
  ClientConfig cfg = std::move(c).value();
  cfg.source = "kubeconfig " + used + " context " + m.current_context;
  return withClientFiles(std::move(cfg));
}

}  // namespace

Result<ClientConfig> loadKubeconfig(const std::string& path) {
  return loadFiles({path}, false);
}

Result<ClientConfig> loadKubeconfigList(const std::string& list) {
  std::vector<std::string> paths;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto colon = list.find(':', start);
    if (colon == std::string::npos) colon = list.size();
    if (colon > start) paths.push_back(list.substr(start, colon - start));
    start = colon + 1;
  }
  return loadFiles(paths, true);
}

}  // namespace nodegate::kube
