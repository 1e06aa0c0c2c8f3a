// /proc/modules (and lsmod) parser feeding the kernel-modules evaluator.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernel_modules.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nodegate::ModulesObservation o;
  o.arch = size % 3 == 0 ? "arm64" : "x86";
  o.cpu_module = size % 2 ? "kvm_intel" : "kvm_amd";
  o.loaded = nodegate::parseProcModules(text);
  if (size % 5) o.builtin = std::set<std::string>{"tun"};
  (void)nodegate::evaluateKernelModules(o);
  return 0;
}
