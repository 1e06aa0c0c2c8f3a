// /proc/cpuinfo parser and the cpu-virt evaluator: any text gives a verdict, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cpu_virt.h"
#include "kvm_backend.h"
#include "kvm_device.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto info = nodegate::parseCpuInfo(text);
  (void)nodegate::evaluateCpuVirt(info, size % 2 == 0);
  (void)nodegate::cpuKvmModule(info);
  (void)nodegate::kvmRequiredCapabilities(info.arch);
  return 0;
}
