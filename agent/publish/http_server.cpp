#include "publish/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

using Clock = std::chrono::steady_clock;

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

std::string peerName(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  else if (ss.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  return buf;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool isTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// Whether the bytes so far can still begin "METHOD /target HTTP/1.x": garbage (a TLS hello,
// random bytes) is refused at its first byte instead of after the request timeout.
bool plausibleRequestLine(std::string_view in) {
  std::size_t i = 0, n = std::min(in.size(), in.find('\n'));
  while (i < n && in[i] >= 'A' && in[i] <= 'Z') ++i;
  if (i > 20 || (i < n && (i == 0 || in[i] != ' '))) return false;
  if (i >= n) return true;
  std::size_t j = i + 1;
  if (j < n && in[j] != '/') return false;
  while (j < n && in[j] > 0x20 && in[j] < 0x7f) ++j;
  if (j >= n) return true;
  if (in[j] != ' ') return false;
  std::string_view version = in.substr(j + 1, n - j - 1);
  if (!version.empty() && version.back() == '\r') version.remove_suffix(1);
  std::string_view want = "HTTP/";
  return version.substr(0, want.size()) == want.substr(0, std::min(version.size(), want.size()));
}

// Offset just past the blank line that ends the head, 0 while it has not arrived. A bare LF
// ends lines too (RFC 9112 §2.2 lets a server accept it).
std::size_t headEnd(const std::string& in) {
  for (std::size_t pos = in.find('\n'); pos != std::string::npos; pos = in.find('\n', pos + 1)) {
    std::size_t next = pos + 1;
    if (next < in.size() && in[next] == '\r') ++next;
    if (next < in.size() && in[next] == '\n') return next + 1;
  }
  return 0;
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

struct HttpServer::Impl {
  enum class Phase { Reading, Writing, Draining };
  struct Conn {
    int fd = -1;
    std::string peer;
    Clock::time_point accepted, deadline;
    Phase phase = Phase::Reading;
    std::string in;
    std::size_t head_end = 0;  // 0 until the head has arrived and parsed
    std::size_t body_len = 0;
    bool expect_continue = false;
    bool ready = false;   // a complete request waits to be dispatched
    bool linger = false;  // read what the client still sends after the response, then close
    HttpRequest req;
    std::string out;
    std::size_t out_off = 0;
  };

  std::shared_ptr<const HttpRouter> router;
  Limits limits;
  std::string name;
  std::string bound_host;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1, reserve_fd = -1;
  std::map<int, Conn> conns;
  std::map<std::string, std::size_t> per_peer;
  std::thread thread;

  ~Impl() {
    for (auto& [fd, c] : conns) ::close(fd);
    for (int fd : {listen_fd, epoll_fd, wake_fd, reserve_fd})
      if (fd >= 0) ::close(fd);
  }

  void loop();
  void acceptSome(Clock::time_point now);
  bool evictOldest(const std::string* peer, Clock::time_point now);
  void closeConn(int fd);
  void onReadable(int fd, Clock::time_point now);
  void progress(Conn& c, Clock::time_point now);
  int parseHead(Conn& c);
  void dispatchReady(Clock::time_point now);
  void respond(Conn& c, const HttpResponse& resp, Clock::time_point now);
  void fail(Conn& c, int status, const std::string& message, Clock::time_point now);
  void flush(int fd, Clock::time_point now);
  void expire(Clock::time_point now);
  void watch(int fd, std::uint32_t events, int op = EPOLL_CTL_MOD) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, op, fd, &ev);
  }
};

void HttpServer::Impl::closeConn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  if (auto p = per_peer.find(it->second.peer); p != per_peer.end() && --p->second == 0)
    per_peer.erase(p);
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns.erase(it);
}

// Makes room for a new connection: closes the connection that has been sending its request
// longest (of one peer, or of anyone), if it is older than a kubelet's request takes to arrive.
bool HttpServer::Impl::evictOldest(const std::string* peer, Clock::time_point now) {
  const Conn* oldest = nullptr;
  for (const auto& [fd, c] : conns) {
    if (c.phase != Phase::Reading || c.ready || (peer && c.peer != *peer)) continue;
    if (!oldest || c.accepted < oldest->accepted) oldest = &c;
  }
  if (!oldest || now - oldest->accepted < std::chrono::milliseconds(100)) return false;
  log::debug(
      "http connection evicted",
      {{"listener", name}, {"peer", oldest->peer}, {"bytes", std::to_string(oldest->in.size())}});
  closeConn(oldest->fd);
  return true;
}

