// An event of the tracer (bpf/dns_event.h, the question already decoded by the loader) as the
// correlation engine takes it. Its own file so the per-event path can be measured in-process
// (tools/bench/dns_userspace_cost.cpp) without a loaded tracer.
#pragma once

#include "dns/correlator.h"
#include "dns_event.h"

namespace nodegate::dns {

// Every field but vmi (the attachment's owner) and drop_reason (the tracer's BTF names it:
// DnsTracer::dropReasonName()), which the caller fills in.
Observation observationOf(const ng_dns_event& ev);

}  // namespace nodegate::dns
