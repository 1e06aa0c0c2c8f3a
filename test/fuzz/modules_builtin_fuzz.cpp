// modules.builtin and modules.devname parsers (files of the host's /lib/modules/<release>).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernel_modules.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto builtin = nodegate::parseModulesBuiltin(text);
  auto devname = nodegate::parseModulesDevname(text);
  for (const auto& name : builtin)
    if (name.find('-') != std::string::npos) __builtin_trap();  // names are normalised
  (void)devname;
  (void)nodegate::normalizeModuleName(text);
  return 0;
}
