// The agent's HTTP side: a route table (HttpRouter) and a bounded civetweb listener (HttpServer)
// that serves one router. The agent runs two listeners: --listen with /metrics /healthz /readyz,
// and --debug-listen with those plus /api/v1/*, the page and whatever components register.
//
// Extension point for other components (DNS tracer, ...): get the debug router from
// AgentServices (agent/extension.h) and call
//   router.handle("/api/v1/dns/traces", [](const HttpRequest& r) { return HttpResponse::json(...);
//   }); router.handlePrefix("/api/v1/dns/traces/", handler);  // subtree: /api/v1/dns/traces/<id>
// Handlers run on civetweb worker threads, concurrently: they must be thread-safe and quick (read
// cached state; never run a probe). The router answers 404 for unknown paths and 405 (with an
// Allow header) for a known path with a method it was not registered for. HEAD is served by
// every GET route with the body dropped. Routes may be added while the server runs.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded-free raw path without the query: "/api/v1/checks/tun"
  std::string query;   // raw query string without '?', may be empty
  std::string body;    // at most HttpServer::Limits::max_body_bytes
  std::string remote;  // peer address, for logs
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

// A civetweb listener bound to one ADDR:PORT serving one router. Every resource a client can
// hold is bounded: see Limits. Stops (and joins its threads) in the destructor.
class HttpServer {
 public:
  struct Limits {
    std::size_t max_body_bytes = 64 * 1024;    // larger Content-Length: 413 without reading
    std::size_t max_header_bytes = 16 * 1024;  // request line + headers (civetweb: 64 headers max)
    // civetweb serves one connection per thread: a slow client holds a worker until the
    // request timeout. Each worker costs ~21 KiB resident even idle (its stack pages, which
    // Debian's civetweb touches with stack-clash probes, and its connection buffer). Prometheus
    // and the kubelet send their request at once and are served in about a millisecond, so 8
    // workers with a 2 s timeout serve them many times over, and 24 slow clients delay a scrape
    // by three timeouts, 6 s, at most (test/agent/http_robustness_test.py).
    int worker_threads = 8;         // concurrent connections being served
    int queue = 64;                 // accepted connections waiting for a worker
    int request_timeout_ms = 2000;  // slow clients are cut off after this
    bool keep_alive = false;        // one request per connection: no idle holders
  };

  // listen: "ADDR:PORT", "PORT" or "[v6]:PORT". Error when the port cannot be bound.
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

// Parses a query string into key -> value (last one wins; %XX and '+' decoded).
std::map<std::string, std::string> parseQuery(const std::string& query);

// Escapes text for HTML element content and attribute values.
std::string htmlEscape(const std::string& text);

}  // namespace nodegate
