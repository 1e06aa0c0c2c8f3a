// cpu-level: any cpuinfo text and any minimum setting give a verdict, never a crash; the level
// found is always one whose flags are all present.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cpu_level.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first line doubles as the minimum setting, so bad settings are fuzzed too.
  auto nl = text.find('\n');
  std::string_view minimum = text.substr(0, nl == std::string_view::npos ? text.size() : nl);
  auto cpu = nodegate::parseCpuInfo(text);
  auto level = nodegate::x86Level(cpu.flags);
  for (int l = 0; l < level.level; ++l)
    for (auto f : nodegate::x86LevelFlags()[l])
      if (!cpu.flags.count(std::string(f))) std::abort();
  (void)nodegate::evaluateCpuLevel(cpu, minimum);
  (void)nodegate::evaluateCpuLevel(cpu, "x86-64-v2");
  return 0;
}
