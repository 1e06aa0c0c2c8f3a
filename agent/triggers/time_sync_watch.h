// The dbus-time trigger: timedate1's PropertiesChanged on the host's system bus.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "nodegate/seams.h"

namespace nodegate {

// Turns timedate1's PropertiesChanged into a trigger for the agent. Wiring, in the agent (the
// time-sync-watch extension below does it):
//
//   TimeSyncWatcher watch(*dbus, probeBusAddress(host, cfg, kTimeSyncBusSetting),
//                         [&runner] { runner.trigger(kTriggerDBusTime); });
//
// on_change runs on the watcher's own D-Bus thread on every PropertiesChanged of
// org.freedesktop.timedate1 and whenever the bus connection drops or comes back (then anything
// may have changed). It must be short and non-blocking; destroy the watcher before what the
// callback touches. The watcher reconnects by itself with backoff.
// Note: timedated signals changes of NTP and Timezone; NTPSynchronized is computed on read, so
// losing sync is still caught by the periodic resync.
class TimeSyncWatcher {
 public:
  TimeSyncWatcher(DBus& dbus, const std::string& address, std::function<void()> on_change,
                  std::chrono::milliseconds timeout = std::chrono::seconds(1));

 private:
  std::unique_ptr<DBusClient> client_;
};

}  // namespace nodegate
