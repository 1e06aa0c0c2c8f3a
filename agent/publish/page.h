// The on-call views of a snapshot: the HTML status page served at "/" on --debug-listen and the
// JSON of /api/v1/checks. Both render cached state only.
//
// Extension point: PageSections. A component adds a section to the page with
//   services.page.add("dns", "Guest DNS", [this](const Snapshot& s) { return html_fragment; });
// The renderer runs on an HTTP worker thread for every page view: it must be thread-safe, quick,
// and return a self-contained HTML fragment (no scripts, no external assets; escape every text
// with htmlEscape from agent/publish/http_server.h). Sections appear below the checks, in the order
// added; one that throws is replaced by an error note instead of breaking the page.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nodegate/snapshot.h"

namespace nodegate {
namespace kube {
class GateHoldBoard;
}

class PageSections {
 public:
  using Renderer = std::function<std::string(const Snapshot&)>;
  // id: stable anchor (HTML id "section-<id>"); title: the section heading.
  void add(std::string id, std::string title, Renderer render);
  std::string render(const Snapshot& snapshot) const;

 private:
  struct Section {
    std::string id, title;
    Renderer render;
  };
  mutable std::mutex mu_;
  std::vector<Section> sections_;
};

struct PageInfo {
  std::string node;
  std::string version;
  int refresh_seconds = 10;
  std::string runbook_base_url;  // each check links <base><check>.md; empty: no links
};

// The runbook page of a check: <base><check>.md ("" when base is empty).
std::string runbookUrl(const std::string& base, const std::string& check);

// `holds` (may be null): what the gate keeps on the Node for running pods, shown in the verdict.
std::string renderPage(const Snapshot& snapshot, const PageInfo& info, const PageSections& sections,
                       const kube::GateHoldBoard* holds = nullptr);

// One check as /api/v1/checks/{name} returns it: toJson(result) plus raw status, since (when the
// status began, RFC 3339 UTC) with since_source (transition | probe | agent-start), last_run,
// required (by the policy in force), blocks_gate, runbook_url and history (the last status or
// reason changes, oldest first: {at, from, to, reason}; from is null for the first result).
nlohmann::json checkStateJson(const CheckState& state, const Snapshot& snapshot,
                              const std::string& runbook_base_url);
// The whole snapshot: { gate: {open, blockers, required}, complete, generation, taken,
// checks: [...] }.
nlohmann::json snapshotJson(const Snapshot& snapshot, const std::string& runbook_base_url);

// RFC 3339 UTC with milliseconds ("2026-11-29T14:03:07.123Z"); "" for the epoch (never).
std::string rfc3339(std::chrono::system_clock::time_point t);

}  // namespace nodegate
