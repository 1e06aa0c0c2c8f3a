#include "loop/state.h"

#include <algorithm>

#include "nodegate/runner.h"

namespace nodegate {
namespace {

bool sameEvidence(const std::vector<Evidence>& a, const std::vector<Evidence>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Evidence& x, const Evidence& y) {
                      return x.source == y.source && x.observed == y.observed;
                    });
}

bool samePublished(const CheckResult& a, const CheckResult& b) {
  return a.status == b.status && a.reason == b.reason && a.message == b.message &&
         a.hint == b.hint && a.labels == b.labels && sameEvidence(a.evidence, b.evidence);
}

}  // namespace

std::string_view toString(SinceSource s) {
  switch (s) {
    case SinceSource::Transition:
      return "transition";
    case SinceSource::Probe:
      return "probe";
    case SinceSource::AgentStart:
      return "agent-start";
  }
  return "agent-start";
}

const CheckState* StateStore::find(const std::string& check) const {
  auto it = entries_.find(check);
  return it == entries_.end() ? nullptr : &it->second.state;
}

const CheckResult* StateStore::latestRun(const std::string& check) const {
  auto it = entries_.find(check);
  return it == entries_.end() || !it->second.ran ? nullptr : &it->second.latest;
}

int dampingFor(const Config& config, const std::string& check) {
  auto it = config.damping.find(check);
  return it == config.damping.end() ? 1 : std::max(1, it->second);
}

StateStore::StateStore(std::vector<std::string> names) : order_(std::move(names)) {
  for (const auto& n : order_) {
    Entry e;
    e.state.result.check = n;
    e.state.result.reason = "NotRunYet";
    e.state.result.message = "the check has not run yet";
    e.state.result.hint = "wait for the first probe cycle";
    entries_[n] = std::move(e);
  }
}

bool StateStore::apply(const CheckResult& result, Clock::time_point now, int damping) {
  auto it = entries_.find(result.check);
  if (it == entries_.end()) {
    order_.push_back(result.check);
    it = entries_.emplace(result.check, Entry{}).first;
  }
  Entry& e = it->second;
  CheckState& st = e.state;
  st.raw_status = result.status;
  st.last_run = now;

  bool publish_new = false;
  if (!e.ran) {
    publish_new = true;
  } else if (result.status == st.result.status) {
    // Same verdict: take the fresh details (message, evidence) at once; reset any pending flip.
    publish_new = true;
    e.streak = 0;
  } else {
    if (e.streak > 0 && e.pending == result.status)
      ++e.streak;
    else {
      e.pending = result.status;
      e.streak = 1;
    }
    publish_new = e.streak >= damping;
  }

  bool changed = false;
  if (publish_new) {
    const bool status_changed = !e.ran || result.status != st.result.status;
    const bool verdict_changed = status_changed || result.reason != st.result.reason;
    changed = !e.ran || !samePublished(st.result, result);
    if (status_changed) {
      // The first result has no earlier run to date it: the probe may know (held_for), else
      // the status is at least as old as the agent's first run. A later change began between
      // the previous run and this one.
      const auto held = std::chrono::duration_cast<Clock::duration>(result.held_for);
      if (result.held_for.count() > 0) {
        st.since = now - held;
        st.since_source = SinceSource::Probe;
      } else {
        st.since = now;
        st.since_source = e.ran ? SinceSource::Transition : SinceSource::AgentStart;
      }
    }
    if (verdict_changed) {
      std::optional<Status> from;
      if (e.ran) from = st.result.status;
      st.history.push_back(Transition{now, from, result.status, result.reason});
      if (st.history.size() > CheckState::kHistory) st.history.erase(st.history.begin());
    }
    st.result = result;
    e.streak = 0;
  } else {
    st.result.metrics = result.metrics;
    st.result.duration = result.duration;
  }
  e.latest = result;
  e.ran = true;
  if (changed) ++generation_;
  return changed;
}

Snapshot StateStore::snapshot(const Config& config, Clock::time_point now) const {
  Snapshot s;
  s.complete = true;
  std::vector<CheckResult> published;
  for (const auto& name : order_) {
    const Entry& e = entries_.at(name);
    s.checks.push_back(e.state);
    s.complete &= e.ran;
    // A check that never ran is UNKNOWN for the gate, whatever its placeholder says.
    published.push_back(e.state.result);
  }
  s.gate_blockers = gateBlockers(published, config);
  s.gate_open = s.gate_blockers.empty();
  s.gate_required.assign(config.required.begin(), config.required.end());
  s.generation = generation_;
  s.taken = now;
  return s;
}

}  // namespace nodegate
