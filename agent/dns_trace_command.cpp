// `nodegate dns trace` — placeholder until the DNS issue lands.
#include <iostream>

#include "commands.h"

namespace nodegate {

int runDnsTrace(const Options&) {
  std::cerr << "nodegate: dns trace is not built yet\n";
  return 2;
}

}  // namespace nodegate
