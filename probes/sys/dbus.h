// The production D-Bus seam, on sdbus-c++ (sd-bus underneath).
//
// Each client owns one connection and one worker thread. The worker connects (sd-bus's handshake
// can block for the bus's auth timeout when the daemon is wedged), runs the calls with the
// client's timeout, dispatches PropertiesChanged signals and reconnects with exponential backoff
// (250 ms doubling to 30 s) after the bus goes away. Callers hand a call to the worker and wait
// at most timeout + 250 ms, so a frozen bus or a service that answers slowly costs the agent loop
// one bounded wait and never a stall; a call the worker gets to after its caller gave up is
// dropped unsent.
#pragma once

#include <memory>

#include "nodegate/seams.h"

namespace nodegate {

std::shared_ptr<DBus> makeSysDBus();

}  // namespace nodegate
