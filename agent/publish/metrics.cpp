#include "publish/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include <prometheus/text_serializer.h>

#include "nodegate/log.h"
#include "nodegate/version.h"

namespace nodegate {

std::string serializeMetrics(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

namespace {

double seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

prometheus::Family<prometheus::Gauge>& gauge(prometheus::Registry& r, const char* name,
                                             const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

constexpr Status kStatuses[] = {Status::Pass, Status::Warn, Status::Fail, Status::Unknown};

}  // namespace

MetricsPublisher::MetricsPublisher(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      success_(gauge(*registry_, "nodegate_check_success",
                     "1 when the check's published status is PASS, else 0.")),
      status_(gauge(*registry_, "nodegate_check_status",
                    "State set of the check's published status (PASS, WARN, FAIL, UNKNOWN).")),
      duration_(gauge(*registry_, "nodegate_check_duration_seconds",
                      "How long the check's last run took.")),
      last_run_(gauge(*registry_, "nodegate_check_last_run_timestamp_seconds",
                      "Unix time the check last finished a run.")),
      last_change_(gauge(*registry_, "nodegate_check_last_change_timestamp_seconds",
                         "Unix time the check's published status last changed.")),
      info_(gauge(*registry_, "nodegate_check_info",
                  "Always 1: the check's published status and reason, and whether the gate "
                  "policy requires it (required=\"true\"|\"false\").")),
      gate_(gauge(*registry_, "nodegate_gate_open",
                  "1 while every check the policy requires passes (VMs may be scheduled).")
                .Add({})) {
  gauge(*registry_, "nodegate_build_info", "Build of the running agent; always 1.")
      .Add({{"version", kVersion}})
      .Set(1);
}

prometheus::Family<prometheus::Gauge>* MetricsPublisher::domainFamily(const std::string& name,
                                                                      const std::string& help) {
  if (auto it = domain_.find(name); it != domain_.end()) return it->second;
  try {
    auto& fam = prometheus::BuildGauge()
                    .Name(name)
                    .Help(help.empty() ? "Reported by a nodegate probe." : help)
                    .Register(*registry_);
    domain_[name] = &fam;
    return &fam;
  } catch (const std::exception& e) {
    // A bad name, or a name already registered with another type or help by someone else.
    if (warned_.insert(name).second)
      log::warn("failed to register probe metric", {{"metric", name}, {"error", e.what()}});
    return nullptr;
  }
}

void MetricsPublisher::releaseSeries(const SeriesKey& key) {
  auto fit = domain_.find(key.first);
  if (fit == domain_.end()) return;
  auto* fam = fit->second;
  if (fam->Has(key.second)) fam->Remove(&fam->Add(key.second));
  if (--domain_series_[key.first] <= 0) {
    // An empty family would still print HELP/TYPE lines: drop it until a probe reports it again.
    registry_->Remove(*fam);
    domain_.erase(fit);
    domain_series_.erase(key.first);
  }
}

void MetricsPublisher::publish(const Snapshot& snap) {
  std::lock_guard lock(mu_);
  for (const auto& st : snap.checks) {
    const CheckResult& r = st.result;
    prometheus::Labels l{{"check", r.check}};
    success_.Add(l).Set(r.status == Status::Pass ? 1 : 0);
    for (Status s : kStatuses)
      status_.Add({{"check", r.check}, {"status", std::string(toString(s))}})
          .Set(r.status == s ? 1 : 0);
    duration_.Add(l).Set(std::chrono::duration<double>(r.duration).count());
    last_run_.Add(l).Set(seconds(st.last_run));
    last_change_.Add(l).Set(seconds(st.since));
    const bool required =
        std::binary_search(snap.gate_required.begin(), snap.gate_required.end(), r.check);
    prometheus::Labels info{{"check", r.check},
                            {"status", std::string(toString(r.status))},
                            {"reason", r.reason},
                            {"required", required ? "true" : "false"}};
    auto& old_info = info_labels_[r.check];
    if (old_info != info) {
      if (!old_info.empty() && info_.Has(old_info)) info_.Remove(&info_.Add(old_info));
      info_.Add(info).Set(1);
      old_info = std::move(info);
    }

    std::set<SeriesKey> now;
    for (const auto& m : r.metrics) {
      prometheus::Labels labels(m.labels.begin(), m.labels.end());
      auto* fam = domainFamily(m.name, m.help);
      if (!fam) continue;
      try {
        fam->Add(labels).Set(m.value);
        now.insert({m.name, std::move(labels)});
      } catch (const std::exception& e) {
        if (warned_.insert(m.name + "/labels").second)
          log::warn("failed to export probe metric",
                    {{"check", r.check}, {"metric", m.name}, {"error", e.what()}});
        if (domain_series_[m.name] == 0) {
          registry_->Remove(*fam);
          domain_.erase(m.name);
        }
      }
    }
    auto& before = reported_[r.check];
    for (const auto& key : now)
      if (!before.count(key)) ++domain_series_[key.first];
    for (const auto& key : before)
      if (!now.count(key)) releaseSeries(key);
    before = std::move(now);
  }
  gate_.Set(snap.gate_open ? 1 : 0);
}

Result<ProcessStats> readProcessStats(const HostRoot& self) {
  ProcessStats st;
  auto stat = readFile(self.proc("self/stat"));
  if (!stat) return stat.error();
  // The command name may contain spaces and parentheses: fields start after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return Error{EINVAL, "failed to parse self/stat: no ')'"};
  std::istringstream in(stat->substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string w; in >> w;) f.push_back(w);
  if (f.size() < 22) return Error{EINVAL, "failed to parse self/stat: too few fields"};
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  st.cpu_seconds =
      (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) / tick;
  double start_ticks = std::strtod(f[19].c_str(), nullptr);
  st.virtual_bytes = std::strtod(f[20].c_str(), nullptr);
  st.resident_bytes = std::strtod(f[21].c_str(), nullptr) * page;

  if (auto s = readFile(self.proc("stat"))) {
    auto pos = s->find("\nbtime ");
    if (pos != std::string::npos)
      st.start_time_seconds = std::strtod(s->c_str() + pos + 7, nullptr) + start_ticks / tick;
  }
  if (DIR* d = ::opendir(self.proc("self/fd").c_str())) {
    int n = 0;
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
    st.open_fds = n - 1;  // minus the directory handle itself
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) st.max_fds = static_cast<double>(lim.rlim_cur);
  return st;
}

ProcessMetrics::ProcessMetrics(prometheus::Registry& registry, HostRoot self)
    : self_(std::move(self)),
      rss_(gauge(registry, "process_resident_memory_bytes", "Resident memory size in bytes.")
               .Add({})),
      vsize_(
          gauge(registry, "process_virtual_memory_bytes", "Virtual memory size in bytes.").Add({})),
      cpu_(prometheus::BuildCounter()
               .Name("process_cpu_seconds_total")
               .Help("Total user and system CPU time spent in seconds.")
               .Register(registry)
               .Add({})),
      fds_(gauge(registry, "process_open_fds", "Number of open file descriptors.").Add({})),
      max_fds_(
          gauge(registry, "process_max_fds", "Maximum number of open file descriptors.").Add({})),
      start_(gauge(registry, "process_start_time_seconds",
                   "Start time of the process since unix epoch in seconds.")
                 .Add({})) {
  refresh();
}

void ProcessMetrics::refresh() {
  std::lock_guard lock(mu_);
  auto st = readProcessStats(self_);
  if (!st) {
    log::debug("failed to read process stats", {{"error", st.error().message}});
    return;
  }
  rss_.Set(st->resident_bytes);
  vsize_.Set(st->virtual_bytes);
  if (st->cpu_seconds > cpu_seen_) {
    cpu_.Increment(st->cpu_seconds - cpu_seen_);
    cpu_seen_ = st->cpu_seconds;
  }
  fds_.Set(st->open_fds);
  max_fds_.Set(st->max_fds);
  start_.Set(st->start_time_seconds);
}

}  // namespace nodegate
