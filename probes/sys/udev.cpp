// The udev seam over libudev: netlink monitors of the subsystems the triggers watch.
#include <libudev.h>

#include <cerrno>
#include <cstring>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

std::string text(const char* s) {
  return s ? s : "";
}

class UdevMonitor final : public KernelEventSource {
 public:
  UdevMonitor(udev* ctx, udev_monitor* mon, std::string name)
      : ctx_(ctx), mon_(mon), name_(std::move(name)) {}
  ~UdevMonitor() override {
    udev_monitor_unref(mon_);
    udev_unref(ctx_);
  }
  std::string_view name() const override { return name_; }
  int fd() const override { return udev_monitor_get_fd(mon_); }
  std::vector<KernelEvent> drain() override {
    std::vector<KernelEvent> out;
    // The monitor socket is non-blocking: read until it is empty.
    while (udev_device* d = udev_monitor_receive_device(mon_)) {
      out.push_back(KernelEvent{text(udev_device_get_subsystem(d)),
                                text(udev_device_get_sysname(d)), text(udev_device_get_action(d)),
                                text(udev_device_get_property_value(d, "EVENT")), false});
      udev_device_unref(d);
    }
    return out;
  }

 private:
  udev* ctx_;
  udev_monitor* mon_;
  std::string name_;
};

class SysUdev final : public Udev {
 public:
  Result<std::unique_ptr<KernelEventSource>> monitor(const std::string& source) override {
    udev* ctx = udev_new();
    if (!ctx) return errnoError(errno ? errno : ENOMEM, "create udev context");
    udev_monitor* m = udev_monitor_new_from_netlink(ctx, source.c_str());
    if (!m) {
      int err = errno ? errno : EINVAL;
      udev_unref(ctx);
      return errnoError(err, "open udev monitor " + source);
    }
    for (const char* sub : {"misc", "block", "net"})
      udev_monitor_filter_add_match_subsystem_devtype(m, sub, nullptr);
    // A burst of block events (a VM host with many LVs) must not overflow the default buffer.
    udev_monitor_set_receive_buffer_size(m, 1 << 20);
    if (int rc = udev_monitor_enable_receiving(m); rc < 0) {
      udev_monitor_unref(m);
      udev_unref(ctx);
      return errnoError(-rc, "listen on udev monitor " + source);
    }
    // The uevent source is the kernel's raw stream; "udev" comes after udevd.
    return std::unique_ptr<KernelEventSource>(
        new UdevMonitor(ctx, m, source == "kernel" ? "uevent" : source));
  }
};

}  // namespace

std::shared_ptr<Udev> makeSysUdev() {
  return std::make_shared<SysUdev>();
}

}  // namespace nodegate
