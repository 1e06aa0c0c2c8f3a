#include "nodegate/seams.h"

namespace nodegate {

std::shared_ptr<DeviceIo> makeSysDeviceIo();
std::shared_ptr<Exec> makeSysExec();

Seams productionSeams() {
  Seams s;
  s.device = makeSysDeviceIo();
  s.exec = makeSysExec();
  return s;
}

}  // namespace nodegate
