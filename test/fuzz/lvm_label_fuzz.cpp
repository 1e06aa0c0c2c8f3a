// libFuzzer target for the LVM2 label parser: any bytes at the start of a block device (or
// fewer, a tiny device) give a sector or none, never a crash or a read past the input; a
// sector it names must really start with the label header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lvm_label.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view head(reinterpret_cast<const char*>(data), size);
  auto sector = nodegate::findLvm2Label(head);
  if (sector) {
    const std::size_t at = *sector * nodegate::kLvmSectorSize;
    if (*sector >= nodegate::kLvmLabelSectors || head.size() < at + 32 ||
        head.substr(at, 8) != "LABELONE" || head.substr(at + 24, 8) != "LVM2 001")
      __builtin_trap();
  }
  return 0;
}
