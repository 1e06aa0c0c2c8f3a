// `nodegate dns trace [--vmi NS/NAME] [--follow] [--api URL]`: asks a running agent's debug
// endpoint for finished guest DNS queries and prints each as one line of hops. The agent holds
// the BPF programs; this command needs no privileges, only the debug listener (port-forward it).
#include <signal.h>

#include <chrono>
#include <iostream>
#include <thread>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "dns/trace_view.h"

namespace nodegate {
namespace {

std::size_t collect(char* data, std::size_t size, std::size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (s->size() + size * n > (8u << 20)) return 0;  // bounded: a runaway answer is an error
  s->append(data, size * n);
  return size * n;
}

std::string urlEncode(CURL* c, const std::string& v) {
  char* e = curl_easy_escape(c, v.c_str(), static_cast<int>(v.size()));
  std::string out = e ? e : "";
  curl_free(e);
  return out;
}

std::string field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "unknown";
}

Result<nlohmann::json> fetch(const std::string& url) {
  CURL* c = curl_easy_init();
  if (!c) return Error{0, "failed to initialise libcurl"};
  std::string body;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) return Error{0, "failed to query " + url + ": " + curl_easy_strerror(rc)};
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{0, "failed to read " + url + ": HTTP " + std::to_string(status) + ", not JSON"};
  if (status == 503) {
    return Error{0, "the agent's dns tracer is off: " + field(j, "reason")};
  }
  if (status != 200)
    return Error{0, "failed to query " + url + ": HTTP " + std::to_string(status) + ": " +
                        field(j, "error")};
  return j;
}

}  // namespace

int runDnsTrace(const Options& opts) {
  if (opts.args.empty() || opts.args[0] != "trace" || opts.args.size() > 1) {
    std::cerr << "nodegate: usage: nodegate dns trace [--vmi NS/NAME] [--follow] [--api URL]\n";
    return 2;
  }
  if (!opts.vmi.empty() && opts.vmi.find('/') == std::string::npos) {
    std::cerr << "nodegate: --vmi must be NAMESPACE/NAME\n";
    return 2;
  }
  std::string base = opts.api.empty() ? "http://" + opts.debug_listen : opts.api;
  while (!base.empty() && base.back() == '/') base.pop_back();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL* enc = curl_easy_init();
  std::string vmi_q = opts.vmi.empty() || !enc ? "" : "&vmi=" + urlEncode(enc, opts.vmi);
  if (enc) curl_easy_cleanup(enc);

  std::uint64_t after = 0;
  bool first = true;
  for (;;) {
    auto j = fetch(base + "/api/v1/dns/traces?after=" + std::to_string(after) + vmi_q);
    if (!j) {
      std::cerr << "nodegate: " << j.error().message << "\n";
      return 1;
    }
    const nlohmann::json traces = j->contains("traces") ? (*j)["traces"] : nlohmann::json::array();
    if (first && traces.empty() && !opts.follow) std::cout << "no finished DNS queries yet\n";
    if (traces.is_array())
      for (const auto& t : traces) {
        std::cout << dns::traceLine(t) << "\n";
        if (t.contains("seq") && t["seq"].is_number_unsigned())
          after = std::max(after, t["seq"].get<std::uint64_t>());
      }
    std::cout.flush();
    first = false;
    if (!opts.follow) return 0;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace nodegate
