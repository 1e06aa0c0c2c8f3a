// The agent extension that turns timedate1's PropertiesChanged into a time-sync re-run, so an
// NTP switch or timezone change is published at once instead of at the next resync.
#include "triggers/time_sync_watch.h"

#include "extension.h"
#include "nodegate/seams.h"
#include "time_sync.h"

namespace nodegate {

TimeSyncWatcher::TimeSyncWatcher(DBus& dbus, const std::string& address,
                                 std::function<void()> on_change, std::chrono::milliseconds timeout)
    : client_(dbus.client(address, timeout)) {
  client_->watchProperties(kTimedatePath, kTimedateService, std::move(on_change));
}

namespace {

class TimeSyncWatch final : public Extension {
 public:
  explicit TimeSyncWatch(AgentServices& s) : dbus_(makeSysDBus()) {
    auto trigger = s.trigger;
    watcher_ = std::make_unique<TimeSyncWatcher>(
        *dbus_, probeBusAddress(s.host, s.config, kTimeSyncBusSetting),
        [trigger] { trigger(kTriggerDBusTime); }, probeBusTimeout(s.config, kTimeSyncCheck));
  }
  ~TimeSyncWatch() override { watcher_.reset(); }  // stop the signal thread before the bus goes

 private:
  std::shared_ptr<DBus> dbus_;
  std::unique_ptr<TimeSyncWatcher> watcher_;
};

}  // namespace

Result<std::unique_ptr<Extension>> startTimeSyncWatch(AgentServices& s) {
  return std::unique_ptr<Extension>(std::make_unique<TimeSyncWatch>(s));
}

}  // namespace nodegate
