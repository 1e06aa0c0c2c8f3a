#include "time_sync.h"

#include <sys/stat.h>
#include <sys/timex.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include "nodegate/log.h"
#include "text.h"

namespace nodegate {
namespace {

constexpr const char* kName = kTimeSyncCheck;
// The kernel caps the maximum error at NTP_PHASE_LIMIT and sets STA_UNSYNC when it gets there.
constexpr long kMaxErrorCapUs = 16000000;
// Without discipline the kernel grows maxerror by MAXFREQ, 500 us per second.
constexpr double kMaxErrorGrowthPerS = 500e-6;

std::string seconds(double s) {
  char buf[64];
  if (std::fabs(s) < 1)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

std::string duration(double s) {
  char buf[64];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  return buf;
}

const char* stateName(int state) {
  switch (state) {
    case TIME_OK:
      return "TIME_OK";
    case TIME_INS:
      return "TIME_INS";
    case TIME_DEL:
      return "TIME_DEL";
    case TIME_OOP:
      return "TIME_OOP";
    case TIME_WAIT:
      return "TIME_WAIT";
    case TIME_ERROR:
      return "TIME_ERROR";
  }
  return "unknown";
}

// Every property read reports its type when it is the wrong one: a bus that answers with
// something else is a misbehaving peer, not an unsynchronised clock.
Result<std::optional<bool>> boolProperty(const DBusProperties& props, const std::string& key) {
  auto it = props.find(key);
  if (it == props.end()) return std::optional<bool>{};
  if (const bool* b = std::get_if<bool>(&it->second.value)) return std::optional<bool>{*b};
  return Error{EPROTO, "failed to read timedate1 property " + key + ": type is '" +
                           it->second.signature + "', expected 'b'"};
}

std::optional<double> readUptime(const HostRoot& host) {
  auto text = readFile(host.proc("uptime"), 4096);
  if (!text) return std::nullopt;
  std::string first;
  forEachWord(trim(*text), [&](std::string_view w) {
    if (first.empty()) first = std::string(w);
  });
  char* end = nullptr;
  double v = std::strtod(first.c_str(), &end);
  if (first.empty() || end == first.c_str() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

SettingSpec busSetting(std::string check) {
  return derivedDefault(
      textSetting(std::move(check), "bus", "", "D-Bus address (\"unix:path=...\") or socket path"),
      "the host's <rootfs>/run/dbus/system_bus_socket");
}

std::string probeBusAddress(const HostRoot& host, const Config& cfg, const SettingSpec& setting) {
  std::string bus = cfg.text(setting, "");
  // A D-Bus address always has "transport:key=value"; a bare path has no '='.
  if (bus.find('=') != std::string::npos) return bus;
  std::string path = bus.empty() ? host.root("run/dbus/system_bus_socket") : bus;
  std::string out = "unix:path=";
  for (unsigned char c : path) {
    bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 c == '-' || c == '_' || c == '/' || c == '.' || c == '\\' || c == '*';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02x", c);
      out += buf;
    }
  }
  return out;
}

std::optional<std::string> busSocketPath(std::string_view address) {
  constexpr std::string_view kPrefix = "unix:path=";
  if (address.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view rest = address.substr(kPrefix.size());
  // More keys (",guid=") or fallback addresses (";") are left to the connection attempt.
  if (rest.empty() || rest.find_first_of(",;") != std::string_view::npos) return std::nullopt;
  std::string path;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] != '%') {
      path += rest[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= rest.size() || hex(rest[i + 1]) < 0 || hex(rest[i + 2]) < 0) return std::nullopt;
    path += static_cast<char>(hex(rest[i + 1]) * 16 + hex(rest[i + 2]));
    i += 2;
  }
  return path;
}

std::optional<Error> busSocketMissing(const std::string& address) {
  auto path = busSocketPath(address);
  if (!path) return std::nullopt;
  struct stat st {};
  if (::stat(path->c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return std::nullopt;
  return Error{ENOTCONN, "failed to connect to " + address + ": " + *path +
                             " does not exist (no bus runs there)"};
}

std::chrono::milliseconds probeBusTimeout(const Config& cfg, std::string_view probe) {
  double s = cfg.hasProbeTimeout(probe) ? std::min(cfg.probeTimeout(probe), 30.0) : 1.0;
  return std::chrono::milliseconds(static_cast<long>(s * 1000));
}

Result<TimedateInfo> parseTimedate(const DBusProperties& props) {
  TimedateInfo info;
  auto synced = boolProperty(props, "NTPSynchronized");
  if (!synced) return synced.error();
  if (!synced->has_value())
    return Error{ENOENT, "failed to read timedate1 property NTPSynchronized: not present"};
  info.ntp_synchronized = **synced;
  auto ntp = boolProperty(props, "NTP");
  if (!ntp) return ntp.error();
  info.ntp = *ntp;
  if (auto it = props.find("Timezone"); it != props.end()) {
    const auto* tz = std::get_if<std::string>(&it->second.value);
    if (!tz || it->second.signature != "s")
      return Error{EPROTO, "failed to read timedate1 property Timezone: type is '" +
                               it->second.signature + "', expected 's'"};
    info.timezone = *tz;
  }
  return info;
}

TimexInfo interpretTimex(const KernelTimex& tx) {
  TimexInfo t;
  t.state = tx.state;
  t.status = tx.status;
  t.sta_unsync = (tx.status & STA_UNSYNC) != 0;
  t.synchronized = !t.sta_unsync || tx.maxerror_us < kMaxErrorCapUs;
  t.max_error_s = static_cast<double>(tx.maxerror_us) / 1e6;
  t.est_error_s = static_cast<double>(tx.esterror_us) / 1e6;
  t.offset_s = static_cast<double>(tx.offset) / ((tx.status & STA_NANO) ? 1e9 : 1e6);
  return t;
}

double unsyncedBefore(const TimexInfo& tx, std::optional<double> uptime_s) {
  if (tx.synchronized || tx.max_error_s * 1e6 < kMaxErrorCapUs) return 0;
  double growth = static_cast<double>(kMaxErrorCapUs) / 1e6 / kMaxErrorGrowthPerS;
  return uptime_s ? std::min(*uptime_s, growth) : 0;
}

double UnsyncedClock::observe(bool synchronized, std::chrono::steady_clock::time_point now,
                              double prior_s) {
  if (synchronized) {
    since_.reset();
    return 0;
  }
  if (!since_) {
    since_ = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(std::max(0.0, prior_s)));
  }
  return std::chrono::duration<double>(now - *since_).count();
}

CheckResult evaluateTimeSync(const TimeSyncInputs& in, const TimeSyncPolicy& policy) {
  const bool have_bus = in.timedate.has_value();
  const bool have_kernel = in.kernel.has_value();
  if (!have_bus && !have_kernel) {
    auto r = makeResult(kName, Status::Unknown, "NoTimeSource",
                        "neither timedate1 nor adjtimex could be read",
                        "mount the host's D-Bus system socket (checks.time-sync.bus) and allow "
                        "the adjtimex syscall (seccomp)");
    r.evidence.push_back({"timedate1", in.timedate_error});
    r.evidence.push_back({"adjtimex", in.kernel_error});
    return r;
  }

  // The kernel is authoritative about its own clock; timedate1 decides only when it is alone.
  const bool synced = have_kernel ? in.kernel->synchronized : in.timedate->ntp_synchronized;
  const bool ntp_off = have_bus && in.timedate->ntp.has_value() && !*in.timedate->ntp;
  const std::string fix_ntp =
      ntp_off ? "enable NTP on the host: timedatectl set-ntp true"
              : "check the host's NTP daemon and its servers (chronyc tracking, "
                "timedatectl timesync-status, ntpq -p)";

  CheckResult r;
  if (!synced) {
    std::string msg = "clock not synchronised for " + duration(in.unsynced_for_s);
    if (have_bus && have_kernel && in.timedate->ntp_synchronized)
      msg += " (timedate1 says synchronised, the kernel does not)";
    if (ntp_off) msg += "; NTP is disabled";
    if (in.unsynced_for_s >= policy.grace_s) {
      r = makeResult(kName, Status::Fail, "NotSynchronized",
                     msg + " (grace " + duration(policy.grace_s) + ")", fix_ntp);
    } else {
      r = makeResult(kName, Status::Warn, "NotSynchronizedYet",
                     msg + ", within the grace of " + duration(policy.grace_s), fix_ntp);
    }
    // FAIL began when the grace ran out, WARN when the clock lost sync.
    r.held_for = std::chrono::duration<double>(
        r.status == Status::Fail ? in.unsynced_for_s - policy.grace_s : in.unsynced_for_s);
  } else if (have_kernel && in.kernel->max_error_s >= policy.max_error_s) {
    r = makeResult(kName, Status::Warn, "MaxErrorHigh",
                   "clock synchronised but its maximum error is " +
                       seconds(in.kernel->max_error_s) + " (threshold " +
                       seconds(policy.max_error_s) + ")",
                   fix_ntp + "; a large error usually means the NTP servers are unreachable");
  } else if (have_bus && have_kernel && !in.timedate->ntp_synchronized) {
    r = makeResult(kName, Status::Warn, "SourcesDisagree",
                   "the kernel says synchronised, timedate1 says not",
                   "compare timedatectl with adjtimex --print on the host");
  } else if (!have_bus) {
    r = makeResult(kName, Status::Warn, "TimedateUnavailable",
                   "kernel clock synchronised; timedate1 unreadable: " + in.timedate_error,
                   "mount the host's D-Bus system socket and point checks.time-sync.bus at it");
  } else if (!have_kernel) {
    r = makeResult(kName, Status::Warn, "KernelClockUnreadable",
                   "timedate1 says synchronised; adjtimex unreadable: " + in.kernel_error,
                   "allow the adjtimex syscall in the container's seccomp profile");
  } else {
    r = makeResult(kName, Status::Pass, "Synchronized",
                   "clock synchronised, maximum error " + seconds(in.kernel->max_error_s));
  }

  if (have_bus) {
    r.evidence.push_back(
        {"timedate1 NTPSynchronized", in.timedate->ntp_synchronized ? "true" : "false"});
    if (in.timedate->ntp)
      r.evidence.push_back({"timedate1 NTP", *in.timedate->ntp ? "true" : "false"});
    if (!in.timedate->timezone.empty())
      r.evidence.push_back({"timedate1 Timezone", in.timedate->timezone});
  } else {
    r.evidence.push_back({"timedate1", in.timedate_error});
  }
  if (have_kernel) {
    const auto& k = *in.kernel;
    r.evidence.push_back(
        {"adjtimex state", std::string(stateName(k.state)) + " (" + std::to_string(k.state) + ")"});
    r.evidence.push_back({"adjtimex STA_UNSYNC", k.sta_unsync ? "set" : "clear"});
    r.evidence.push_back({"adjtimex maxerror", seconds(k.max_error_s)});
    r.evidence.push_back({"adjtimex esterror", seconds(k.est_error_s)});
    r.evidence.push_back({"adjtimex offset", seconds(k.offset_s)});
  } else {
    r.evidence.push_back({"adjtimex", in.kernel_error});
  }

  r.metrics.push_back({"nodegate_time_synchronized",
                       "1 when the host clock is synchronised (kernel, else timedate1)",
                       {},
                       synced ? 1.0 : 0.0});
  if (have_kernel) {
    r.metrics.push_back({"nodegate_time_max_error_seconds",
                         "Kernel clock maximum error bound (adjtimex maxerror)",
                         {},
                         in.kernel->max_error_s});
    r.metrics.push_back({"nodegate_time_offset_seconds",
                         "Kernel clock offset being corrected (adjtimex offset)",
                         {},
                         in.kernel->offset_s});
  }
  return r;
}

TimeSyncProbe::TimeSyncProbe(std::shared_ptr<DBus> dbus, std::shared_ptr<KernelClock> clock)
    : dbus_(std::move(dbus)), clock_(std::move(clock)) {}

CheckResult TimeSyncProbe::run(const ProbeContext& ctx) {
  TimeSyncInputs in;
  const std::string address = probeBusAddress(ctx.host, ctx.config, kTimeSyncBusSetting);
  const auto timeout = probeBusTimeout(ctx.config, kName);

  if (!dbus_) {
    in.timedate_error = "no D-Bus seam configured";
  } else if (auto absent = busSocketMissing(address)) {
    in.timedate_error = absent->message;
  } else {
    const std::string key = address + "|" + std::to_string(timeout.count());
    if (!client_ || client_key_ != key) {
      client_ = dbus_->client(address, timeout);
      client_key_ = key;
    }
    auto props = client_->getAll(kTimedateService, kTimedatePath, kTimedateService);
    if (!props) {
      in.timedate_error = props.error().message;
    } else if (auto info = parseTimedate(*props); !info) {
      in.timedate_error = info.error().message;
    } else {
      in.timedate = *info;
    }
  }

  if (!clock_) {
    in.kernel_error = "no kernel clock seam configured";
  } else if (auto tx = clock_->adjtimex(); !tx) {
    in.kernel_error = tx.error().message;
  } else {
    in.kernel = interpretTimex(*tx);
  }

  bool synced = in.kernel ? in.kernel->synchronized : in.timedate && in.timedate->ntp_synchronized;
  if (in.kernel || in.timedate) {
    double prior = in.kernel ? unsyncedBefore(*in.kernel, readUptime(ctx.host)) : 0;
    in.unsynced_for_s = unsynced_.observe(synced, std::chrono::steady_clock::now(), prior);
  }

  TimeSyncPolicy policy;
  policy.max_error_s = ctx.config.number(kTimeSyncMaxErrorSetting);
  policy.grace_s = ctx.config.number(kTimeSyncGraceSetting);
  auto r = evaluateTimeSync(in, policy);
  r.evidence.insert(r.evidence.begin(), {"bus", address});
  return r;
}

}  // namespace nodegate
