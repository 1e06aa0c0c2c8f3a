#include "publish/page.h"

#include <algorithm>
#include <ctime>
#include <set>

#include "nodegate/json.h"
#include "nodegate/log.h"
#include "publish/http_server.h"
#include "publish/kube/hold_board.h"
#include "publish/rfc3339.h"

namespace nodegate {

void PageSections::add(std::string id, std::string title, Renderer render) {
  std::lock_guard l(mu_);
  sections_.push_back(Section{std::move(id), std::move(title), std::move(render)});
}

std::string PageSections::render(const Snapshot& snapshot) const {
  std::vector<Section> copy;
  {
    std::lock_guard l(mu_);
    copy = sections_;
  }
  std::string out;
  for (const auto& s : copy) {
    out += "<section class=\"ext\" id=\"section-" + htmlEscape(s.id) + "\"><h2>" +
           htmlEscape(s.title) + "</h2>";
    try {
      out += s.render(snapshot);
    } catch (const std::exception& e) {
      log::warn("failed to render page section", {{"section", s.id}, {"error", e.what()}});
      out += "<p class=\"err\">this section failed to render: " + htmlEscape(e.what()) + "</p>";
    }
    out += "</section>\n";
  }
  return out;
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  return t.time_since_epoch().count() == 0 ? "" : formatRfc3339(t, 3);
}

std::string runbookUrl(const std::string& base, const std::string& check) {
  return base.empty() ? std::string() : base + check + ".md";
}

namespace {

nlohmann::json timeOrNull(std::chrono::system_clock::time_point t) {
  return t.time_since_epoch().count() ? nlohmann::json(rfc3339(t)) : nlohmann::json();
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

nlohmann::json checkStateJson(const CheckState& st, const Snapshot& snap,
                              const std::string& runbook_base_url) {
  nlohmann::json j = toJson(st.result);
  j["raw_status"] = toString(st.raw_status);
  j["since"] = timeOrNull(st.since);
  j["since_source"] = toString(st.since_source);
  j["last_run"] = timeOrNull(st.last_run);
  j["required"] = contains(snap.gate_required, st.result.check);
  j["blocks_gate"] = contains(snap.gate_blockers, st.result.check);
  std::string runbook = runbookUrl(runbook_base_url, st.result.check);
  j["runbook_url"] = runbook.empty() ? nlohmann::json() : nlohmann::json(runbook);
  j["history"] = nlohmann::json::array();
  for (const auto& t : st.history)
    j["history"].push_back({{"at", rfc3339(t.at)},
                            {"from", t.from ? nlohmann::json(toString(*t.from)) : nlohmann::json()},
                            {"to", toString(t.to)},
                            {"reason", t.reason}});
  return j;
}

nlohmann::json snapshotJson(const Snapshot& s, const std::string& runbook_base_url) {
  nlohmann::json j;
  j["gate"] = {{"open", s.gate_open}, {"blockers", s.gate_blockers}, {"required", s.gate_required}};
  j["complete"] = s.complete;
  j["generation"] = s.generation;
  j["taken"] = rfc3339(s.taken);
  j["checks"] = nlohmann::json::array();
  for (const auto& c : s.checks) j["checks"].push_back(checkStateJson(c, s, runbook_base_url));
  return j;
}

namespace {

std::string ago(std::chrono::system_clock::time_point t,
                std::chrono::system_clock::time_point now) {
  if (t.time_since_epoch().count() == 0) return "never";
  auto s = std::chrono::duration_cast<std::chrono::seconds>(now - t).count();
  if (s < 0) s = 0;
  if (s < 90) return std::to_string(s) + " s ago";
  if (s < 90 * 60) return std::to_string(s / 60) + " min ago";
  if (s < 48 * 3600) return std::to_string(s / 3600) + " h ago";
  return std::to_string(s / 86400) + " d ago";
}

std::string timeTag(std::chrono::system_clock::time_point t,
                    std::chrono::system_clock::time_point now) {
  std::string iso = rfc3339(t);
  if (iso.empty()) return "<span class=\"muted\">never</span>";
  std::string shown = iso.substr(0, 10) + " " + iso.substr(11, 8) + " UTC";
  return "<time datetime=\"" + iso + "\" title=\"" + shown + "\">" + shown +
         "</time> <span class=\"muted\">(" + ago(t, now) + ")</span>";
}

constexpr const char* kStyle = R"css(
:root{--pass:#1a7f37;--warn:#9a6700;--fail:#cf222e;--unk:#8250df;--ink:#1f2328;--mut:#59636e;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--ink);background:#fff}
header{padding:14px 24px;border-bottom:1px solid var(--line);background:var(--bg);display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0}
header .meta{color:var(--mut);font-size:13px}
main{padding:16px 24px;max-width:1100px}
#verdict{border-radius:8px;padding:16px 20px;margin:0 0 16px;color:#fff}
#verdict.open{background:var(--pass)}
#verdict.closed{background:var(--fail)}
#verdict.starting{background:var(--mut)}
#verdict .big{font-size:26px;font-weight:700;letter-spacing:.3px}
#verdict .why{margin-top:4px;font-size:15px}
#verdict code{background:rgba(255,255,255,.18);color:#fff}
#verdict a{color:#fff}
.counts{display:flex;gap:10px;margin:0 0 18px;flex-wrap:wrap}
.count{border:1px solid var(--line);border-radius:6px;padding:6px 12px;font-weight:600}
.badge{display:inline-block;min-width:74px;text-align:center;border-radius:4px;padding:1px 8px;color:#fff;font-weight:700;font-size:13px}
.s-PASS{background:var(--pass)}.s-WARN{background:var(--warn)}.s-FAIL{background:var(--fail)}.s-UNKNOWN{background:var(--unk)}
.check{border:1px solid var(--line);border-left-width:6px;border-radius:6px;padding:10px 14px;margin:0 0 12px}
.check.b-FAIL{border-left-color:var(--fail)}.check.b-WARN{border-left-color:var(--warn)}.check.b-UNKNOWN{border-left-color:var(--unk)}.check.b-PASS{border-left-color:var(--pass)}
.check h3{margin:0;font-size:16px;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.check .reason{color:var(--mut);font-weight:500;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px}
.req{font-size:11px;border:1px solid var(--ink);border-radius:3px;padding:0 4px;font-weight:600}
.req.blocks{background:var(--fail);border-color:var(--fail);color:#fff}
.history{margin:4px 0;font-size:13px}
.history summary{cursor:pointer;color:var(--mut)}
.msg{margin:6px 0}
.hint{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin:6px 0}
.hint b{margin-right:6px}
.times{color:var(--mut);font-size:13px}
.pending{color:var(--warn);font-size:13px}
table{border-collapse:collapse;margin:6px 0;font-size:13px;width:100%}
td,th{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600}
td.obs,td.src{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
code{font-family:ui-monospace,Menlo,Consolas,monospace;background:var(--bg);padding:0 4px;border-radius:3px}
h2{font-size:17px;margin:22px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.passing{border:1px solid var(--line);border-radius:6px}
.passing details{border-top:1px solid var(--line);padding:6px 12px}
.passing details:first-child{border-top:0}
.passing summary{cursor:pointer;display:flex;gap:10px;align-items:center}
.muted{color:var(--mut)}
.err{color:var(--fail)}
footer{padding:12px 24px;color:var(--mut);font-size:13px;border-top:1px solid var(--line);margin-top:20px}
footer a{color:inherit}
)css";

void renderEvidence(std::string& out, const CheckResult& r) {
  if (r.evidence.empty()) return;
  out += "<table class=\"evidence\"><tr><th>evidence source</th><th>observed</th></tr>";
  for (const auto& e : r.evidence)
    out += "<tr><td class=\"src\">" + htmlEscape(e.source) + "</td><td class=\"obs\">" +
           htmlEscape(e.observed) + "</td></tr>";
  out += "</table>";
}

const char* sinceNote(SinceSource s) {
  switch (s) {
    case SinceSource::Transition:
      return "";
    case SinceSource::Probe:
      return " <span class=\"muted\">(as the probe dates it)</span>";
    case SinceSource::AgentStart:
      return " <span class=\"muted\">(first seen when the agent started; it may have begun "
             "earlier)</span>";
  }
  return "";
}

// The last changes of the verdict, newest first.
void renderHistory(std::string& out, const CheckState& st,
                   std::chrono::system_clock::time_point now) {
  if (st.history.empty()) return;
  out += "<details class=\"history\"><summary>last " + std::to_string(st.history.size()) +
         " change" + (st.history.size() == 1 ? "" : "s") +
         "</summary><table><tr><th>when</th><th>from</th><th>to</th><th>reason</th></tr>";
  for (auto it = st.history.rbegin(); it != st.history.rend(); ++it) {
    std::string from = it->from ? std::string(toString(*it->from)) : "(first result)";
    std::string to(toString(it->to));
    out += "<tr><td>" + timeTag(it->at, now) + "</td><td>" + from +
           "</td><td><span class=\"badge s-" + to + "\">" + to + "</span></td><td class=\"obs\">" +
           htmlEscape(it->reason) + "</td></tr>";
  }
  out += "</table></details>";
}

void renderCheckBody(std::string& out, const CheckState& st,
                     std::chrono::system_clock::time_point now, const PageInfo& info) {
  const CheckResult& r = st.result;
  out += "<div class=\"msg\">" + htmlEscape(r.message) + "</div>";
  if (r.status != Status::Pass && !r.hint.empty())
    out += "<div class=\"hint\"><b>Hint</b><span class=\"hint-text\">" + htmlEscape(r.hint) +
           "</span></div>";
  if (st.raw_status != r.status && st.last_run.time_since_epoch().count())
    out += "<div class=\"pending\">latest run says " + std::string(toString(st.raw_status)) +
           "; held back by flap damping until it repeats</div>";
  renderEvidence(out, r);
  char dur[32];
  std::snprintf(dur, sizeof dur, "%.1f ms",
                std::chrono::duration<double, std::milli>(r.duration).count());
  out += "<div class=\"times\">status since " + timeTag(st.since, now) +
         sinceNote(st.since_source) + " &middot; last run " + timeTag(st.last_run, now) +
         " &middot; took " + dur;
  if (std::string rb = runbookUrl(info.runbook_base_url, r.check); !rb.empty())
    out += " &middot; <a class=\"runbook\" href=\"" + htmlEscape(rb) + "\">runbook</a>";
  out += "</div>";
  renderHistory(out, st, now);
}

// What the Node keeps although the verdict says otherwise, and why: an on-call engineer who
// reads "CLOSED" and still sees the gate label on the Node must find the reason here.
void renderHolds(std::string& out, const kube::GateHoldBoard& board) {
  const auto s = board.state();
  if (!s.published) return;
  if (!s.holds.empty()) {
    out +=
        "<div class=\"why\" id=\"gate-holds\">kept on the Node for running pods (closed to new "
        "pods by nodegate's NoSchedule taint meanwhile): ";
    bool first = true;
    for (const auto& h : s.holds) {
      std::string pods;
      for (const auto& p : h.pods) pods += (pods.empty() ? "" : ", ") + htmlEscape(p);
      out += std::string(first ? "" : "; ") + "<code>" + htmlEscape(h.key) +
             (h.kept ? "=" + htmlEscape(*h.kept) : std::string(" absent")) + "</code> " +
             htmlEscape(h.reason) + (pods.empty() ? "" : " (" + pods + ")");
      first = false;
    }
    out += "</div>";
  }
  if (!s.pods_complete)
    out += "<div class=\"why\" id=\"pod-view\">pod view incomplete: " + htmlEscape(s.pods_why) +
           " &mdash; no label is removed until it is complete</div>";
}

// The verdict: the one question this page answers, naming what blocks the gate.
void renderVerdict(std::string& out, const Snapshot& snap, const kube::GateHoldBoard* holds) {
  std::map<std::string, const CheckResult*> result_of;
  for (const auto& c : snap.checks) result_of[c.result.check] = &c.result;
  if (!snap.complete) {
    out +=
        "<div id=\"verdict\" class=\"starting\" data-open=\"false\"><div class=\"big\">Starting: "
        "first probe cycle not finished</div><div class=\"why\">the VM gate stays closed until "
        "every check has run once</div></div>\n";
  } else if (snap.gate_open) {
    out +=
        "<div id=\"verdict\" class=\"open\" data-open=\"true\"><div class=\"big\">VM gate OPEN: "
        "VMs may be scheduled on this node</div><div class=\"why\">every required check "
        "passes</div>";
    if (holds) renderHolds(out, *holds);
    out += "</div>\n";
  } else {
    out +=
        "<div id=\"verdict\" class=\"closed\" data-open=\"false\"><div class=\"big\">VM gate "
        "CLOSED: "
        "no new VMs on this node</div><div class=\"why\">blocked by ";
    bool first = true;
    for (const auto& b : snap.gate_blockers) {
      auto it = result_of.find(b);
      std::string st = it == result_of.end() ? "MISSING"
                                             : std::string(toString(it->second->status)) + " " +
                                                   htmlEscape(it->second->reason);
      out += std::string(first ? "" : ", ") + "<a href=\"#check-" + htmlEscape(b) + "\"><code>" +
             htmlEscape(b) + "</code></a> " + st;
      first = false;
    }
    out += "</div>";
    if (holds) renderHolds(out, *holds);
    out += "</div>\n";
  }
}

}  // namespace

std::string renderPage(const Snapshot& snap, const PageInfo& info, const PageSections& sections,
                       const kube::GateHoldBoard* holds) {
  auto now = std::chrono::system_clock::now();
  // The policy in force when the snapshot was taken (a SIGHUP reload changes it).
  std::set<std::string> required(snap.gate_required.begin(), snap.gate_required.end());
  std::string out;
  out.reserve(16 * 1024);
  out +=
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
      "<meta http-equiv=\"refresh\" content=\"" +
      std::to_string(info.refresh_seconds) +
      "\">"
      "<title>nodegate " +
      htmlEscape(info.node) + ": " +
      (!snap.complete   ? "starting"
       : snap.gate_open ? "VM gate open"
                        : "VM gate CLOSED") +
      "</title><style>" + kStyle + "</style></head><body>\n";
  out += "<header><h1>nodegate &middot; " + htmlEscape(info.node) +
         "</h1><span class=\"meta\">version " + htmlEscape(info.version) + " &middot; state of " +
         timeTag(snap.taken, now) + " &middot; refreshes every " +
         std::to_string(info.refresh_seconds) + " s</span></header>\n<main>\n";

  renderVerdict(out, snap, holds);

  int counts[4] = {0, 0, 0, 0};  // indexed by severity(): PASS, WARN, UNKNOWN, FAIL
  for (const auto& c : snap.checks) counts[severity(c.result.status)]++;
  out += "<div class=\"counts\">";
  const Status order[] = {Status::Fail, Status::Unknown, Status::Warn, Status::Pass};
  for (Status s : order)
    out += "<span class=\"count\"><span class=\"badge s-" + std::string(toString(s)) + "\">" +
           std::string(toString(s)) + "</span> " + std::to_string(counts[severity(s)]) + "</span>";
  out += "</div>\n";

  std::vector<const CheckState*> sorted;
  for (const auto& c : snap.checks) sorted.push_back(&c);
  // What closes the gate first, then the worst: what an on-call engineer must act on comes
  // before what is fine.
  std::set<std::string> blockers(snap.gate_blockers.begin(), snap.gate_blockers.end());
  std::stable_sort(sorted.begin(), sorted.end(), [&](const CheckState* a, const CheckState* b) {
    bool ba = blockers.count(a->result.check), bb = blockers.count(b->result.check);
    if (ba != bb) return ba;
    int sa = severity(a->result.status), sb = severity(b->result.status);
    if (sa != sb) return sa > sb;
    return required.count(a->result.check) > required.count(b->result.check);
  });

  bool any_problem = false;
  for (const auto* c : sorted) {
    if (c->result.status == Status::Pass) continue;
    if (!any_problem) out += "<h2>Needs attention</h2>\n";
    any_problem = true;
    const CheckResult& r = c->result;
    std::string st(toString(r.status));
    const bool blocks = blockers.count(r.check) > 0;
    out += "<article class=\"check b-" + st + "\" id=\"check-" + htmlEscape(r.check) +
           "\" data-check=\"" + htmlEscape(r.check) + "\" data-status=\"" + st +
           "\" data-blocks-gate=\"" + (blocks ? "true" : "false") +
           "\"><h3><span class=\"badge s-" + st + "\">" + st + "</span><span class=\"name\">" +
           htmlEscape(r.check) + "</span>";
    if (blocks)
      out +=
          "<span class=\"req blocks\" title=\"required by the gate policy and not PASS: this "
          "keeps the gate closed\">BLOCKS THE GATE</span>";
    else if (required.count(r.check))
      out += "<span class=\"req\" title=\"the VM gate requires this check\">REQUIRED</span>";
    out += "<span class=\"reason\">" + htmlEscape(r.reason) + "</span></h3>";
    renderCheckBody(out, *c, now, info);
    out += "</article>\n";
  }
  if (!any_problem)
    out += "<h2>Needs attention</h2><p class=\"muted\">nothing: every check passes</p>\n";

  out += "<h2>Passing</h2>\n<div class=\"passing\">";
  bool any_pass = false;
  for (const auto* c : sorted) {
    if (c->result.status != Status::Pass) continue;
    any_pass = true;
    const CheckResult& r = c->result;
    out += "<details class=\"check-pass\" id=\"check-" + htmlEscape(r.check) + "\" data-check=\"" +
           htmlEscape(r.check) +
           "\" data-status=\"PASS\"><summary><span class=\"badge s-PASS\">PASS</span>"
           "<span class=\"name\">" +
           htmlEscape(r.check) + "</span>";
    if (required.count(r.check)) out += "<span class=\"req\">REQUIRED</span>";
    out += "<span class=\"muted\">" + htmlEscape(r.message) + "</span></summary>";
    renderCheckBody(out, *c, now, info);
    out += "</details>";
  }
  if (!any_pass)
    out += "<p class=\"muted\" style=\"padding:6px 12px;margin:0\">no check passes</p>";
  out += "</div>\n";

  out += sections.render(snap);
  out +=
      "</main><footer>JSON: <a href=\"/api/v1/checks\">/api/v1/checks</a> &middot; "
      "<a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a> &middot; "
      "<a href=\"/readyz\">/readyz</a> &middot; generation " +
      std::to_string(snap.generation) + "</footer></body></html>\n";
  return out;
}

}  // namespace nodegate
