#include "kube/cluster_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "nodegate/log.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

ApiRead classify(long code) {
  if (code == 404) return ApiRead::NotFound;
  if (code == 403) return ApiRead::Forbidden;
  return code >= 200 && code < 300 ? ApiRead::Ok : ApiRead::Failed;
}

// The text inet_ntop() gives, the form the DNS tracer's events and the links' addresses are
// compared in: a slice may spell an IPv6 address otherwise (upper case, leading zeros). Text that
// is no address stays as it is.
std::string canonicalIp(const std::string& text) {
  unsigned char bin[sizeof(in6_addr)];
  char out[INET6_ADDRSTRLEN] = {};
  for (int family : {AF_INET, AF_INET6})
    if (::inet_pton(family, text.c_str(), bin) == 1 && ::inet_ntop(family, bin, out, sizeof out))
      return out;
  return text;
}

}  // namespace

std::string ciliumConfigPath(const ClusterDnsOptions& o) {
  return "/api/v1/namespaces/" + urlEncode(o.cilium_namespace) + "/configmaps/" +
         urlEncode(o.cilium_configmap);
}

std::string dnsEndpointSlicesPath(const ClusterDnsOptions& o) {
  return "/apis/discovery.k8s.io/v1/namespaces/" + urlEncode(o.dns_namespace) +
         "/endpointslices?labelSelector=" +
         urlEncode("kubernetes.io/service-name=" + o.dns_service);
}

namespace {

// One named ConfigMap: the answer's class, the value `parse` makes of a 200's body, and a detail
// for the log and the evidence. A 404 is a fact worded by `absent`; a refusal gets `forbidden_note`
// (which value grants the read) after the API's words.
template <typename T, typename Parse>
void readConfigMap(const HttpResponse& r, const std::string& what, const std::string& absent,
                   const std::string& forbidden_note, Parse parse, ApiRead& read, T& value,
                   std::string& detail) {
  value = {};
  read = classify(r.code);
  if (read == ApiRead::NotFound) {
    detail = absent;
    return;
  }
  if (read != ApiRead::Ok) {
    detail = "failed to read " + what + ": " + describe(r) +
             (read == ApiRead::Forbidden ? forbidden_note : "");
    return;
  }
  auto parsed = parse(r.body);
  if (!parsed) {
    read = ApiRead::Failed;
    detail = "failed to parse " + what + ": " + parsed.error().message;
    return;
  }
  value = std::move(parsed).value();
  detail = "read from " + what;
}

}  // namespace

void readCiliumConfig(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out) {
  const std::string what = "configmap " + o.cilium_namespace + "/" + o.cilium_configmap;
  readConfigMap(r, what, "no Cilium: " + what + " does not exist", "", parseCiliumConfig,
                out.cilium_read, out.cilium, out.cilium_detail);
}

std::string corefilePath(const ClusterDnsOptions& o) {
  return "/api/v1/namespaces/" + urlEncode(o.dns_namespace) + "/configmaps/" +
         urlEncode(o.corefile_configmap);
}

void readCorefile(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out) {
  const std::string what = "configmap " + o.dns_namespace + "/" + o.corefile_configmap;
  readConfigMap(r, what, "not read: " + what + " does not exist",
                " (chart value rbac.readCoreDNSConfig, or dns-path.coredns_configmap \"\")",
                parseCorefileConfigMap, out.corefile_read, out.corefile, out.corefile_detail);
}

std::string nodeLocalConfigPath(const ClusterDnsOptions& o) {
  return "/api/v1/namespaces/" + urlEncode(o.dns_namespace) + "/configmaps/" +
         urlEncode(o.nodelocal_configmap);
}

void readNodeLocalConfig(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out) {
  const std::string what = "configmap " + o.dns_namespace + "/" + o.nodelocal_configmap;
  CorefileFacts corefile;
  readConfigMap(r, what, "no node-local DNS cache: " + what + " does not exist",
                " (chart value rbac.readNodeLocalDNSConfig, or dns-path.nodelocal_configmap \"\")",
                parseCorefileConfigMap, out.nodelocal_read, corefile, out.nodelocal_detail);
  out.nodelocal_addresses = linkLocalBinds(corefile);
  if (out.nodelocal_read != ApiRead::Ok) return;
  std::string list;
  for (const auto& a : out.nodelocal_addresses) list += (list.empty() ? "" : " ") + a;
  out.nodelocal_detail = (list.empty() ? "no link-local bind address" : "cache on " + list) + " (" +
                         out.nodelocal_detail + ")";
}

std::string dnsServicePath(const ClusterDnsOptions& o) {
  return "/api/v1/namespaces/" + urlEncode(o.dns_namespace) + "/services/" +
         urlEncode(o.dns_service);
}

void readDnsService(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out) {
  const std::string what = "service " + o.dns_namespace + "/" + o.dns_service;
  auto parse = [](const std::string& body) -> Result<std::vector<std::string>> {
    json svc = json::parse(body, nullptr, false);
    if (!svc.is_object() || !svc.contains("spec") || !svc["spec"].is_object())
      return Error{EINVAL, "not a Service"};
    const json& spec = svc["spec"];
    std::vector<std::string> ips;
    auto add = [&](const json& v) {
      if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>() == "None") return;
      std::string ip = canonicalIp(v.get<std::string>());
      if (std::find(ips.begin(), ips.end(), ip) == ips.end()) ips.push_back(ip);
    };
    if (auto it = spec.find("clusterIPs"); it != spec.end() && it->is_array())
      for (const auto& v : *it) add(v);
    if (auto it = spec.find("clusterIP"); it != spec.end()) add(*it);
    return ips;
  };
  readConfigMap(r, what, "not read: " + what + " does not exist",
                " (chart value rbac.readDnsEndpoints)", parse, out.service_read, out.service_ips,
                out.service_detail);
  if (out.service_read == ApiRead::Ok)
    out.service_detail += out.service_ips.empty() ? ": headless, no cluster IP" : "";
}

