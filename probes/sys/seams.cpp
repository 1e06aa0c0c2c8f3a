#include "nodegate/seams.h"

namespace nodegate {

std::shared_ptr<DeviceIo> makeSysDeviceIo();
std::shared_ptr<Exec> makeSysExec();
std::shared_ptr<KernelClock> makeSysKernelClock();

Seams productionSeams() {
  Seams s;
  s.device = makeSysDeviceIo();
  s.exec = makeSysExec();
  s.dbus = makeSysDBus();
  s.clock = makeSysKernelClock();
  s.udev = makeSysUdev();
  s.netlink = makeSysNetlink();
  return s;
}

}  // namespace nodegate
