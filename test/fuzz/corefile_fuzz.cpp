// CoreDNS's Corefile parser, its description and the node-local cache's addresses, on any bytes
// (the text comes from a ConfigMap anyone with edit rights in kube-system can write).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "corefile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto f = nodegate::parseCorefile(text)) {
    (void)nodegate::describeCorefile(*f);
    (void)nodegate::linkLocalBinds(*f);  // bind arguments as written, any bytes
  }
  (void)nodegate::parseCorefileConfigMap(text);
  return 0;
}
