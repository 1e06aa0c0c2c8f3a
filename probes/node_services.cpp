#include "node_services.h"

#include <algorithm>
#include <cerrno>

#include "time_sync.h"

namespace nodegate {
namespace {

constexpr const char* kName = kNodeServicesCheck;
constexpr const char* kSystemd = "org.freedesktop.systemd1";
constexpr const char* kSystemdPath = "/org/freedesktop/systemd1";
constexpr const char* kManager = "org.freedesktop.systemd1.Manager";
constexpr const char* kUnitIface = "org.freedesktop.systemd1.Unit";
constexpr const char* kServiceIface = "org.freedesktop.systemd1.Service";

Result<std::string> stringProperty(const DBusProperties& props, const std::string& unit,
                                   const std::string& key) {
  auto it = props.find(key);
  if (it == props.end())
    return Error{ENOENT, "failed to read " + unit + " property " + key + ": not present"};
  const auto* s = std::get_if<std::string>(&it->second.value);
  if (!s || it->second.signature != "s")
    return Error{EPROTO, "failed to read " + unit + " property " + key + ": type is '" +
                             it->second.signature + "', expected 's'"};
  return *s;
}

// Errors that say the bus or systemd itself is unreachable: asking about the next unit would
// only wait for the same timeout again.
bool busLevel(const Error& e) {
  return e.code == ENOTCONN || e.code == ETIMEDOUT || e.code == ESRCH;
}

}  // namespace

Result<UnitState> parseUnitState(const std::string& name, const DBusProperties& unit,
                                 const DBusProperties* service) {
  UnitState st;
  st.name = name;
  auto load = stringProperty(unit, name, "LoadState");
  if (!load) return load.error();
  auto active = stringProperty(unit, name, "ActiveState");
  if (!active) return active.error();
  auto sub = stringProperty(unit, name, "SubState");
  if (!sub) return sub.error();
  st.load_state = *load;
  st.active_state = *active;
  st.sub_state = *sub;
  if (service) {
    if (auto it = service->find("NRestarts"); it != service->end()) {
      const auto* n = std::get_if<std::uint64_t>(&it->second.value);
      if (!n || it->second.signature != "u")
        return Error{EPROTO, "failed to read " + name + " property NRestarts: type is '" +
                                 it->second.signature + "', expected 'u'"};
      st.n_restarts = *n;
    }
  }
  return st;
}

std::optional<std::uint64_t> RestartHistory::observe(std::uint64_t n_restarts,
                                                     std::chrono::steady_clock::time_point now,
                                                     std::chrono::seconds window) {
  if (!samples_.empty() && n_restarts < samples_.back().second) samples_.clear();
  const bool first = samples_.empty();
  samples_.emplace_back(now, n_restarts);
  // Keep one sample at or before the window's start as the baseline; drop older ones.
  while (samples_.size() > 1 && samples_[1].first <= now - window) samples_.pop_front();
  if (first) return std::nullopt;
  return n_restarts - samples_.front().second;
}

CheckResult evaluateNodeServices(const std::vector<UnitReport>& units,
                                 const NodeServicesPolicy& policy) {
  struct Finding {
    Status status;
    std::string reason, message, hint;
  };
  std::vector<Finding> findings;
  std::vector<Evidence> evidence;
  std::vector<MetricSample> metrics;
  std::vector<std::string> healthy;

  for (const auto& u : units) {
    if (!u.state) {
      findings.push_back({Status::Unknown, "UnitUnreadable", u.error,
                          "mount the host's D-Bus system socket (checks.node-services.bus) and "
                          "check that systemd answers: systemctl status " +
                              u.name});
      evidence.push_back({u.name, u.error});
      continue;
    }
    const UnitState& s = *u.state;
    std::string seen = s.load_state + " " + s.active_state + "/" + s.sub_state;
    if (s.n_restarts) {
      seen += ", " + std::to_string(*s.n_restarts) + " restarts";
      if (u.restarts_in_window)
        seen += " (" + std::to_string(*u.restarts_in_window) + " in window)";
    }
    evidence.push_back({u.name, seen});
    if (s.load_state == "loaded") {
      metrics.push_back({"nodegate_node_service_active",
                         "1 when the systemd unit is active",
                         {{"unit", u.name}},
                         s.active_state == "active" ? 1.0 : 0.0});
      if (s.n_restarts)
        metrics.push_back({"nodegate_node_service_restarts",
                           "Automatic restarts of the systemd service (NRestarts)",
                           {{"unit", u.name}},
                           static_cast<double>(*s.n_restarts)});
    }

    const std::string inspect = "systemctl status " + u.name + "; journalctl -u " + u.name;
    if (s.load_state == "not-found") {
      findings.push_back({Status::Warn, "UnitNotFound", u.name + " is not installed",
                          "set checks.node-services.units to this node's kubelet and runtime "
                          "units"});
      continue;
    }
    if (s.load_state != "loaded") {
      findings.push_back({Status::Warn, "UnitNotLoaded", u.name + " is " + s.load_state, inspect});
      continue;
    }
    if (s.active_state == "failed" || s.active_state == "inactive") {
      findings.push_back({Status::Fail, s.active_state == "failed" ? "UnitFailed" : "UnitInactive",
                          u.name + " is " + s.active_state + " (" + s.sub_state + ")", inspect});
      continue;
    }
    if (u.restarts_in_window && *u.restarts_in_window > policy.max_restarts) {
      findings.push_back({Status::Warn, "UnitRestarting",
                          u.name + " restarted " + std::to_string(*u.restarts_in_window) +
                              " times in " + std::to_string(policy.window.count()) + " s",
                          "find why it keeps restarting: " + inspect});
      continue;
    }
    if (s.active_state != "active") {
      findings.push_back({Status::Warn, "UnitTransitioning",
                          u.name + " is " + s.active_state + " (" + s.sub_state + ")", inspect});
      continue;
    }
    healthy.push_back(u.name + " " + s.active_state + " (" + s.sub_state + ")");
  }

  CheckResult r;
  if (findings.empty()) {
    std::string msg;
    for (const auto& h : healthy) msg += (msg.empty() ? "" : ", ") + h;
    r = makeResult(kName, Status::Pass, "ServicesRunning",
                   msg.empty() ? "no units configured" : msg);
  } else {
    const Finding* worst = &findings.front();
    for (const auto& f : findings)
      if (severity(f.status) > severity(worst->status)) worst = &f;
    // Units that failed for one reason (the bus is down) say it once.
    std::string msg = worst->message;
    for (const auto& f : findings)
      if (&f != worst && msg.find(f.message) == std::string::npos) msg += "; " + f.message;
    r = makeResult(kName, worst->status, worst->reason, msg, worst->hint);
  }
  r.evidence = std::move(evidence);
  r.metrics = std::move(metrics);
  return r;
}

NodeServicesProbe::NodeServicesProbe(std::shared_ptr<DBus> dbus) : dbus_(std::move(dbus)) {}

UnitReport NodeServicesProbe::readUnit(const std::string& unit, const NodeServicesPolicy& policy) {
  UnitReport rep;
  rep.name = unit;
  auto path = client_->callForPath(kSystemd, kSystemdPath, kManager, "LoadUnit", unit);
  if (!path) {
    rep.error = path.error().message;
    rep.error_code = path.error().code;
    return rep;
  }
  auto props = client_->getAll(kSystemd, *path, kUnitIface);
  if (!props) {
    rep.error = props.error().message;
    rep.error_code = props.error().code;
    return rep;
  }
  std::optional<DBusProperties> service;
  bool is_service = unit.size() > 8 && unit.compare(unit.size() - 8, 8, ".service") == 0;
  auto load = props->find("LoadState");
  bool loaded = load != props->end() && std::get_if<std::string>(&load->second.value) &&
                std::get<std::string>(load->second.value) == "loaded";
  if (is_service && loaded) {
    auto sp = client_->getAll(kSystemd, *path, kServiceIface);
    if (!sp) {
      rep.error = sp.error().message;
      rep.error_code = sp.error().code;
      return rep;
    }
    service = std::move(*sp);
  }
  auto st = parseUnitState(unit, *props, service ? &*service : nullptr);
  if (!st) {
    rep.error = st.error().message;
    rep.error_code = st.error().code;
    return rep;
  }
  if (st->n_restarts)
    rep.restarts_in_window =
        history_[unit].observe(*st->n_restarts, std::chrono::steady_clock::now(), policy.window);
  rep.state = std::move(*st);
  return rep;
}

CheckResult NodeServicesProbe::run(const ProbeContext& ctx) {
  const std::string address = probeBusAddress(ctx.host, ctx.config, kNodeServicesBusSetting);
  const auto timeout = probeBusTimeout(ctx.config, kName);
  if (!dbus_)
    return makeResult(kName, Status::Unknown, "NoDBus", "no D-Bus seam configured",
                      "run nodegate with its production seams");
  // No socket, no bus: every unit is unreadable for that one reason, known without a client.
  std::optional<std::string> bus_down;  // set after a bus-level error: skip further calls
  if (auto absent = busSocketMissing(address)) {
    bus_down = absent->message;
  } else {
    const std::string key = address + "|" + std::to_string(timeout.count());
    if (!client_ || client_key_ != key) {
      client_ = dbus_->client(address, timeout);
      client_key_ = key;
      history_.clear();
    }
  }

  NodeServicesPolicy policy;
  policy.max_restarts =
      static_cast<std::uint64_t>(ctx.config.number(kNodeServicesMaxRestartsSetting));
  policy.window =
      std::chrono::seconds(static_cast<long>(ctx.config.number(kNodeServicesWindowSetting)));

  std::vector<UnitReport> reports;
  auto read = [&](const std::string& unit) {
    if (bus_down) {
      UnitReport rep;
      rep.name = unit;
      rep.error = *bus_down;
      return rep;
    }
    auto rep = readUnit(unit, policy);
    if (!rep.state && busLevel(Error{rep.error_code, rep.error})) bus_down = rep.error;
    return rep;
  };

  auto units = ctx.config.list(kNodeServicesUnitsSetting, {});
  if (!units.empty()) {
    for (const auto& u : units) reports.push_back(read(u));
  } else {
    reports.push_back(read("kubelet.service"));
    // The runtime: containerd when installed, else CRI-O; report containerd when neither is.
    auto containerd = read("containerd.service");
    bool have_containerd = containerd.state && containerd.state->load_state == "loaded";
    if (have_containerd || !containerd.state) {
      reports.push_back(std::move(containerd));
    } else {
      auto crio = read("crio.service");
      bool have_crio = crio.state && crio.state->load_state == "loaded";
      reports.push_back(have_crio || !crio.state ? std::move(crio) : std::move(containerd));
    }
  }
  auto r = evaluateNodeServices(reports, policy);
  r.evidence.insert(r.evidence.begin(), {"bus", address});
  return r;
}

}  // namespace nodegate
