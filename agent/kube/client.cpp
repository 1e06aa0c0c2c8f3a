#include "kube/client.h"

#include <curl/curl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "kube/yaml_lite.h"
#include "nodegate/log.h"
#include "nodegate/version.h"

namespace nodegate::kube {
namespace {

using nlohmann::json;

Result<std::string> readWhole(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errnoError(errno, "read " + what + " " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  auto notspace = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), notspace));
  s.erase(std::find_if(s.rbegin(), s.rend(), notspace).base(), s.end());
  return s;
}

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty() || p[0] == '/' || base_dir.empty()) return p;
  return base_dir + "/" + p;
}

const json* namedEntry(const json& doc, const char* list, const std::string& name,
                       const char* inner) {
  auto it = doc.find(list);
  if (it == doc.end() || !it->is_array()) return nullptr;
  for (const auto& e : *it)
    if (e.is_object() && e.value("name", "") == name && e.contains(inner) && e[inner].is_object())
      return &e[inner];
  return nullptr;
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string base64Decode(std::string_view in, bool* ok) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  *ok = true;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    auto pos = kAlphabet.find(c);
    if (pos == std::string_view::npos) {
      *ok = false;
      return {};
    }
    buf = (buf << 6) | static_cast<unsigned>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  return out;
}

bool inClusterAvailable(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  struct stat st {};
  return host && *host && port && *port && ::stat((sa_dir + "/token").c_str(), &st) == 0;
}

Result<ClientConfig> loadInCluster(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return Error{ENOENT,
                 "failed to load in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set"};
  ClientConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6 service address
  c.server = "https://" + h + ":" + port;
  c.token_file = sa_dir + "/token";
  c.ca_file = sa_dir + "/ca.crt";
  c.source = "in-cluster";
  for (const auto& f : {c.token_file, c.ca_file}) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) return errnoError(errno, "load in-cluster config: " + f);
  }
  return c;
}

Result<ClientConfig> parseKubeconfig(std::string_view text, const std::string& base_dir) {
  auto parsed = parseYamlSubset(text);
  if (!parsed) return Error{EINVAL, "failed to load kubeconfig: " + parsed.error().message};
  const json& doc = *parsed;
  if (!doc.is_object()) return Error{EINVAL, "failed to load kubeconfig: not a mapping"};
  std::string ctx_name = str(doc, "current-context");
  if (ctx_name.empty()) return Error{EINVAL, "failed to load kubeconfig: no current-context"};
  const json* ctx = namedEntry(doc, "contexts", ctx_name, "context");
  if (!ctx)
    return Error{EINVAL, "failed to load kubeconfig: context \"" + ctx_name + "\" not found"};
  std::string cluster_name = str(*ctx, "cluster"), user_name = str(*ctx, "user");
  const json* cluster = namedEntry(doc, "clusters", cluster_name, "cluster");
  if (!cluster)
    return Error{EINVAL, "failed to load kubeconfig: cluster \"" + cluster_name + "\" not found"};

  ClientConfig c;
  c.source = "kubeconfig context " + ctx_name;
  c.server = str(*cluster, "server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.empty())
    return Error{EINVAL,
                 "failed to load kubeconfig: cluster \"" + cluster_name + "\" has no server"};
  bool ok = true;
  if (auto d = str(*cluster, "certificate-authority-data"); !d.empty()) {
    c.ca_pem = base64Decode(d, &ok);
    if (!ok)
      return Error{EINVAL, "failed to load kubeconfig: certificate-authority-data is not base64"};
  }
  c.ca_file = resolve(base_dir, str(*cluster, "certificate-authority"));
  c.insecure = cluster->value("insecure-skip-tls-verify", false) == true;

  const json* user = user_name.empty() ? nullptr : namedEntry(doc, "users", user_name, "user");
  if (!user_name.empty() && !user)
    return Error{EINVAL, "failed to load kubeconfig: user \"" + user_name + "\" not found"};
  if (user) {
    if (user->contains("exec") || user->contains("auth-provider"))
      return Error{ENOTSUP, "failed to load kubeconfig: user \"" + user_name +
                                "\" uses exec/auth-provider credentials, which nodegate does not "
                                "support (use a token, tokenFile or client certificate)"};
    c.token = str(*user, "token");
    c.token_file = resolve(base_dir, str(*user, "tokenFile"));
    if (auto d = str(*user, "client-certificate-data"); !d.empty()) {
      c.cert_pem = base64Decode(d, &ok);
      if (!ok)
        return Error{EINVAL, "failed to load kubeconfig: client-certificate-data is not base64"};
    }
    if (auto d = str(*user, "client-key-data"); !d.empty()) {
      c.key_pem = base64Decode(d, &ok);
      if (!ok) return Error{EINVAL, "failed to load kubeconfig: client-key-data is not base64"};
    }
    c.cert_file = resolve(base_dir, str(*user, "client-certificate"));
    c.key_file = resolve(base_dir, str(*user, "client-key"));
  }
  return c;
}

Result<ClientConfig> loadKubeconfig(const std::string& path) {
  auto text = readWhole(path, "kubeconfig");
  if (!text) return text.error();
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  auto c = parseKubeconfig(*text, dir);
  if (!c) return c;
  ClientConfig cfg = std::move(c).value();
  // Client certificates do not rotate under us the way bound tokens do: read them once.
  if (!cfg.cert_file.empty()) {
    auto pem = readWhole(cfg.cert_file, "client certificate");
    if (!pem) return pem.error();
    cfg.cert_pem = *pem;
  }
  if (!cfg.key_file.empty()) {
    auto pem = readWhole(cfg.key_file, "client key");
    if (!pem) return pem.error();
    cfg.key_pem = *pem;
  }
  cfg.source = "kubeconfig " + path + " " + cfg.source.substr(std::string("kubeconfig ").size());
  return cfg;
}

std::optional<double> parseRetryAfter(std::string_view value,
                                      std::chrono::system_clock::time_point now) {
  std::string v = trim(std::string(value));
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (v.size() > 9) return std::nullopt;
    return std::stod(v);
  }
  // IMF-fixdate, the only date form RFC 9110 senders may produce.
  std::tm tm{};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (!end || *end != '\0') return std::nullopt;
  auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
  return std::max(0.0, std::chrono::duration<double>(at - now).count());
}

