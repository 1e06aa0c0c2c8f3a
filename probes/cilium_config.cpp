#include "cilium_config.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace nodegate {

namespace {

// ConfigMap values are strings; hand-written files sometimes use JSON booleans.
std::optional<std::string> textValue(const nlohmann::json& data, const char* key) {
  auto it = data.find(key);
  if (it == data.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "true" : "false";
  return it->dump();
}

bool isTrue(const std::optional<std::string>& v) {
  return v && (*v == "true" || *v == "True");
}

}  // namespace

Result<CiliumSocketLb> parseCiliumConfig(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return Error{0, "failed to parse cilium-config: not a JSON object"};
  const nlohmann::json* data = &doc;
  if (doc.contains("data")) {
    if (!doc["data"].is_object())
      return Error{0, "failed to parse cilium-config: data is not an object"};
    data = &doc["data"];
  }
  CiliumSocketLb c;
  c.known = true;
  auto kpr = textValue(*data, "kube-proxy-replacement");
  auto sock = textValue(*data, "bpf-lb-sock");
  auto hostns = textValue(*data, "bpf-lb-sock-hostns-only");
  // Before Cilium 1.12 socket LB was called host-reachable services.
  auto legacy = textValue(*data, "enable-host-reachable-services");
  c.kpr_value = kpr.value_or("");
  c.sock_value = sock ? *sock : legacy.value_or("");
  c.hostns_value = hostns.value_or("");
  c.external_clusterip_value = textValue(*data, "bpf-lb-external-clusterip").value_or("");
  c.kube_proxy_replacement = kpr && (*kpr == "true" || *kpr == "strict");
  // Full kube-proxy replacement turns socket LB on unless it is switched off explicitly.
  if (sock)
    c.socket_lb = isTrue(sock);
  else if (legacy)
    c.socket_lb = isTrue(legacy);
  else
    c.socket_lb = c.kube_proxy_replacement;
  c.host_namespace_only = isTrue(hostns);
  return c;
}

}  // namespace nodegate
