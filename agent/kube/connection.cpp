#include "kube/connection.h"

namespace nodegate::kube {

RequestCounter& requestCounter(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("nodegate_kube_requests_total")
      .Help(
          "Requests sent to the Kubernetes API server, by verb and HTTP status code "
          "(code=\"error\" when no response arrived).")
      .Register(registry);
}

Connection::Connection(ClientConfig client, ConnectionSettings settings,
                       prometheus::Registry& registry)
    : settings_(settings),
      creds_(std::move(client), settings.token_max_age),
      limiter_(settings.qps, settings.burst),
      counter_(requestCounter(registry)) {}

Result<std::shared_ptr<Connection>> connect(const std::string& mode, const std::string& kubeconfig,
                                            ConnectionSettings settings,
                                            prometheus::Registry& registry) {
  auto client = loadClientConfig(mode, kubeconfig);
  if (!client) return client.error();
  return std::make_shared<Connection>(std::move(client).value(), settings, registry);
}

HttpResponse ApiClient::request(const std::string& verb, const std::string& method,
                                const std::string& path, const std::string& content_type,
                                const std::string& body, double timeout_s) {
  HttpRequest req;
  req.method = method;
  req.url = path;
  if (!content_type.empty()) req.headers.push_back("Content-Type: " + content_type);
  req.body = body;
  req.timeout_s = timeout_s;
  auto r = perform(verb, req);
  // Bound service-account tokens rotate: a 401 means "read the file again", once.
  if (r.code == 401 && !conn_.config().token_file.empty()) {
    conn_.credentials().invalidateToken();
    r = perform(verb, req);
  }
  return r;
}

HttpResponse ApiClient::stream(const std::string& path,
                               const std::function<bool(std::string_view)>& on_line,
                               double timeout_s) {
  HttpRequest req;
  req.url = path;
  req.timeout_s = timeout_s;
  req.on_line = &on_line;
  auto r = perform("watch", req);
  if (r.code == 401 && !conn_.config().token_file.empty()) {
    conn_.credentials().invalidateToken();
    r = perform("watch", req);
  }
  return r;
}

// req.url holds the API path; the server, credentials and TLS settings are added here.
HttpResponse ApiClient::perform(const std::string& verb, HttpRequest req) {
  auto count = [&](const HttpResponse& r) {
    conn_.counter()
        .Add({{"verb", verb}, {"code", r.code ? std::to_string(r.code) : "error"}})
        .Increment();
  };
  if (!conn_.limiter().acquire(stop_)) {
    HttpResponse out;
    out.error = "stopping";
    return out;
  }
  Credentials& creds = conn_.credentials();
  const ClientConfig& cfg = creds.config();
  req.url = cfg.server + req.url;
  req.headers.push_back("Accept: application/json");
  if (std::string token = creds.token(); !token.empty())
    req.headers.push_back("Authorization: Bearer " + token);
  req.ca_pem = creds.caPem();
  if (req.ca_pem.empty() && !cfg.ca_file.empty() && !cfg.insecure) {
    // Never fall back to the system's CAs for a cluster that named its own.
    HttpResponse out;
    out.error = creds.caError();
    count(out);
    return out;
  }
  req.insecure = cfg.insecure;
  req.cert_pem = cfg.cert_pem;
  req.key_pem = cfg.key_pem;
  req.stopper = &stop_;
  HttpResponse out = http_.perform(req);
  // A server certificate from a new CA while the CA file on disk is refused: say both.
  if (out.tls_failed)
    if (auto why = creds.caError(); !why.empty()) out.error += " (" + why + ")";
  count(out);
  return out;
}

}  // namespace nodegate::kube
