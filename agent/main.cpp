// nodegate: one binary, five commands. main() parses, sets the log level and dispatches.
#include <iostream>

#include "cli/commands.h"
#include "nodegate/log.h"
#include "nodegate/version.h"

int main(int argc, char** argv) {
  using namespace nodegate;
  auto opts = parseOptions(argc, argv);
  if (!opts) {
    std::cerr << "nodegate: " << opts.error().message << "\n\n" << usage();
    return 2;
  }
  log::Level level = log::Level::Info;
  log::parseLevel(opts->log_level, &level);
  log::setLevel(level);
  const std::string& cmd = opts->command;
  if (cmd == "help") {
    std::cout << usage();
    return 0;
  }
  if (cmd == "version") {
    std::cout << "nodegate " << kVersion << "\n";
    return 0;
  }
  if (cmd == "check") return runCheck(*opts);
  if (cmd == "agent") return runAgent(*opts);
  if (cmd == "device-probe") return runDeviceProbe(*opts);
  if (cmd == "dns") {
    if (opts->args.empty() || opts->args[0] != "trace") {
      std::cerr << "nodegate: usage: nodegate dns trace [--vmi NS/NAME] [--follow]\n";
      return 2;
    }
    return runDnsTrace(*opts);
  }
  std::cerr << usage();
  return 2;
}
