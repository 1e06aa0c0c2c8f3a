// Prometheus metrics of the agent. There is ONE prometheus::Registry per agent (AgentServices
// hands it out, agent/extension.h); /metrics serializes it with prometheus::TextSerializer inside
// our own civetweb handler, so there is one HTTP server and no prometheus-cpp Exposer.
//
// Extension point: any component may add families to the shared registry at start-up, e.g.
//   auto& f = prometheus::BuildCounter().Name("nodegate_dns_queries_total").Help("...")
//                 .Register(*services.registry);
// and update them from any thread (prometheus-cpp metrics are thread-safe). Names carry the
// nodegate_ prefix, base units, `_total` on counters, bounded label sets (DESIGN.md).
//
// What this file exports itself (documented contract):
//   nodegate_check_success{check}                     1 when the published status is PASS
//   nodegate_check_status{check,status}               state set, status in PASS|WARN|FAIL|UNKNOWN
//   nodegate_check_duration_seconds{check}            duration of the last run
//   nodegate_check_last_run_timestamp_seconds{check}  when the probe last finished
//   nodegate_check_last_change_timestamp_seconds{check} when the published status last changed
//   nodegate_check_info{check,status,reason,required} always 1: the published verdict's reason,
//                                                     and whether the policy in force requires
//                                                     the check ("true"/"false"); one series per
//                                                     check, replaced when any label changes
//   nodegate_gate_open                                1 when every required check passes
//   nodegate_build_info{version}                      always 1
//   every CheckResult::metrics sample as a gauge (family created on first sight; a label set a
//   probe stops reporting is removed; a family with no series left is dropped)
//   process_resident_memory_bytes, process_virtual_memory_bytes, process_cpu_seconds_total,
//   process_open_fds, process_max_fds, process_start_time_seconds: the standard process metric
//   names (same as every Prometheus client library), read from the agent's own procfs at scrape.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "nodegate/host_root.h"
#include "nodegate/result.h"
#include "nodegate/snapshot.h"

namespace nodegate {

// The text exposition of a registry (what GET /metrics returns).
std::string serializeMetrics(const prometheus::Registry& registry);

// Turns snapshots into the check/gate/domain gauges above. Thread-safe.
class MetricsPublisher final : public Publisher {
 public:
  explicit MetricsPublisher(std::shared_ptr<prometheus::Registry> registry);
  void publish(const Snapshot& snapshot) override;

 private:
  using SeriesKey = std::pair<std::string, prometheus::Labels>;  // family name, labels
  prometheus::Family<prometheus::Gauge>* domainFamily(const std::string& name,
                                                      const std::string& help);
  void releaseSeries(const SeriesKey& key);

  std::mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& success_;
  prometheus::Family<prometheus::Gauge>& status_;
  prometheus::Family<prometheus::Gauge>& duration_;
  prometheus::Family<prometheus::Gauge>& last_run_;
  prometheus::Family<prometheus::Gauge>& last_change_;
  prometheus::Family<prometheus::Gauge>& info_;
  std::map<std::string, prometheus::Labels> info_labels_;  // check -> its current info series
  prometheus::Gauge& gate_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> domain_;
  std::map<std::string, int> domain_series_;             // family name -> live series count
  std::map<std::string, std::set<SeriesKey>> reported_;  // check -> series it reported last
  std::set<std::string> warned_;                         // bad names already logged once
};

// What the agent knows about its own process. Read through a HostRoot so tests can feed a
// captured procfs; production passes HostRoot("/") (the agent's own /proc, not --host-root).
struct ProcessStats {
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double cpu_seconds = 0;
  double open_fds = 0;
  double max_fds = 0;
  double start_time_seconds = 0;
};
Result<ProcessStats> readProcessStats(const HostRoot& self);

// The process_* families, refreshed on every scrape (cheap: three small procfs reads).
class ProcessMetrics {
 public:
  ProcessMetrics(prometheus::Registry& registry, HostRoot self);
  void refresh();

 private:
  std::mutex mu_;
  HostRoot self_;
  prometheus::Gauge& rss_;
  prometheus::Gauge& vsize_;
  prometheus::Counter& cpu_;
  prometheus::Gauge& fds_;
  prometheus::Gauge& max_fds_;
  prometheus::Gauge& start_;
  double cpu_seen_ = 0;
};

}  // namespace nodegate