void HttpServer::Impl::acceptSome(Clock::time_point now) {
  // A few per turn, so that the requests of the connections just accepted are read and answered
  // between batches: a burst waits in the kernel's backlog, not in our tables.
  for (int n = 0; n < 16; ++n) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd =
        ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && reserve_fd >= 0) {
        // Out of descriptors: accept with the reserve and close at once, so the listening
        // socket does not stay readable (a busy loop) while the process is at its limit.
        ::close(reserve_fd);
        int dropped = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (dropped >= 0) ::close(dropped);
        reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        log::warn("failed to accept http connection: out of file descriptors",
                  {{"listener", name}, {"open", std::to_string(conns.size())}});
      }
      return;
    }
    std::string peer = peerName(ss);
    const bool peer_full = per_peer[peer] >= limits.max_per_client;
    if ((peer_full && !evictOldest(&peer, now)) ||
        (conns.size() >= limits.max_connections && !evictOldest(nullptr, now))) {
      if (per_peer[peer] == 0) per_peer.erase(peer);
      ::close(fd);
      continue;
    }
    Conn& c = conns[fd];
    c.fd = fd;
    c.peer = peer;
    c.accepted = now;
    c.deadline = now + std::chrono::milliseconds(limits.request_timeout_ms);
    c.req.remote = peer;
    ++per_peer[peer];
    watch(fd, EPOLLIN, EPOLL_CTL_ADD);
  }
}

void HttpServer::Impl::onReadable(int fd, Clock::time_point now) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  Conn& c = it->second;
  bool eof = false;
  char buf[16 * 1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // end of stream or a reset: nothing more will come
      eof = true;
      break;
    }
    if (c.phase != Phase::Reading || c.ready) {
      c.linger = c.linger || c.phase == Phase::Reading;  // more than one request: discarded
      continue;
    }
    // Never hold more than one request: the head limit, then the head plus its body.
    const std::size_t cap = c.head_end ? c.head_end + c.body_len : limits.max_header_bytes + 1;
    const std::size_t take = std::min<std::size_t>(static_cast<std::size_t>(n), cap - c.in.size());
    c.in.append(buf, take);
    if (take < static_cast<std::size_t>(n)) c.linger = true;
    if (c.in.size() >= cap) break;  // let progress() decide before reading on
  }
  if (c.phase == Phase::Reading && !c.ready) progress(c, now);  // may close the connection
  it = conns.find(fd);
  if (it == conns.end() || !eof) return;
  // A client may half-close after sending its request (it is still answered); one that left
  // before finishing its request, or while we drain, is closed.
  if (it->second.phase == Phase::Draining ||
      (it->second.phase == Phase::Reading && !it->second.ready))
    closeConn(fd);
}

