// libFuzzer target for the lvm report parser and everything the lvm probe derives from a parsed
// report: whatever lvm (or something posing as lvm behind --lvm-command) prints must give a
// report or an error, never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lvm.h"
#include "lvm_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto rep = nodegate::parseLvmReport(text);
  nodegate::LvmFetch fetch;
  fetch.command = "lvm";
  if (rep) {
    fetch.report = std::move(rep).value();
    for (const auto& lv : fetch.report.lvs) (void)nodegate::describeLvAttr(lv.attr);
  } else {
    fetch.failure = nodegate::LvmRunFailure::Unparsable;
    fetch.error = rep.error().message;
  }
  (void)nodegate::evaluateLvm(fetch, nodegate::LvmPolicy{});
  (void)nodegate::splitCommandLine(text);
  return 0;
}
