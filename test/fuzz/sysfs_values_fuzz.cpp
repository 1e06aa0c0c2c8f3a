// One-value sysfs/procfs files: module parameters (Y/N/1/0), hugepage pool names and counters,
// the kernel command line.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hugepages.h"
#include "iommu.h"
#include "nested_virt.h"
#include "text.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)nodegate::parseSysfsBool(text);
  auto kb = nodegate::parseHugepageDirName(text);
  if (kb && *kb == 0) __builtin_trap();  // a zero page size is rejected, never returned
  auto n = nodegate::parseU64(text);
  nodegate::HugepagesObservation h;
  h.readable = true;
  h.pools.push_back({kb.value_or(2048), n.value_or(0), n.value_or(0) / 2, 0, 0});
  h.min_free = n.value_or(1);
  (void)nodegate::evaluateHugepages(h);
  (void)nodegate::iommuCmdlineArgs(text);
  return 0;
}
