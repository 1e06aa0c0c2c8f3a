#include "publish/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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

std::string decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+' && plus_is_space) {
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
    case 403:
      return "Forbidden";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 421:
      return "Misdirected Request";
    case 431:
      return "Request Header Fields Too Large";
    case 505:
      return "HTTP Version Not Supported";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string urlDecode(std::string_view s) {
  return decode(s, true);
}

}  // namespace

std::string percentDecode(std::string_view s) {
  return decode(s, false);
}

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

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string host;  // the numeric address as given ("0.0.0.0" for an empty one)
};

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Result<Endpoint> parseListen(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return Error{EINVAL, "failed to parse listen address \"" + listen + "\": " + why};
  };
  std::string host, port;
  if (!listen.empty() && listen[0] == '[') {
    auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':')
      return bad("want [IPv6]:PORT");
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else if (auto colon = listen.rfind(':'); colon != std::string::npos) {
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("an IPv6 address goes in brackets");
  } else {
    port = listen;
  }
  if (!allDigits(port) || port.size() > 5 || std::stoul(port) > 65535)
    return bad("the port must be a number from 0 to 65535");
  Endpoint ep;
  const auto p = static_cast<std::uint16_t>(std::stoul(port));
  ep.host = host.empty() ? "0.0.0.0" : host;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ep.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ep.addr);
  if (::inet_pton(AF_INET, ep.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(p);
    ep.len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, ep.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(p);
    ep.len = sizeof(sockaddr_in6);
  } else {
    return bad("\"" + ep.host + "\" is not a numeric IPv4 or [IPv6] address");
  }
  return ep;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

bool isLoopbackHost(std::string_view host, std::string_view bound_address) {
  std::string name;
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || !allDigits(rest.substr(1)))) return false;
    name = std::string(host.substr(1, close - 1));
  } else {
    auto colon = host.rfind(':');
    if (colon != std::string_view::npos) {
      if (!allDigits(host.substr(colon + 1))) return false;
      host = host.substr(0, colon);
    }
    name = std::string(host);
  }
  for (auto& c : name) c = lower(c);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name == "localhost") return true;
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, name.c_str(), &a4) == 1) {
    if ((ntohl(a4.s_addr) >> 24) == 127) return true;
  } else if (::inet_pton(AF_INET6, name.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
  } else {
    return false;  // a name other than localhost: what DNS rebinding would send
  }
  // The listener's own specific address (a user who binds the debug port elsewhere reaches it
  // by that address). A wildcard bind is no address of its own.
  std::string bound(bound_address);
  in_addr b4{};
  in6_addr b6{};
  if (::inet_pton(AF_INET, bound.c_str(), &b4) == 1)
    return b4.s_addr != INADDR_ANY && ::inet_pton(AF_INET, name.c_str(), &a4) == 1 &&
           a4.s_addr == b4.s_addr;
  if (::inet_pton(AF_INET6, bound.c_str(), &b6) == 1)
    return !IN6_IS_ADDR_UNSPECIFIED(&b6) && ::inet_pton(AF_INET6, name.c_str(), &a6) == 1 &&
           std::memcmp(&a6, &b6, sizeof a6) == 0;
  return false;
}

namespace {

// civetweb's accept loop polls with a 2 s quantum before it notices mg_stop; one connection to
// the listener wakes it at once, which keeps agent shutdown well under a second.
void connectOnce(const Endpoint& ep, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr = reinterpret_cast<const sockaddr_in*>(&ep.addr)->sin_addr;
  if (a.sin_addr.s_addr == htonl(INADDR_ANY)) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  ::close(fd);
}

constexpr char kRebindRefusal[] =
    "this listener answers only requests addressed to localhost or a loopback address (DNS "
    "rebinding protection); connect through 127.0.0.1, e.g. with kubectl port-forward\n";

}  // namespace

struct HttpServer::Impl {
  mg_context* ctx = nullptr;
  std::shared_ptr<const HttpRouter> router;
  Limits limits;
  std::string name;
  Endpoint endpoint;

  static int beginRequest(mg_connection* conn);
  static int logMessage(const mg_connection* conn, const char* message);
  HttpResponse serve(mg_connection* conn, HttpRequest& req, long long content_length);
};

