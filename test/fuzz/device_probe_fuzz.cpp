// libFuzzer target for the device-probe protocol (probes/device_probe.h): any bytes as a request
// body give a Request or an error, never a crash, and an accepted request says the same after
// a round trip; any bytes as a reply body, for every op, give a result or an error, and every
// payload decoder takes whatever object a reply carries.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "device_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nodegate::devprobe;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  if (auto req = parseRequest(body)) {
    auto again = parseRequest(encodeRequest(*req));
    if (!again || again->op != req->op || again->deadline != req->deadline) __builtin_trap();
  }
  for (Op op : allOps()) {
    auto result = parseReply(body, op);
    if (!result) continue;
    (void)checkResultFromWire(*result);
    (void)preludeFromWire(*result);
    (void)execResultFromWire(*result);
  }
  return 0;
}
