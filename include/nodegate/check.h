// The probe result model shared by every probe, the CLI, the agent and the publishers.
// Check names are kebab-case and stable: they are metric label values and API paths.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodegate {

// PASS established good; FAIL established bad; WARN degraded but usable; UNKNOWN could not decide.
// UNKNOWN never counts as PASS for the gate.
enum class Status { Pass, Warn, Fail, Unknown };

std::string_view toString(Status s);                  // "PASS", "WARN", "FAIL", "UNKNOWN"
std::optional<Status> parseStatus(std::string_view);  // inverse of toString, case-insensitive

// Ordering for "the worst finding wins": PASS < WARN < UNKNOWN < FAIL. UNKNOWN ranks above WARN
// because an undecided check must not hide behind a merely degraded one.
int severity(Status s);

// One observation that supports the verdict: where it was read and what was seen there.
struct Evidence {
  std::string source;    // "/proc/cpuinfo flags", "ioctl KVM_GET_API_VERSION"
  std::string observed;  // "vmx present", "12"
};

// A gauge the probe wants exported (domain metrics such as nodegate_lvm_vg_free_bytes).
// Names carry the full nodegate_ prefix and base units; label sets must stay bounded.
struct MetricSample {
  std::string name;
  std::string help;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct CheckResult {
  std::string check;  // probe name, e.g. "kvm-device"
  Status status = Status::Unknown;
  std::string reason;   // CamelCase, stable: "DeviceMissing"
  std::string message;  // one line for humans
  std::string hint;     // remediation; required on every non-PASS result
  std::vector<Evidence> evidence;
  // Node labels this check contributes, keyed by the name below the prefix ("kvm" -> "true").
  std::map<std::string, std::string> labels;
  std::vector<MetricSample> metrics;
  std::chrono::nanoseconds duration{0};
  // How long before this run the probe knows the reported condition has held (time-sync knows
  // how long the clock has been unsynchronised); 0 when it cannot tell. The agent dates the
  // status from it when it first sees the status (CheckState::since).
  std::chrono::duration<double> held_for{0};
};

// Convenience builders used by evaluators; they keep the "hint on every non-PASS" rule in one
// place.
CheckResult makeResult(std::string check, Status status, std::string reason, std::string message,
                       std::string hint = {});

}  // namespace nodegate
