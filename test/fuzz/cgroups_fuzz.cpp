// cgroup.controllers (v2) and /proc/cgroups (v1) parsers with the cgroups evaluator.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cgroups.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nodegate::CgroupsObservation v2;
  v2.version = 2;
  v2.v2_controllers = nodegate::parseCgroupControllers(text);
  (void)nodegate::evaluateCgroups(v2);
  nodegate::CgroupsObservation v1;
  v1.version = 1;
  v1.v1 = nodegate::parseProcCgroups(text);
  (void)nodegate::evaluateCgroups(v1);
  return 0;
}
