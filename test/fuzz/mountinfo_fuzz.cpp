// /proc/<pid>/mountinfo parser (shared by local-pv and cgroups) into the cgroup v1 evaluator.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cgroups.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nodegate::CgroupsObservation o;
  o.version = 1;
  for (const char* c : {"cpu", "cpuacct", "cpuset", "memory", "blkio", "pids", "devices"})
    o.v1[c] = nodegate::ProcCgroup{1, true};
  o.mounts = nodegate::parseMountInfo(text);
  (void)nodegate::evaluateCgroups(o);
  return 0;
}