void HttpServer::Impl::progress(Conn& c, Clock::time_point now) {
  if (c.head_end == 0) {
    if (!plausibleRequestLine(c.in)) return fail(c, 400, "bad request line\n", now);
    std::size_t end = headEnd(c.in);
    if (end == 0 || end > limits.max_header_bytes + 1) {
      if (c.in.size() > limits.max_header_bytes)
        fail(c, 431,
             "request head larger than " + std::to_string(limits.max_header_bytes) + " bytes\n",
             now);
      return;
    }
    c.head_end = end;
    if (int status = parseHead(c)) {
      return fail(c, status,
                  status == 413   ? "request body too large\n"
                  : status == 431 ? "too many request headers\n"
                  : status == 411 ? "a request body needs a Content-Length\n"
                  : status == 505 ? "only HTTP/1.0 and HTTP/1.1\n"
                                  : "bad request\n",
                  now);
    }
    if (c.expect_continue && c.body_len > 0 && c.in.size() == c.head_end) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  if (c.in.size() > c.head_end + c.body_len) {  // pipelined bytes: not served, drained at close
    c.in.resize(c.head_end + c.body_len);
    c.linger = true;
  }
  if (c.in.size() == c.head_end + c.body_len) {
    c.req.body = c.in.substr(c.head_end, c.body_len);
    c.ready = true;
  }
}

// Parses the request line and headers of c.in[0, head_end). Returns 0, or the status to refuse.
int HttpServer::Impl::parseHead(Conn& c) {
  std::string_view head(c.in.data(), c.head_end);
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    auto nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
  }
  if (lines.empty()) return 400;
  if (lines.size() - 1 > limits.max_headers) return 431;
  std::string_view rl = lines[0];
  auto sp1 = rl.find(' '), sp2 = rl.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return 400;
  std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = rl.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return version.substr(0, 5) == "HTTP/" ? 505 : 400;
  if (target.empty() || target[0] != '/' ||
      !std::all_of(target.begin(), target.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; }))
    return 400;
  c.req.method = std::string(method);
  auto q = target.find('?');
  c.req.path = std::string(target.substr(0, q));
  c.req.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));

  bool have_length = false, have_host = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    auto colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return 400;
    std::string_view key = line.substr(0, colon), value = trim(line.substr(colon + 1));
    if (!std::all_of(key.begin(), key.end(), isTokenChar)) return 400;  // also obs-fold
    if (iequals(key, "host")) {
      if (have_host) return 400;
      have_host = true;
      c.req.host = std::string(value);
    } else if (iequals(key, "content-length")) {
      if (!allDigits(value) || value.size() > 15) return 400;
      std::size_t len = std::stoull(std::string(value));
      if (have_length && len != c.body_len) return 400;
      have_length = true;
      c.body_len = len;
    } else if (iequals(key, "transfer-encoding")) {
      return 411;  // no route takes a streamed body
    } else if (iequals(key, "expect")) {
      c.expect_continue = iequals(value, "100-continue");
    }
  }
  if (c.body_len > limits.max_body_bytes) return 413;
  return 0;
}

void HttpServer::Impl::fail(Conn& c, int status, const std::string& message,
                            Clock::time_point now) {
  // The client may still be sending what we refused: unread bytes at close() would make the
  // kernel send a reset, which can destroy the response before the client reads it.
  c.linger = true;
  respond(c, HttpResponse::text(status, message), now);
}

void HttpServer::Impl::respond(Conn& c, const HttpResponse& resp, Clock::time_point now) {
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + reasonPhrase(resp.status) +
                     "\r\nContent-Type: " + resp.content_type +
                     "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                     "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                     "\r\nConnection: close\r\n";
  for (const auto& [k, v] : resp.headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  c.out = std::move(head);
  if (c.req.method != "HEAD") c.out += resp.body;
  c.out_off = 0;
  c.ready = false;
  c.phase = Phase::Writing;
  c.deadline = now + std::chrono::milliseconds(limits.write_timeout_ms);
  flush(c.fd, now);
}

void HttpServer::Impl::flush(int fd, Clock::time_point now) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  Conn& c = it->second;
  while (c.out_off < c.out.size()) {
    ssize_t n =
        ::send(fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch(fd, EPOLLOUT);
      return;
    }
    return closeConn(fd);
  }
  if (!c.linger) return closeConn(fd);
  ::shutdown(fd, SHUT_WR);
  c.phase = Phase::Draining;
  c.deadline = now + std::chrono::milliseconds(limits.linger_ms);
  watch(fd, EPOLLIN);
}

