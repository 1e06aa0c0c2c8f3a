// The test guest's exit decoder over any kvm_run area contents and size: a verdict, never a read
// outside the area (ASan would stop it), whatever data_offset or exit_reason says.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kvm_guest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The kernel's area is page-aligned; copy into an aligned buffer of exactly the input's size.
  auto area = std::make_unique<std::uint64_t[]>(size / 8 + 1);
  std::memcpy(area.get(), data, size);
  auto e = nodegate::decodeGuestExit(area.get(), size);
  if (e.kind == nodegate::GuestExit::Kind::Stage && (e.stage < 0 || e.stage > 255))
    __builtin_trap();
  return 0;
}
