// The agent's HTTP side: a route table (HttpRouter) and a bounded listener (HttpServer) that
// serves one router. The agent runs up to three listeners (publish/routes.h): --listen with
// /metrics /healthz /readyz, --health-listen with /healthz /readyz for the kubelet, and
// --debug-listen with all of those plus /api/v1/*, the page and whatever components register.
//
// Extension point for other components (DNS tracer, ...): get the debug router from
// AgentServices (agent/extension.h) and call
//   router.handle("/api/v1/dns/traces", [](const HttpRequest& r) { return HttpResponse::json(...);
//   }); router.handlePrefix("/api/v1/dns/traces/", handler);  // subtree: /api/v1/dns/traces/<id>
// Handlers run on the listeners' civetweb worker threads (several at once): they must be
// thread-safe and quick (read cached state; never run a probe): a slow handler holds a worker. The
// router answers 404 for unknown paths and 405 (with an Allow header) for a known path with a
// method it was not registered for. HEAD is served by every GET route with the body dropped. Routes
// may be added while the server runs.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the raw path without the query, not decoded: "/api/v1/checks/tun"
  std::string query;   // raw query string without '?', may be empty
  std::string body;    // at most HttpServer::Limits::max_body_bytes
  std::string remote;  // peer address, for logs
  std::string host;    // the Host header ("" when absent)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers

  static HttpResponse text(int status, std::string body);
  static HttpResponse json(int status, std::string body);
  static HttpResponse html(int status, std::string body);
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Route table; independent of the socket so handlers are unit-tested without a listener.
class HttpRouter {
 public:
  // Exact path. methods defaults to GET (HEAD implied).
  void handle(std::string path, HttpHandler handler, std::set<std::string> methods = {"GET"});
  // Every path starting with prefix (which should end in '/'); the longest prefix wins, an exact
  // route beats any prefix.
  void handlePrefix(std::string prefix, HttpHandler handler,
                    std::set<std::string> methods = {"GET"});
  HttpResponse dispatch(const HttpRequest& request) const;

 private:
  struct Route {
    HttpHandler handler;
    std::set<std::string> methods;
  };
  HttpResponse call(const Route& route, const HttpRequest& request) const;
  mutable std::shared_mutex mu_;
  std::map<std::string, Route> exact_;
  std::map<std::string, Route> prefix_;
};

// A civetweb listener (Debian's libcivetweb, the server prometheus-cpp's pull side is built on)
// bound to one ADDR:PORT serving one router. civetweb serves a connection on one worker thread
// from its first byte to its close, so a client that is slow to send its request holds a worker
// until request_timeout_ms: worker_threads such clients delay every other client of this
// listener. Whatever must answer while strangers misbehave gets a listener of its own that they
// cannot reach (the agent's /healthz and /readyz on a loopback --health-listen, publish/routes.h).
// Every resource a client can hold is bounded by Limits. Stops (and joins its threads) in the
// destructor.
class HttpServer {
 public:
  struct Limits {
    std::size_t max_body_bytes = 64 * 1024;    // larger Content-Length: 413 without reading
    std::size_t max_header_bytes = 16 * 1024;  // request line + headers (civetweb: 64 headers)
    int worker_threads = 4;                    // connections served at once (one thread each)
    int queue = 32;                            // accepted connections waiting for a worker
    int backlog = 128;                         // connections the kernel holds before accept
    int request_timeout_ms = 2000;             // first byte -> whole request, else closed
    // The debug listener: refuse a Host header that is not a loopback name or address (or the
    // listener's own address) with 421, so a web page cannot read it through DNS rebinding.
    bool loopback_host_only = false;
  };

  // listen: "ADDR:PORT", "PORT", ":PORT" with a numeric IPv4 address. Error when the address is
  // invalid, is IPv6 (Debian builds civetweb without IPv6), or the port cannot be bound.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen,
                                                   std::shared_ptr<const HttpRouter> router,
                                                   std::string name);
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen,
                                                   std::shared_ptr<const HttpRouter> router,
                                                   std::string name, Limits limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }  // the bound port (useful with port 0)
  const std::string& name() const { return name_; }

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string name_;
};

// Whether a Host header value names this machine's loopback ("localhost", 127.0.0.0/8, [::1],
// with or without a port) or, when bound_address is a specific address, that address.
bool isLoopbackHost(std::string_view host, std::string_view bound_address);

// %XX decoded ('+' stays '+': this is for paths, not forms); malformed escapes stay as they are.
std::string percentDecode(std::string_view s);

// Parses a query string into key -> value (last one wins; %XX and '+' decoded).
std::map<std::string, std::string> parseQuery(const std::string& query);

// Escapes text for HTML element content and attribute values.
std::string htmlEscape(const std::string& text);

}  // namespace nodegate
