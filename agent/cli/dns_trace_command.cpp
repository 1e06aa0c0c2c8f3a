// `nodegate dns trace [--vmi NS/NAME] [--follow] [--api URL]`: asks a running agent's debug
// endpoint for finished guest DNS queries and prints each as one line of hops. The agent holds
// the BPF programs; this command needs no privileges, only the debug listener (port-forward it).
#include <signal.h>

#include <chrono>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "dns/trace_view.h"
#include "kube/http.h"

namespace nodegate {
namespace {

std::string field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "unknown";
}

// The exit code for a VMI no launcher on the agent's node serves (1: the agent could not be
// asked or its tracer is off; 2: usage).
constexpr int kNoSuchVmi = 3;

// no_such_vmi: the agent answered that no launcher on its node serves the VMI asked for (a 404
// of the route itself, which names the VMI; a 404 without is a path the agent does not serve).
Result<nlohmann::json> fetch(kube::HttpTransport& http, const std::string& url, bool* no_such_vmi) {
  *no_such_vmi = false;
  kube::HttpRequest req;
  req.url = url;
  req.timeout_s = 5;
  auto r = http.perform(req);
  if (!http.usable()) return Error{0, r.error};
  if (r.code == 0) return Error{0, "failed to query " + url + ": " + r.error};
  const long status = r.code;
  const std::string& body = r.body;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{0, "failed to read " + url + ": HTTP " + std::to_string(status) + ", not JSON"};
  if (status == 404 && j.contains("vmi")) {
    *no_such_vmi = true;
    return Error{0, field(j, "error")};
  }
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
  const std::string vmi_q = opts.vmi.empty() ? "" : "&vmi=" + kube::urlEncode(opts.vmi);
  kube::HttpTransport http;  // one connection for every poll of --follow

  std::uint64_t after = 0;
  bool first = true;
  for (;;) {
    bool no_such_vmi = false;
    auto j = fetch(http, base + "/api/v1/dns/traces?after=" + std::to_string(after) + vmi_q,
                   &no_such_vmi);
    if (no_such_vmi) {
      // The VM is not (or no longer, under --follow) on the agent's node.
      std::cerr << "nodegate: no such VMI on this node: " << opts.vmi << "\n";
      return kNoSuchVmi;
    }
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
