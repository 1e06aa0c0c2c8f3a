#include "publish/http_server.h"

#include <civetweb.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "nodegate/log.h"

namespace nodegate {

HttpResponse HttpResponse::text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::json(int status, std::string body) {
  HttpResponse r = text(status, std::move(body));
  r.content_type = "application/json";
  return r;
}

HttpResponse HttpResponse::html(int status, std::string body) {
  HttpResponse r = text(status, std::move(body));
  r.content_type = "text/html; charset=utf-8";
  return r;
}

void HttpRouter::handle(std::string path, HttpHandler handler, std::set<std::string> methods) {
  std::unique_lock lock(mu_);
  exact_[std::move(path)] = Route{std::move(handler), std::move(methods)};
}

void HttpRouter::handlePrefix(std::string prefix, HttpHandler handler,
                              std::set<std::string> methods) {
  std::unique_lock lock(mu_);
  prefix_[std::move(prefix)] = Route{std::move(handler), std::move(methods)};
}

HttpResponse HttpRouter::call(const Route& route, const HttpRequest& request) const {
  std::string method = request.method == "HEAD" ? "GET" : request.method;
  if (!route.methods.count(method)) {
    std::string allow;
    for (const auto& m : route.methods) allow += (allow.empty() ? "" : ", ") + m;
    if (route.methods.count("GET")) allow += ", HEAD";
    HttpResponse r = HttpResponse::text(405, "method not allowed\n");
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  try {
    return route.handler(request);
  } catch (const std::exception& e) {
    log::error("failed to serve http request", {{"path", request.path}, {"error", e.what()}});
    return HttpResponse::text(500, "internal error\n");
  }
}

HttpResponse HttpRouter::dispatch(const HttpRequest& request) const {
  Route route;
  {
    std::shared_lock lock(mu_);
    auto it = exact_.find(request.path);
    if (it != exact_.end()) {
      route = it->second;
    } else {
      // Longest matching prefix: walk down from the greatest key not above the path.
      const Route* best = nullptr;
      std::size_t best_len = 0;
      for (const auto& [prefix, r] : prefix_) {
        if (request.path.compare(0, prefix.size(), prefix) == 0 && prefix.size() >= best_len) {
          best = &r;
          best_len = prefix.size();
        }
      }
      if (!best) return HttpResponse::text(404, "not found\n");
      route = *best;
    }
  }
  return call(route, request);
}

namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string urlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hexValue(s[i + 1]) >= 0 &&
               hexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(hexValue(s[i + 1]) * 16 + hexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

const char* reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

std::map<std::string, std::string> parseQuery(const std::string& query) {
  std::map<std::string, std::string> out;
  std::size_t pos = 0;
  while (pos <= query.size()) {
    std::size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    std::string_view part(query.data() + pos, amp - pos);
    if (!part.empty()) {
      auto eq = part.find('=');
      if (eq == std::string_view::npos)
        out[urlDecode(part)] = "";
      else
        out[urlDecode(part.substr(0, eq))] = urlDecode(part.substr(eq + 1));
    }
    pos = amp + 1;
  }
  return out;
}

std::string htmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// The host a local client reaches the listener on: wildcard binds are reached via loopback.
std::string wakeHost(const std::string& listen) {
  std::string host;
  if (!listen.empty() && listen[0] == '[') {
    host = listen.substr(1, listen.find(']') - 1);
    if (host == "::") host = "::1";
  } else {
    auto colon = listen.rfind(':');
    host = colon == std::string::npos ? "" : listen.substr(0, colon);
    if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  }
  return host;
}

void connectOnce(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return;
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    (void)::connect(fd, res->ai_addr, res->ai_addrlen);
    ::close(fd);
  }
  ::freeaddrinfo(res);
}

}  // namespace

struct HttpServer::Impl {
  mg_context* ctx = nullptr;
  std::shared_ptr<const HttpRouter> router;
  Limits limits;
  std::string name;
  std::string wake_host;