void HttpServer::Impl::dispatchReady(Clock::time_point now) {
  std::vector<int> ready;
  for (const auto& [fd, c] : conns)
    if (c.ready) ready.push_back(fd);
  // Health first: a probe that became ready with others must not wait behind a scrape.
  std::stable_partition(ready.begin(), ready.end(), [&](int fd) {
    const auto& p = limits.priority_paths;
    return std::find(p.begin(), p.end(), conns[fd].req.path) != p.end();
  });
  for (int fd : ready) {
    auto it = conns.find(fd);
    if (it == conns.end()) continue;
    Conn& c = it->second;
    HttpResponse resp;
    if (limits.loopback_host_only && !c.req.host.empty() &&
        !isLoopbackHost(c.req.host, bound_host)) {
      resp = HttpResponse::text(421,
                                "this listener answers only requests addressed to localhost or a "
                                "loopback address (DNS rebinding protection); connect through "
                                "127.0.0.1, e.g. with kubectl port-forward\n");
    } else {
      try {
        resp = router->dispatch(c.req);
      } catch (const std::exception& e) {
        log::error("failed to serve http request", {{"listener", name}, {"error", e.what()}});
        resp = HttpResponse::text(500, "internal error\n");
      }
    }
    respond(c, resp, now);
  }
}

void HttpServer::Impl::expire(Clock::time_point now) {
  std::vector<int> late;
  for (const auto& [fd, c] : conns)
    if (c.deadline <= now) late.push_back(fd);
  for (int fd : late) {
    Conn& c = conns[fd];
    if (c.phase == Phase::Reading && !c.in.empty()) {
      // Best effort: one non-blocking write of a 408, then the connection is closed.
      static constexpr char k408[] =
          "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)::send(fd, k408, sizeof k408 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    closeConn(fd);
  }
}

void HttpServer::Impl::loop() {
  epoll_event events[64];
  for (;;) {
    auto now = Clock::now();
    int timeout = -1;
    for (const auto& [fd, c] : conns) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count() + 1;
      timeout = timeout < 0 ? static_cast<int>(std::max<long long>(ms, 0))
                            : std::min(timeout, static_cast<int>(std::max<long long>(ms, 0)));
    }
    int n = ::epoll_wait(epoll_fd, events, 64, timeout);
    if (n < 0 && errno != EINTR) {
      log::error("failed to wait for http events",
                 {{"listener", name}, {"error", std::strerror(errno)}});
      return;
    }
    now = Clock::now();
    for (int i = 0; i < std::max(n, 0); ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd) return;
      if (fd == listen_fd) {
        acceptSome(now);
        continue;
      }
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      if (it->second.phase == Phase::Writing) {
        if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) flush(fd, now);
      } else {
        onReadable(fd, now);
      }
    }
    dispatchReady(now);
    expire(Clock::now());
  }
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name) {
  return start(listen, std::move(router), std::move(name), Limits{});
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen,
                                                      std::shared_ptr<const HttpRouter> router,
                                                      std::string name, Limits limits) {
  auto ep = parseListen(listen);
  if (!ep) return Error{ep.error().code, ep.error().message + " (" + name + ")"};
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->name_ = name;
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.router = std::move(router);
  impl.limits = std::move(limits);
  impl.name = name;
  impl.bound_host = ep->host;
  auto sysError = [&](const char* what) {
    int e = errno;
    return Error{
        e, "failed to listen on " + listen + " (" + name + "): " + what + ": " + std::strerror(e)};
  };
  impl.listen_fd = ::socket(ep->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (impl.listen_fd < 0) return sysError("socket");
  int one = 1;
  ::setsockopt(impl.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(impl.listen_fd, reinterpret_cast<const sockaddr*>(&ep->addr), ep->len) != 0)
    return sysError("bind");
  if (::listen(impl.listen_fd, 128) != 0) return sysError("listen");
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(impl.listen_fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  server->port_ =
      ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  impl.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  impl.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl.epoll_fd < 0 || impl.wake_fd < 0) return sysError("epoll");
  impl.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  impl.watch(impl.listen_fd, EPOLLIN, EPOLL_CTL_ADD);
  impl.watch(impl.wake_fd, EPOLLIN, EPOLL_CTL_ADD);
  impl.thread = std::thread([&impl] { impl.loop(); });
  log::info("http listener started",
            {{"listener", name}, {"address", listen}, {"port", std::to_string(server->port_)}});
  return server;
}

HttpServer::~HttpServer() {
  if (!impl_) return;
  if (impl_->thread.joinable()) {
    std::uint64_t one = 1;
    (void)::write(impl_->wake_fd, &one, sizeof one);
    impl_->thread.join();
  }
}

}  // namespace nodegate
