// The process's one connection to the Kubernetes API server. The composition root builds it
// once from --kube/--kubeconfig and hands it to every component that talks to the API (the
// publisher, local-pv's PV reader, the cluster-DNS reader): they share the credentials (loaded
// and rotated once), the flow control (kube.qps/kube.burst is the budget of the whole process)
// and the request counter. Each component thread talks through an ApiClient of its own (one
// HTTP handle each, cancelled by that component's Stopper).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "kube/client_config.h"
#include "kube/credentials.h"
#include "kube/flow_control.h"
#include "kube/http.h"
#include "nodegate/result.h"

namespace nodegate::kube {

using RequestCounter = prometheus::Family<prometheus::Counter>;
// nodegate_kube_requests_total{verb,code}.
RequestCounter& requestCounter(prometheus::Registry& registry);

struct ConnectionSettings {
  double qps = 5;     // kube.qps: requests per second, for the whole process
  double burst = 10;  // kube.burst
  std::chrono::seconds token_max_age{60};
};

class Connection {
 public:
  Connection(ClientConfig client, ConnectionSettings settings, prometheus::Registry& registry);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const ClientConfig& config() const { return creds_.config(); }
  const ConnectionSettings& settings() const { return settings_; }
  Credentials& credentials() { return creds_; }
  RateLimiter& limiter() { return limiter_; }
  RequestCounter& counter() { return counter_; }

 private:
  ConnectionSettings settings_;
  Credentials creds_;
  RateLimiter limiter_;
  RequestCounter& counter_;
};

// Loads the credentials --kube/--kubeconfig select and builds the connection.
Result<std::shared_ptr<Connection>> connect(const std::string& mode, const std::string& kubeconfig,
                                            ConnectionSettings settings,
                                            prometheus::Registry& registry);

// One thread's handle on the connection: takes a token from the shared bucket before every
// request, authenticates, retries once after a 401 with the token file read again, counts.
class ApiClient {
 public:
  ApiClient(Connection& connection, Stopper& stopper) : conn_(connection), stop_(stopper) {}

  // verb is the metric label (get, list, patch, create, watch); path starts with "/".
  HttpResponse request(const std::string& verb, const std::string& method, const std::string& path,
                       const std::string& content_type = {}, const std::string& body = {},
                       double timeout_s = 30);
  // A watch: on_line gets every complete line; returning false ends the stream.
  HttpResponse stream(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                      double timeout_s);

 private:
  HttpResponse perform(const std::string& verb, HttpRequest req);
  Connection& conn_;
  Stopper& stop_;
  HttpTransport http_;
};

}  // namespace nodegate::kube
