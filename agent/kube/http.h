// The one HTTP client of nodegate: a connection-reusing libcurl handle (loaded lazily, see
// kube/curl_lazy.cpp) with bounded bodies, line streaming for watches and cancellation. The
// Kubernetes connection (kube/connection.h) adds credentials, the process's flow control and
// the request counter on top; `nodegate dns trace` uses it as is against the agent's debug port.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodegate::kube {

class Stopper;

struct HttpResponse {
  long code = 0;  // 0: no HTTP response (connection failed, timed out, dropped)
  std::string body;
  std::optional<double> retry_after;
  std::string error;        // transport error text when code == 0
  bool tls_failed = false;  // the server's certificate did not verify
  bool ok() const { return code >= 200 && code < 300; }
};

// For error messages and logs: "HTTP <code>: <the API server's Status message, or the start of the
// body>", or the transport error ("no response" if curl gave none) when no answer came.
std::string describe(const HttpResponse& r);

// Percent-encoding of one path segment or query value (RFC 3986 unreserved characters kept).
std::string urlEncode(std::string_view s);

// A response body larger than this is an error: a Node is a few KiB, a page of PVs a few MiB.
inline constexpr std::size_t kMaxResponseBytes = 8u << 20;

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent with any method but GET
  double timeout_s = 30;
  double connect_timeout_s = 10;
  // TLS: ca_pem empty = the system's CAs (callers that were given a CA never send it empty).
  std::string ca_pem;
  bool insecure = false;
  std::string cert_pem, key_pem;
  // A stream (a watch): every complete line goes here as it arrives; returning false ends it.
  const std::function<bool(std::string_view)>* on_line = nullptr;
  // Polled during the transfer: a stopped one aborts it.
  const Stopper* stopper = nullptr;
};

// One handle; use one per thread. Keeps connections and TLS sessions between requests.
class HttpTransport {
 public:
  HttpTransport();
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // An unusable transport (libcurl could not be loaded) answers every request with code 0 and
  // an error that says so.
  bool usable() const { return curl_ != nullptr; }
  HttpResponse perform(const HttpRequest& req);

 private:
  void* curl_ = nullptr;
};

}  // namespace nodegate::kube