void readDnsEndpoints(const HttpResponse& r, const ClusterDnsOptions& o, ClusterDnsFacts& out) {
  const std::string what = "endpointslices of service " + o.dns_namespace + "/" + o.dns_service;
  out.dns_endpoints.clear();
  out.endpoints_read = classify(r.code);
  // A list of a Service with no slices is 200 and empty; 404 means the API has no such group.
  if (out.endpoints_read != ApiRead::Ok) {
    out.endpoints_detail = "failed to list " + what + ": " + describe(r);
    return;
  }
  json list = json::parse(r.body, nullptr, false);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    out.endpoints_read = ApiRead::Failed;
    out.endpoints_detail = "failed to list " + what + ": not an EndpointSliceList";
    return;
  }
  for (const auto& slice : list["items"]) {
    if (!slice.is_object() || !slice.contains("endpoints") || !slice["endpoints"].is_array())
      continue;
    for (const auto& ep : slice["endpoints"]) {
      if (!ep.is_object() || !ep.contains("addresses") || !ep["addresses"].is_array()) continue;
      // conditions.ready unset means ready (the API's documented default).
      bool ready = true;
      if (auto c = ep.find("conditions"); c != ep.end() && c->is_object())
        if (auto rd = c->find("ready"); rd != c->end() && rd->is_boolean()) ready = rd->get<bool>();
      std::string node = ep.value("nodeName", "");
      for (const auto& a : ep["addresses"])
        if (a.is_string())
          out.dns_endpoints.push_back({canonicalIp(a.get<std::string>()), node, ready});
    }
  }
  out.endpoints_detail = std::to_string(out.dns_endpoints.size()) + " addresses in " + what;
}

ClusterDnsFacts fetchClusterDns(ApiClient& api, const ClusterDnsOptions& o) {
  ClusterDnsFacts f;
  readCiliumConfig(api.request("get", "GET", ciliumConfigPath(o)), o, f);
  readDnsEndpoints(api.request("list", "GET", dnsEndpointSlicesPath(o)), o, f);
  if (!o.corefile_configmap.empty()) readCorefile(api.request("get", "GET", corefilePath(o)), o, f);
  if (!o.nodelocal_configmap.empty())
    readNodeLocalConfig(api.request("get", "GET", nodeLocalConfigPath(o)), o, f);
  readDnsService(api.request("get", "GET", dnsServicePath(o)), o, f);
  f.updated = std::chrono::system_clock::now();
  return f;
}

ClusterDnsSource::ClusterDnsSource(std::shared_ptr<Connection> connection,
                                   ClusterDnsOptions options,
                                   std::shared_ptr<ClusterDnsBoard> board)
    : conn_(std::move(connection)),
      o_(std::move(options)),
      board_(std::move(board)),
      api_(*conn_, stop_) {
  thread_ = std::thread([this] { loop(); });
}

ClusterDnsSource::~ClusterDnsSource() {
  stop_.stop();
  if (thread_.joinable()) thread_.join();
}

// Reads every o_.refresh plus or minus 10%, so a fleet does not read in step.
void ClusterDnsSource::loop() {
  std::mt19937_64 rng(o_.seed ? o_.seed : std::random_device{}());
  const double delay =
      std::uniform_real_distribution<double>(0, std::max(0.0, o_.startup_jitter_s))(rng);
  if (!stop_.sleepFor(std::chrono::duration<double>(delay))) return;
  std::optional<ClusterDnsFacts> last;
  while (!stop_.stopped()) {
    ClusterDnsFacts f = fetchClusterDns(api_, o_);
    if (stop_.stopped()) return;
    const bool changed =
        !last || last->cilium_detail != f.cilium_detail ||
        last->endpoints_detail != f.endpoints_detail ||
        last->corefile_detail != f.corefile_detail || last->service_detail != f.service_detail ||
        last->nodelocal_detail != f.nodelocal_detail || last->service_ips != f.service_ips ||
        last->nodelocal_addresses != f.nodelocal_addresses;
    if (changed) {
      auto level = f.cilium_read == ApiRead::Forbidden || f.cilium_read == ApiRead::Failed ||
                           f.endpoints_read != ApiRead::Ok
                       ? log::Level::Warn
                       : log::Level::Info;
      log::write(level, "cluster dns facts",
                 {{"cilium", f.cilium_detail},
                  {"coredns", f.endpoints_detail},
                  {"corefile", f.corefile_detail},
                  {"service", f.service_detail},
                  {"node_local_dns", f.nodelocal_detail}});
    }
    board_->publish(f);
    if (changed) board_->changed();
    last = std::move(f);
    double period = static_cast<double>(std::max<long long>(1, o_.refresh.count())) *
                    std::uniform_real_distribution<double>(0.9, 1.1)(rng);
    if (!stop_.sleepFor(std::chrono::duration<double>(period))) return;
  }
}

}  // namespace nodegate::kube
