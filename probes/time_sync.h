// time-sync: is the host clock synchronised, and how far off can it be?
// Two sources, read on every run: org.freedesktop.timedate1 on the host's system bus
// (NTPSynchronized, NTP, Timezone) and the kernel's own adjtimex() state, which needs no bus and
// also gives the error bounds. A clock that drifts breaks TLS to the API server, token validation
// and the time inside VMs.
//
// Settings (checks."time-sync" in --config):
//   bus                 D-Bus address ("unix:path=...") or socket path; default the host's
//                       <rootfs>/run/dbus/system_bus_socket (the chart mounts it)
//   max_error_seconds   kernel maximum error at or above which the result is WARN (0.1)
//   grace_seconds       how long the clock may be unsynchronised before FAIL (600)
//   timeout_seconds     bound on every D-Bus call (1)
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "nodegate/probe.h"
#include "nodegate/seams.h"

namespace nodegate {

// The bus a D-Bus probe talks to: its `bus` setting, an address ("unix:path=...") taken as is or
// a socket path made into one, defaulting to the host's system bus socket under --path.rootfs.
std::string probeBusAddress(const HostRoot& host, const Config& cfg, const SettingSpec& bus);
// A D-Bus probe's `bus` setting (time-sync and node-services each have one).
SettingSpec busSetting(std::string check);

// Seconds from checks.<probe>.timeout_seconds (1 when unset), at most 30.
std::chrono::milliseconds probeBusTimeout(const Config& cfg, std::string_view probe);

// The socket path of a plain "unix:path=..." address (%-escapes decoded); nullopt for any other
// transport or form, which only a connection attempt can judge.
std::optional<std::string> busSocketPath(std::string_view address);

// An error (ENOTCONN, "failed to connect to <address>: ...") when the address names a unix socket
// that does not exist: no bus can answer there, so a probe says so at once instead of starting a
// D-Bus client whose connection attempt would only fail, log a warning and schedule retries.
// A probe runs again on the next cycle, so the agent still connects once the bus appears.
std::optional<Error> busSocketMissing(const std::string& address);

struct TimedateInfo {
  bool ntp_synchronized = false;
  std::optional<bool> ntp;  // the NTP service is enabled
  std::string timezone;
};

// NTPSynchronized must be present and boolean; NTP and Timezone are optional but, if present,
// must have their documented types. A wrong type is an error naming the property and its type.
Result<TimedateInfo> parseTimedate(const DBusProperties& props);

struct TimexInfo {
  bool synchronized = false;
  bool sta_unsync = false;
  double max_error_s = 0;
  double est_error_s = 0;
  double offset_s = 0;
  int state = 0;
  int status = 0;
};

// The kernel's verdict. STA_UNSYNC alone is not trusted: chronyd without rtcsync keeps it set on
// a disciplined clock (systemd-timedated ignores it for that reason), so a maximum error under
// the kernel's 16 s cap also counts as synchronised; the error threshold still applies.
TimexInfo interpretTimex(const KernelTimex& tx);

// How long the clock had already been unsynchronised when first seen so, from what the kernel
// shows: at the 16 s maximum-error cap it has not been disciplined since boot or for at least
// the ~8.9 h the bound takes to grow there at 500 ppm. Otherwise nothing is known (0).
double unsyncedBefore(const TimexInfo& tx, std::optional<double> uptime_s);

// Remembers since when the clock has been unsynchronised, across runs of one probe object.
class UnsyncedClock {
 public:
  // Returns seconds unsynchronised (0 when synchronised). prior_s backdates the first
  // observation (see unsyncedBefore).
  double observe(bool synchronized, std::chrono::steady_clock::time_point now, double prior_s);

 private:
  std::optional<std::chrono::steady_clock::time_point> since_;
};

struct TimeSyncPolicy {
  double max_error_s = 0.1;
  double grace_s = 600;
};

struct TimeSyncInputs {
  std::optional<TimedateInfo> timedate;
  std::string timedate_error;  // why timedate is empty
  std::optional<TimexInfo> kernel;
  std::string kernel_error;  // why kernel is empty
  double unsynced_for_s = 0;
};

// Pure evaluation; metrics nodegate_time_synchronized, _max_error_seconds, _offset_seconds.
CheckResult evaluateTimeSync(const TimeSyncInputs& in, const TimeSyncPolicy& policy);

inline constexpr char kTimeSyncCheck[] = "time-sync";
// timedate1, which the probe reads and agent/triggers/time_sync_watch.h watches.
inline constexpr char kTimedateService[] = "org.freedesktop.timedate1";
inline constexpr char kTimedatePath[] = "/org/freedesktop/timedate1";
inline const SettingSpec kTimeSyncBusSetting = busSetting(kTimeSyncCheck);
inline const SettingSpec kTimeSyncMaxErrorSetting =
    numberSetting(kTimeSyncCheck, "max_error_seconds", 0.1, 1e-6, 3600,
                  "kernel maximum error at or above which the result is WARN, seconds");
inline const SettingSpec kTimeSyncGraceSetting =
    numberSetting(kTimeSyncCheck, "grace_seconds", 600, 0, 7 * 86400,
                  "how long the clock may be unsynchronised before FAIL, seconds");
inline const ProbeSpec kTimeSyncSpec{
    .name = kTimeSyncCheck,
    .summary =
        "clock synchronised (timedate1 NTPSynchronized, adjtimex) with its maximum error "
        "under a threshold",
    .triggers = kTriggerTimer | kTriggerDBusTime,
    .condition = "TimeSynchronized",
    .default_required = false,
    .settings = {&kTimeSyncBusSetting, &kTimeSyncMaxErrorSetting, &kTimeSyncGraceSetting},
};

class TimeSyncProbe final : public Probe {
 public:
  TimeSyncProbe(std::shared_ptr<DBus> dbus, std::shared_ptr<KernelClock> clock);
  const ProbeSpec& spec() const override { return kTimeSyncSpec; }
  CheckResult run(const ProbeContext& ctx) override;

 private:
  std::shared_ptr<DBus> dbus_;
  std::shared_ptr<KernelClock> clock_;
  std::unique_ptr<DBusClient> client_;  // kept across runs: one connection, reconnected inside
  std::string client_key_;
  UnsyncedClock unsynced_;
};

}  // namespace nodegate