bool Stopper::sleepFor(std::chrono::duration<double> d) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, d, [&] { return stopped_.load(); });
  return !stopped_.load();
}

void Stopper::stop() {
  {
    std::lock_guard lk(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

RateLimiter::RateLimiter(double qps, double burst)
    : qps_(qps > 0 ? qps : 5),
      burst_(burst >= 1 ? burst : 1),
      tokens_(burst_),
      last_(std::chrono::steady_clock::now()) {}

std::chrono::duration<double> RateLimiter::reserve(std::chrono::steady_clock::time_point now) {
  std::lock_guard lk(mu_);
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  // A negative balance is a queue of reservations; each waits for its share of refill.
  return std::chrono::duration<double>(tokens_ >= 0 ? 0 : -tokens_ / qps_);
}

bool RateLimiter::acquire(Stopper& stopper) {
  auto wait = reserve(std::chrono::steady_clock::now());
  if (wait.count() <= 0) return !stopper.stopped();
  return stopper.sleepFor(wait);
}

Backoff::Backoff(double base_s, double cap_s, std::uint64_t seed)
    : base_(base_s), cap_(cap_s), rng_(seed) {}

double Backoff::next() {
  double ceiling = std::min(cap_, base_ * static_cast<double>(1ULL << std::min(attempt_, 30)));
  ++attempt_;
  // Half fixed, half random: never hammers at once, still spreads a fleet that failed together.
  std::uniform_real_distribution<double> d(ceiling / 2, ceiling);
  return d(rng_);
}

Credentials::Credentials(ClientConfig cfg, std::chrono::seconds token_max_age)
    : cfg_(std::move(cfg)), token_max_age_(token_max_age) {}

std::string Credentials::token() {
  if (cfg_.token_file.empty()) return cfg_.token;
  std::lock_guard lk(mu_);
  auto now = std::chrono::steady_clock::now();
  if (!token_valid_ || now - token_read_ >= token_max_age_) {
    auto t = readWhole(cfg_.token_file, "token");
    if (t) {
      token_ = trim(*t);
      token_valid_ = true;
    } else {
      // Keep the last good token: the kubelet swaps the file atomically, a miss is transient.
      log::warn("failed to read service account token", {{"error", t.error().message}});
    }
    token_read_ = now;
  }
  return token_.empty() ? cfg_.token : token_;
}

void Credentials::invalidateToken() {
  std::lock_guard lk(mu_);
  token_valid_ = false;
}

Result<int> checkCaBundle(std::string_view pem) {
  constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  int count = 0;
  std::size_t pos = 0;
  while ((pos = pem.find(kBegin, pos)) != std::string_view::npos) {
    auto body = pos + kBegin.size();
    auto end = pem.find(kEnd, body);
    if (end == std::string_view::npos)
      return Error{EINVAL, "certificate " + std::to_string(count + 1) + " has no END line"};
    bool ok = false;
    std::string der = base64Decode(pem.substr(body, end - body), &ok);
    // Every X.509 certificate is a DER SEQUENCE (0x30) of a few hundred bytes at least.
    if (!ok || der.size() < 64 || static_cast<unsigned char>(der[0]) != 0x30)
      return Error{EINVAL, "certificate " + std::to_string(count + 1) + " is not valid base64 DER"};
    ++count;
    pos = end + kEnd.size();
  }
  if (count == 0) return Error{EINVAL, "no PEM certificate in it"};
  return count;
}

std::string Credentials::caPem() {
  if (cfg_.ca_file.empty()) return cfg_.ca_pem;
  std::lock_guard lk(mu_);
  struct stat st {};
  if (::stat(cfg_.ca_file.c_str(), &st) != 0) {
    // Keep the last good bundle: the kubelet swaps the file atomically, a miss is transient.
    std::string why = "failed to read kubernetes ca " + cfg_.ca_file + ": " + std::strerror(errno);
    if (why != ca_error_) log::warn(why);
    ca_error_ = why;
    return ca_;
  }
  long long mtime = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  auto ino = static_cast<unsigned long long>(st.st_ino);
  if (mtime == ca_mtime_ns_ && st.st_size == ca_size_ && ino == ca_ino_) return ca_;
  // Whatever the outcome, this version of the file is judged once, not on every request.
  ca_mtime_ns_ = mtime;
  ca_size_ = st.st_size;
  ca_ino_ = ino;
  auto pem = readWhole(cfg_.ca_file, "kubernetes ca");
  Result<int> certs = pem ? checkCaBundle(*pem) : Result<int>(pem.error());
  if (!certs) {
    ca_error_ = "failed to load kubernetes ca " + cfg_.ca_file + ": " + certs.error().message;
    log::error(ca_error_, {{"action", ca_.empty() ? "no ca to verify the server with"
                                                  : "keeping the previous ca"}});
    return ca_;
  }
  if (!ca_.empty() && *pem != ca_)
    log::info("reloaded kubernetes ca",
              {{"file", cfg_.ca_file}, {"certificates", std::to_string(*certs)}});
  ca_ = *pem;
  ca_error_.clear();
  return ca_;
}

std::string Credentials::caError() {
  std::lock_guard lk(mu_);
  return ca_error_;
}

RequestCounter& requestCounter(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("nodegate_kube_requests_total")
      .Help(
          "Requests sent to the Kubernetes API server, by verb and HTTP status code "
          "(code=\"error\" when no response arrived).")
      .Register(registry);
}

namespace {

struct Transfer {
  std::string body;
  std::string line_buf;
  std::optional<std::string> retry_after;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  bool ended_by_callback = false;
  Stopper* stopper = nullptr;
};

size_t onBody(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  size_t n = size * nmemb;
  if (!t->on_line) {
    // A Node is a few KiB; a runaway response must not eat the agent's memory.
    if (t->body.size() + n > (8u << 20)) return 0;
    t->body.append(ptr, n);
    return n;
  }
  t->line_buf.append(ptr, n);
  std::size_t start = 0;
  for (;;) {
    auto nl = t->line_buf.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(t->line_buf.data() + start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    if (!(*t->on_line)(line)) {
      t->ended_by_callback = true;
      return 0;
    }
  }
  t->line_buf.erase(0, start);
  if (t->line_buf.size() > (8u << 20)) return 0;
  return n;
}

size_t onHeader(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  std::string_view h(buf, size * nitems);
  constexpr std::string_view kName = "retry-after:";
  if (h.size() > kName.size()) {
    std::string lower(h.substr(0, kName.size()));
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == kName) t->retry_after = std::string(h.substr(kName.size()));
  }
  return size * nitems;
}

int onProgress(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(userdata);
  return t->stopper->stopped() ? 1 : 0;
}

}  // namespace

HttpClient::HttpClient(Credentials& creds, RateLimiter& limiter, Stopper& stopper,
                       RequestCounter& counter)
    : creds_(creds),
      limiter_(limiter),
      stopper_(stopper),
      counter_(counter),
      curl_(curl_easy_init()) {}

HttpClient::~HttpClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResponse HttpClient::request(const std::string& verb, const std::string& method,
                                 const std::string& path, const std::string& content_type,
                                 const std::string& body, double timeout_s) {
  auto r = perform(verb, method, path, content_type, body, timeout_s, nullptr);
  // Bound service-account tokens rotate: a 401 means "read the file again", once.
  if (r.code == 401 && !creds_.config().token_file.empty()) {
    creds_.invalidateToken();
    r = perform(verb, method, path, content_type, body, timeout_s, nullptr);
  }
  return r;
}

HttpResponse HttpClient::stream(const std::string& path,
                                const std::function<bool(std::string_view)>& on_line,
                                double timeout_s) {
  auto r = perform("watch", "GET", path, {}, {}, timeout_s, &on_line);
  if (r.code == 401 && !creds_.config().token_file.empty()) {
    creds_.invalidateToken();
    r = perform("watch", "GET", path, {}, {}, timeout_s, &on_line);
  }
  return r;
}

HttpResponse HttpClient::perform(const std::string& verb, const std::string& method,
                                 const std::string& path, const std::string& content_type,
                                 const std::string& body, double timeout_s,
                                 const std::function<bool(std::string_view)>* on_line) {
  HttpResponse out;
  if (!curl_) {
    out.error = "failed to create curl handle (libcurl could not be loaded or initialised)";
    counter_.Add({{"verb", verb}, {"code", "error"}}).Increment();
    return out;
  }
  if (!limiter_.acquire(stopper_)) {
    out.error = "stopping";
    return out;
  }
  CURL* c = static_cast<CURL*>(curl_);
  // reset keeps the connection cache and TLS session: that is the connection reuse.
  curl_easy_reset(c);
  const ClientConfig& cfg = creds_.config();
  std::string url = cfg.server + path;
  Transfer t;
  t.on_line = on_line;
  t.stopper = &stopper_;

  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!content_type.empty())
    headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
  std::string token = creds_.token();
  if (!token.empty())
    headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  std::string ua = std::string("nodegate/") + kVersion;

  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_USERAGENT, ua.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  if (method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  std::string ca = creds_.caPem();
  if (ca.empty() && !cfg.ca_file.empty() && !cfg.insecure) {
    // Never fall back to the system's CAs for a cluster that named its own.
    curl_slist_free_all(headers);
    out.error = creds_.caError();
    counter_.Add({{"verb", verb}, {"code", "error"}}).Increment();
    return out;
  }
  curl_blob ca_blob{ca.data(), ca.size(), CURL_BLOB_COPY};
  if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca_blob);
  if (cfg.insecure) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  std::string cert = cfg.cert_pem, key = cfg.key_pem;
  curl_blob cert_blob{cert.data(), cert.size(), CURL_BLOB_COPY};
  curl_blob key_blob{key.data(), key.size(), CURL_BLOB_COPY};
  if (!cert.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cert_blob);
    curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!key.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &key_blob);
    curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
  }

  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  if (rc != CURLE_OK && !(t.ended_by_callback && code > 0)) {
    out.error = curl_easy_strerror(rc);
    // A server certificate from a new CA while the CA file on disk is refused: say both.
    if (rc == CURLE_PEER_FAILED_VERIFICATION)
      if (auto why = creds_.caError(); !why.empty()) out.error += " (" + why + ")";
    // A watch that ran until its timeout ended normally from the server's point of view.
    if (on_line && rc == CURLE_OPERATION_TIMEDOUT && code == 200) out.code = 200;
  } else {
    out.code = code;
  }
  out.body = on_line ? std::move(t.line_buf) : std::move(t.body);
  if (t.retry_after)
    out.retry_after = parseRetryAfter(*t.retry_after, std::chrono::system_clock::now());
  counter_.Add({{"verb", verb}, {"code", out.code ? std::to_string(out.code) : "error"}})
      .Increment();
  return out;
}

Result<ClientConfig> loadClientConfig(const std::string& mode, const std::string& kubeconfig) {
  if (mode == "none") return Error{EINVAL, "--kube none"};
  if (mode == "incluster" || (mode == "auto" && inClusterAvailable())) return loadInCluster();
  if (mode == "kubeconfig" || (mode == "auto" && !kubeconfig.empty())) {
    std::string path = kubeconfig;
    if (path.empty())
      if (const char* env = std::getenv("KUBECONFIG"); env && *env) path = env;
    if (path.empty()) return Error{EINVAL, "--kube kubeconfig needs --kubeconfig FILE"};
    return loadKubeconfig(path);
  }
  return Error{
      ENOENT,
      "failed to find kubernetes credentials: no in-cluster service account and no --kubeconfig"};
}

std::string urlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string describe(const HttpResponse& r) {
  if (r.code == 0) return r.error.empty() ? "no response" : r.error;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::string msg;
  if (j.is_object() && j.contains("message") && j["message"].is_string()) msg = j["message"];
  if (msg.empty()) msg = r.body.substr(0, 200);
  return "HTTP " + std::to_string(r.code) + ": " + msg;
}

}  // namespace nodegate::kube