namespace {

void respond(mg_connection* conn, const HttpRequest& req, const HttpResponse& resp) {
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + reasonPhrase(resp.status) +
                     "\r\nContent-Type: " + resp.content_type +
                     "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                     "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                     "\r\nConnection: close\r\n";
  for (const auto& [k, v] : resp.headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  mg_write(conn, head.data(), head.size());
  if (req.method != "HEAD" && !resp.body.empty())
    mg_write(conn, resp.body.data(), resp.body.size());
}

}  // namespace

// Reads the body (bounded) and answers from the router, or the status that refuses the request.
HttpResponse HttpServer::Impl::serve(mg_connection* conn, HttpRequest& req,
                                     long long content_length) {
  if (limits.loopback_host_only && !req.host.empty() && !isLoopbackHost(req.host, endpoint.host))
    return HttpResponse::text(421, kRebindRefusal);
  if (content_length > static_cast<long long>(limits.max_body_bytes))
    return HttpResponse::text(413, "request body too large\n");
  // civetweb reports a chunked body as length -1: no route takes a streamed body.
  if (content_length < 0 && mg_get_header(conn, "Transfer-Encoding"))
    return HttpResponse::text(411, "a request body needs a Content-Length\n");
  if (content_length > 0) {
    req.body.resize(static_cast<std::size_t>(content_length));
    std::size_t got = 0;
    while (got < req.body.size()) {
      int n = mg_read(conn, req.body.data() + got, req.body.size() - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    if (got < req.body.size()) return HttpResponse::text(400, "truncated request body\n");
  }
  return router->dispatch(req);
}

int HttpServer::Impl::beginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* self = static_cast<Impl*>(info->user_data);
  HttpRequest req;
  req.method = info->request_method ? info->request_method : "";
  // The raw path: routes compare it undecoded, and a handler that takes a name from it decodes
  // and compares it whole ("cpu-virt%00" is no check).
  req.path = info->local_uri_raw ? info->local_uri_raw : "";
  req.query = info->query_string ? info->query_string : "";
  req.remote = info->remote_addr;
  const char* host = mg_get_header(conn, "Host");
  req.host = host ? host : "";
  HttpResponse resp;
  try {
    resp = self->serve(conn, req, info->content_length);
  } catch (const std::exception& e) {
    log::error("failed to serve http request", {{"listener", self->name}, {"error", e.what()}});
    resp = HttpResponse::text(500, "internal error\n");
  }
  respond(conn, req, resp);
  return 1;  // answered: civetweb serves nothing itself (no document root)
}

int HttpServer::Impl::logMessage(const mg_connection*, const char* message) {
  log::debug("http server message", {{"message", message ? message : ""}});
  return 1;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name) {
  return start(listen, std::move(router), std::move(name), Limits{});
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name, Limits limits) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  auto ep = parseListen(listen);
  if (!ep) return Error{ep.error().code, ep.error().message + " (" + name + ")"};
  // mg_check_feature(8): IPv6. Debian builds civetweb without it; say so instead of civetweb's
  // "invalid port spec".
  if (ep->addr.ss_family == AF_INET6 && !mg_check_feature(8))
    return Error{EAFNOSUPPORT, "failed to listen on " + listen + " (" + name +
                                   "): this civetweb has no IPv6 support; use an IPv4 address"};
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->name_ = name;
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.router = std::move(router);
  impl.limits = limits;
  impl.name = name;
  impl.endpoint = *ep;

  const std::string ports =
      ep->host + ":" +
      std::to_string(ntohs(reinterpret_cast<const sockaddr_in*>(&ep->addr)->sin_port));
  const std::string threads = std::to_string(limits.worker_threads),
                    queue = std::to_string(limits.queue), backlog = std::to_string(limits.backlog),
                    timeout = std::to_string(limits.request_timeout_ms),
                    header_bytes = std::to_string(limits.max_header_bytes);
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", threads.c_str(),
                           "connection_queue", queue.c_str(), "listen_backlog", backlog.c_str(),
                           "request_timeout_ms", timeout.c_str(), "max_request_size",
                           header_bytes.c_str(),
                           // The path as sent: civetweb would otherwise decode it in place, and
                           // "cpu-virt%00" would reach the router as "cpu-virt".
                           "decode_url", "no",
                           // One request per connection: no idle connection holds a worker.
                           "enable_keep_alive", "no",
                           // Bounds how long a closing connection is drained (a refused 10 MB
                           // upload would otherwise hold its worker until the request timeout).
                           "linger_timeout_ms", "500", nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = &Impl::beginRequest;
  callbacks.log_message = &Impl::logMessage;
  char errtext[256] = {};
  unsigned errcode = 0;
  mg_error_data err{&errcode, errtext, sizeof errtext};
  mg_init_data init_data{&callbacks, &impl, options};
  impl.ctx = mg_start2(&init_data, &err);
  if (!impl.ctx)
    return Error{EADDRINUSE, "failed to listen on " + listen + " (" + name +
                                 "): " + (errtext[0] ? errtext : "civetweb refused to start")};
  mg_server_port bound[2] = {};
  if (mg_get_server_ports(impl.ctx, 2, bound) > 0) server->port_ = bound[0].port;
  log::info("http listener started", {{"listener", name},
                                      {"address", listen},
                                      {"port", std::to_string(server->port_)},
                                      {"workers", threads}});
  return server;
}

HttpServer::~HttpServer() {
  if (!impl_ || !impl_->ctx) return;
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    mg_stop(impl_->ctx);
    done = true;
  });
  for (int i = 0; i < 200 && !done; ++i) {
    connectOnce(impl_->endpoint, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

}  // namespace nodegate
