// `nodegate agent` — the daemon. Placeholder until the agent issue lands its runner.
#include <iostream>

#include "commands.h"

namespace nodegate {

int runAgent(const Options&) {
  std::cerr << "nodegate: agent is not built yet\n";
  return 2;
}

}  // namespace nodegate
