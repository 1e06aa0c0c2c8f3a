#include "kube/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>

#include "kube/flow_control.h"
#include "nodegate/version.h"

namespace nodegate::kube {
namespace {

struct Transfer {
  std::string body;
  std::string line_buf;
  std::optional<std::string> retry_after;
  const std::function<bool(std::string_view)>* on_line = nullptr;
  bool ended_by_callback = false;
  const Stopper* stopper = nullptr;
};

size_t onBody(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  size_t n = size * nmemb;
  if (!t->on_line) {
    // A runaway response must not eat the agent's memory.
    if (t->body.size() + n > kMaxResponseBytes) return 0;
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
  if (t->line_buf.size() > kMaxResponseBytes) return 0;
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
  return t->stopper && t->stopper->stopped() ? 1 : 0;
}

// libcurl wants its global state set up once per process before the first handle.
void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

std::string describe(const HttpResponse& r) {
  if (r.code == 0) return r.error.empty() ? "no response" : r.error;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::string msg;
  if (j.is_object() && j.contains("message") && j["message"].is_string()) msg = j["message"];
  if (msg.empty()) msg = r.body.substr(0, 200);
  return "HTTP " + std::to_string(r.code) + ": " + msg;
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

HttpTransport::HttpTransport() {
  initCurlOnce();
  curl_ = curl_easy_init();
}

HttpTransport::~HttpTransport() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResponse HttpTransport::perform(const HttpRequest& req) {
  HttpResponse out;
  if (!curl_) {
    out.error = "failed to initialise libcurl (libcurl.so.4 could not be loaded, or no handle)";
    return out;
  }
  CURL* c = static_cast<CURL*>(curl_);
  // reset keeps the connection cache and TLS session: that is the connection reuse.
  curl_easy_reset(c);
  Transfer t;
  t.on_line = req.on_line;
  t.stopper = req.stopper;

  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());
  const std::string ua = std::string("nodegate/") + kVersion;
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_USERAGENT, ua.c_str());
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  if (req.method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.body.size()));
  }
  // CURL_BLOB_COPY: libcurl keeps its own copy, the request may go away after perform().
  std::string ca = req.ca_pem, cert = req.cert_pem, key = req.key_pem;
  curl_blob ca_blob{ca.data(), ca.size(), CURL_BLOB_COPY};
  curl_blob cert_blob{cert.data(), cert.size(), CURL_BLOB_COPY};
  curl_blob key_blob{key.data(), key.size(), CURL_BLOB_COPY};
  if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca_blob);
  if (req.insecure) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
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
    out.tls_failed = rc == CURLE_PEER_FAILED_VERIFICATION;
    // A stream that ran until its timeout ended normally from the server's point of view.
    if (req.on_line && rc == CURLE_OPERATION_TIMEDOUT && code == 200) out.code = 200;
  } else {
    out.code = code;
  }
  out.body = req.on_line ? std::move(t.line_buf) : std::move(t.body);
  if (t.retry_after)
    out.retry_after = parseRetryAfter(*t.retry_after, std::chrono::system_clock::now());
  return out;
}

}  // namespace nodegate::kube