  static int beginRequest(mg_connection* conn);
  static int logMessage(const mg_connection* conn, const char* message);
  void respond(mg_connection* conn, const HttpRequest& req, const HttpResponse& resp);
};

void HttpServer::Impl::respond(mg_connection* conn, const HttpRequest& req,
                               const HttpResponse& resp) {
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + reasonPhrase(resp.status) +
                     "\r\nContent-Type: " + resp.content_type +
                     "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                     "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  if (!limits.keep_alive) head += "Connection: close\r\n";
  for (const auto& [k, v] : resp.headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  mg_write(conn, head.data(), head.size());
  if (req.method != "HEAD" && !resp.body.empty())
    mg_write(conn, resp.body.data(), resp.body.size());
}

int HttpServer::Impl::beginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* self = static_cast<Impl*>(info->user_data);
  HttpRequest req;
  req.method = info->request_method ? info->request_method : "";
  req.path =
      info->local_uri_raw ? info->local_uri_raw : (info->request_uri ? info->request_uri : "");
  req.query = info->query_string ? info->query_string : "";
  req.remote = info->remote_addr;
  try {
    if (info->content_length > static_cast<long long>(self->limits.max_body_bytes)) {
      self->respond(conn, req, HttpResponse::text(413, "request body too large\n"));
      return 1;
    }
    if (info->content_length > 0) {
      req.body.resize(static_cast<std::size_t>(info->content_length));
      std::size_t got = 0;
      while (got < req.body.size()) {
        int n = mg_read(conn, req.body.data() + got, req.body.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got < req.body.size()) {
        self->respond(conn, req, HttpResponse::text(400, "truncated request body\n"));
        return 1;
      }
    } else if (info->content_length < 0 && req.method != "GET" && req.method != "HEAD") {
      // Chunked or unbounded bodies: read at most the limit, then refuse.
      std::string buf(self->limits.max_body_bytes + 1, '\0');
      std::size_t got = 0;
      while (got < buf.size()) {
        int n = mg_read(conn, buf.data() + got, buf.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got > self->limits.max_body_bytes) {
        self->respond(conn, req, HttpResponse::text(413, "request body too large\n"));
        return 1;
      }
      buf.resize(got);
      req.body = std::move(buf);
    }
    self->respond(conn, req, self->router->dispatch(req));
  } catch (const std::exception& e) {
    log::error("failed to serve http request", {{"listener", self->name}, {"error", e.what()}});
    self->respond(conn, req, HttpResponse::text(500, "internal error\n"));
  }
  return 1;
}

int HttpServer::Impl::logMessage(const mg_connection*, const char* message) {
  log::debug("http server message", {{"message", message ? message : ""}});
  return 1;
}

namespace {
std::once_flag g_civetweb_init;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name) {
  return start(listen, std::move(router), std::move(name), Limits{});
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name, Limits limits) {
  std::call_once(g_civetweb_init, [] { mg_init_library(0); });
  if (listen.empty())
    return Error{EINVAL, "failed to start http server " + name + ": empty address"};
  // Debian's civetweb is built without IPv6; say so instead of civetweb's "invalid port spec".
  if (listen[0] == '[' && !mg_check_feature(8))
    return Error{EAFNOSUPPORT, "failed to listen on " + listen + " (" + name +
                                   "): this civetweb has no IPv6 support; use an IPv4 address"};
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->name_ = name;
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.router = std::move(router);
  impl.limits = limits;
  impl.name = name;
  impl.wake_host = wakeHost(listen);

  // civetweb wants "ADDR:PORT" (or "[v6]:PORT"); a leading ":" means every address.
  std::string ports = listen;
  if (!ports.empty() && ports[0] == ':') ports = "0.0.0.0" + ports;
  std::string threads = std::to_string(limits.worker_threads);
  std::string queue = std::to_string(limits.queue);
  std::string timeout = std::to_string(limits.request_timeout_ms);
  std::string header_bytes = std::to_string(limits.max_header_bytes);
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", threads.c_str(),
                           "connection_queue", queue.c_str(), "listen_backlog", queue.c_str(),
                           "request_timeout_ms", timeout.c_str(), "max_request_size",
                           header_bytes.c_str(), "enable_keep_alive",
                           limits.keep_alive ? "yes" : "no",
                           // Bounds how long a closing connection is drained (a refused 10 MB
                           // upload would otherwise hold a worker until the request timeout).
                           "linger_timeout_ms", "500", nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = &Impl::beginRequest;
  callbacks.log_message = &Impl::logMessage;
  char errtext[256] = {};
  unsigned errcode = 0;
  mg_error_data err{&errcode, errtext, sizeof errtext};
  mg_init_data init{&callbacks, &impl, options};
  impl.ctx = mg_start2(&init, &err);
  if (!impl.ctx)
    return Error{EADDRINUSE, "failed to listen on " + listen + " (" + name +
                                 "): " + (errtext[0] ? errtext : "civetweb refused to start")};
  mg_server_port bound[4] = {};
  int n = mg_get_server_ports(impl.ctx, 4, bound);
  if (n > 0) server->port_ = bound[0].port;
  log::info("http listener started",
            {{"listener", name}, {"address", listen}, {"port", std::to_string(server->port_)}});
  return server;
}

HttpServer::~HttpServer() {
  if (!impl_ || !impl_->ctx) return;
  // civetweb's accept loop polls with a 2 s quantum before it notices mg_stop; a connection to
  // the listener wakes it at once, which keeps agent shutdown well under a second.
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    mg_stop(impl_->ctx);
    done = true;
  });
  for (int i = 0; i < 200 && !done; ++i) {
    connectOnce(impl_->wake_host, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

}  // namespace nodegate
