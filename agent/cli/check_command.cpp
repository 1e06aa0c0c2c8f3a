// `nodegate check`: one pass over every probe, printed as a table or JSON.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "device_probe_client.h"
#include "loop/runner.h"
#include "nodegate/json.h"
#include "nodegate/registry.h"
#include "nodegate/runner.h"
#include "nodegate/version.h"
#include "publish/page.h"

namespace nodegate {
namespace {

constexpr std::size_t kCheckThreads = 3;

// Exit codes (README documents them): 0 every check PASS, 1 any FAIL, 3 no FAIL but some
// WARN/UNKNOWN. 2 is reserved for usage errors.
int exitCode(const std::vector<CheckResult>& results) {
  bool any_fail = false, any_other = false;
  for (const auto& r : results) {
    any_fail |= r.status == Status::Fail;
    any_other |= r.status == Status::Warn || r.status == Status::Unknown;
  }
  return any_fail ? 1 : any_other ? 3 : 0;
}

const char* colorOf(Status s) {
  switch (s) {
    case Status::Pass:
      return "\033[32m";
    case Status::Warn:
      return "\033[33m";
    case Status::Fail:
      return "\033[31m";
    case Status::Unknown:
      return "\033[35m";
  }
  return "";
}

void printTable(const std::vector<CheckResult>& results, const Config& cfg,
                const std::vector<std::string>& blockers, const std::string& runbook_base,
                bool color) {
  std::size_t wcheck = 5, wstatus = 7, wreason = 6, wgate = 4;
  for (const auto& r : results) {
    wcheck = std::max(wcheck, r.check.size());
    wreason = std::max(wreason, r.reason.size());
  }
  auto pad = [](std::string s, std::size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s;
  };
  const std::string indent =
      pad("", wcheck) + "  " + pad("", wgate) + "  " + pad("", wstatus) + "  ";
  std::cout << pad("CHECK", wcheck) << "  " << pad("GATE", wgate) << "  " << pad("STATUS", wstatus)
            << "  " << pad("REASON", wreason) << "  MESSAGE\n";
  for (const auto& r : results) {
    std::string status(toString(r.status));
    std::string shown = pad(status, wstatus);
    if (color) shown = colorOf(r.status) + shown + "\033[0m";
    std::cout << pad(r.check, wcheck) << "  "
              << pad(cfg.required.count(r.check) ? "req" : "", wgate) << "  " << shown << "  "
              << pad(r.reason, wreason) << "  " << r.message << "\n";
    if (r.status != Status::Pass && !r.hint.empty())
      std::cout << indent << "hint: " << r.hint << "\n";
    if (r.status != Status::Pass && !runbook_base.empty())
      std::cout << indent << "runbook: " << runbookUrl(runbook_base, r.check) << "\n";
  }
  std::cout << "\nGATE req: required by the gate policy";
  if (!cfg.required.empty()) {
    std::string list;
    for (const auto& c : cfg.required) list += (list.empty() ? "" : ", ") + c;
    std::cout << " (" << list << ")";
  }
  std::cout << "\nvm gate: " << (blockers.empty() ? "OPEN" : "CLOSED") << "\n";
  for (const auto& b : blockers) {
    auto it = std::find_if(results.begin(), results.end(),
                           [&](const CheckResult& r) { return r.check == b; });
    if (it == results.end())
      std::cout << "  blocked by " << b << ": required, but no such check ran\n";
    else
      std::cout << "  blocked by " << b << ": " << toString(it->status) << " " << it->reason
                << (it->message.empty() ? "" : " - " + it->message) << "\n";
  }
}

}  // namespace

int runCheck(const Options& opts) {
  auto cfg = buildConfig(opts);
  if (!cfg) {
    std::cerr << "nodegate: " << cfg.error().message << "\n";
    return 2;
  }
  HostRoot host = opts.hostRoot();
  auto seams = productionSeams();
  if (!opts.device_probe.empty())
    seams.device_probe = std::make_shared<devprobe::Client>(opts.device_probe);
  // A few probes wait (lvm as a child process, D-Bus calls, the kernel building a VM), so a
  // one-shot check runs probes side by side; the table keeps registry order. Three threads take
  // the probes in turn rather than one thread each: most probes are file reads of microseconds,
  // and a thread per probe (stack mapping, page faults, clone, teardown) cost more CPU than the
  // reads (perf stat, docs/benchmarks/check.md), while three still let lvm and both D-Bus probes
  // wait at the same time. The agent's runner runs them, so every probe has the deadline it has
  // in the agent (checks.<probe>.timeout_seconds): a probe that hangs is UNKNOWN/ProbeTimeout.
  RunnerOptions ro;
  ro.max_parallel = kCheckThreads;
  Runner runner(makeProbes(seams), host, *cfg, ro);
  const std::vector<CheckResult> results = runner.runOnce();
  const auto blockers = gateBlockers(results, *cfg);

  if (opts.output == "json") {
    nlohmann::json doc;
    doc["version"] = kVersion;
    doc["host_root"] = host.rootDir();
    doc["gate"] = {
        {"open", blockers.empty()},
        {"blockers", blockers},
        {"required", std::vector<std::string>(cfg->required.begin(), cfg->required.end())}};
    doc["checks"] = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json j = toJson(r);
      j["required"] = cfg->required.count(r.check) > 0;
      j["blocks_gate"] = std::find(blockers.begin(), blockers.end(), r.check) != blockers.end();
      std::string rb = runbookUrl(opts.runbook_base_url, r.check);
      j["runbook_url"] = rb.empty() ? nlohmann::json() : nlohmann::json(rb);
      doc["checks"].push_back(std::move(j));
    }
    std::cout << doc.dump(2) << "\n";
  } else {
    bool color = opts.color == "always" || (opts.color == "auto" && ::isatty(1));
    printTable(results, *cfg, blockers, opts.runbook_base_url, color);
  }
  const int code = exitCode(results);
  if (runner.stop() > 0) {
    // A probe past its deadline still runs on a thread of its own: leave without destructors.
    std::fflush(nullptr);
    std::cout.flush();
    ::_exit(code);
  }
  return code;
}

}  // namespace nodegate
