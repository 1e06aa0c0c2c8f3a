// Every component `nodegate agent` starts beside its loop, one line each (see extension.h).
#include "extension.h"

#include "dns/dns_service.h"

namespace nodegate {

Result<std::unique_ptr<Extension>> startTimeSyncWatch(AgentServices& s);  // time_sync_watch.cpp

std::vector<ExtensionFactory> agentExtensions() {
  std::vector<ExtensionFactory> list;
  list.push_back({"dns-tracer", &dns::startDnsTracer});
  list.push_back({"time-sync-watch", &startTimeSyncWatch});
  return list;
}

}  // namespace nodegate
