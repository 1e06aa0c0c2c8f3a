// A small Kubernetes API client over libcurl: where the server is and how to authenticate
// (in-cluster service account or kubeconfig), a client-side rate limit, Retry-After and
// jittered backoff, rotating tokens and CA bundles, and a counter per request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

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
  std::string source;  // "in-cluster" or "kubeconfig <path> context <name>", for logs
};

// In-cluster: $KUBERNETES_SERVICE_HOST/PORT plus the token and CA under sa_dir.
bool inClusterAvailable(const std::string& sa_dir = kServiceAccountDir);
Result<ClientConfig> loadInCluster(const std::string& sa_dir = kServiceAccountDir);
// kubeconfig: the current context's cluster and user; relative paths are relative to the file.
Result<ClientConfig> loadKubeconfig(const std::string& path);
Result<ClientConfig> parseKubeconfig(std::string_view text, const std::string& base_dir);
// The credentials --kube MODE and --kubeconfig FILE select (auto: in-cluster when available,
// else the kubeconfig; kubeconfig mode falls back to $KUBECONFIG). Every API user of the agent
// (publisher, PV discovery) goes through this, so they all talk to the same cluster as the same
// user.
Result<ClientConfig> loadClientConfig(const std::string& mode, const std::string& kubeconfig);

// Percent-encoding of one path segment or query value (RFC 3986 unreserved characters kept).
std::string urlEncode(std::string_view s);

std::string base64Decode(std::string_view in, bool* ok);

// Retry-After is delta-seconds or an HTTP date; returns seconds from `now`, never negative.
std::optional<double> parseRetryAfter(std::string_view value,
                                      std::chrono::system_clock::time_point now);

// Interruptible sleeps: stop() wakes every sleeper at once, so shutdown never waits on a backoff.
class Stopper {
 public:
  // false when stopped (before or during the sleep).
  bool sleepFor(std::chrono::duration<double> d);
  void stop();
  bool stopped() const { return stopped_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopped_{false};
};

// Token bucket: `qps` tokens per second, up to `burst` saved. reserve() takes a token and says
// how long the caller must wait for it (client-go's flowcontrol does the same).
class RateLimiter {
 public:
  RateLimiter(double qps, double burst);
  std::chrono::duration<double> reserve(std::chrono::steady_clock::time_point now);
  bool acquire(Stopper& stopper);

 private:
  std::mutex mu_;
  double qps_, burst_, tokens_;
  std::chrono::steady_clock::time_point last_;
};

// Exponential backoff with full jitter between base and cap; reset() after a success.
class Backoff {
 public:
  Backoff(double base_s, double cap_s, std::uint64_t seed);
  double next();
  void reset() { attempt_ = 0; }

 private:
  double base_, cap_;
  int attempt_ = 0;
  std::mt19937_64 rng_;
};

// Checks that text is a PEM bundle of one or more X.509 certificates (well-formed blocks whose
// base64 decodes to a DER sequence): a half-written or garbage CA file must be refused before
// it replaces a working one. Returns the number of certificates.
Result<int> checkCaBundle(std::string_view pem);

// The credentials of one API server, shared by a publisher's threads. The token file is
// re-read when older than token_max_age or after a 401; the CA file whenever its inode, mtime
// or size changes (checked before every request: one stat). A CA file that does not hold a
// certificate bundle is refused with an error and the last good bundle stays in use, so a
// rotation caught half-way breaks nothing that still works with the old CA.
class Credentials {
 public:
  explicit Credentials(ClientConfig cfg,
                       std::chrono::seconds token_max_age = std::chrono::seconds(60));
  const ClientConfig& config() const { return cfg_; }
  std::string token();
  // The CA bundle to verify the server with ("" = none configured, or none valid yet).
  std::string caPem();
  // Why the CA file's current content is not in use ("" when it is).
  std::string caError();
  void invalidateToken();

 private:
  ClientConfig cfg_;
  std::chrono::seconds token_max_age_;
  std::mutex mu_;
  std::string token_;
  std::chrono::steady_clock::time_point token_read_{};
  bool token_valid_ = false;
  std::string ca_;
  std::string ca_error_;
  long long ca_mtime_ns_ = -1;
  long long ca_size_ = -1;
  unsigned long long ca_ino_ = 0;
};

struct HttpResponse {
  long code = 0;  // 0: no HTTP response (connection failed, timed out, dropped)
  std::string body;
  std::optional<double> retry_after;
  std::string error;  // transport error text when code == 0
  bool ok() const { return code >= 200 && code < 300; }
};

// For error messages and logs: "HTTP <code>: <the API server's Status message, or the start of the
// body>", or the transport error ("no response" if curl gave none) when no answer came.
std::string describe(const HttpResponse& r);

using RequestCounter = prometheus::Family<prometheus::Counter>;
RequestCounter& requestCounter(prometheus::Registry& registry);

// One connection-reusing curl handle; use one per thread.
class HttpClient {
 public:
  HttpClient(Credentials& creds, RateLimiter& limiter, Stopper& stopper, RequestCounter& counter);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // verb is the metric label (get, patch, create, watch); path starts with "/".
  HttpResponse request(const std::string& verb, const std::string& method, const std::string& path,
                       const std::string& content_type = {}, const std::string& body = {},
                       double timeout_s = 30);
  // A watch: on_line gets every complete line; returning false ends the stream.
  HttpResponse stream(const std::string& path, const std::function<bool(std::string_view)>& on_line,
                      double timeout_s);

 private:
  HttpResponse perform(const std::string& verb, const std::string& method, const std::string& path,
                       const std::string& content_type, const std::string& body, double timeout_s,
                       const std::function<bool(std::string_view)>* on_line);
  Credentials& creds_;
  RateLimiter& limiter_;
  Stopper& stopper_;
  RequestCounter& counter_;
  void* curl_ = nullptr;
};

}  // namespace nodegate::kube
