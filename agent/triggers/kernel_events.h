// Kernel event sources of the agent loop: one thread polling
//   - udev monitors (the Udev seam), kernel source (raw uevents, works without udevd) and udev
//     source (after udevd processed them, when udevd runs): misc -> kTriggerUdevMisc, block ->
//     kTriggerUdevBlock, net -> kTriggerNetLink;
//   - rtnetlink link events (the Netlink seam) on RTNLGRP_LINK and RTNLGRP_NSID: link
//     add/remove/change and a peer netns getting or losing its id (a pod's netns appearing/going)
//     -> kTriggerNetLink; a source that lost events (overflow) fires what it could have meant;
//   - the host's mount table (<proc>/1/mountinfo, POLLPRI on change) -> kTriggerMounts.
// The seams make it testable with fake sources (test/agent/triggers); the kernel test stays.
// Each source that cannot be opened is logged and skipped; the resync timer still covers it.
// Counts what it sees in nodegate_agent_kernel_events_total{source,subsystem}.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <prometheus/registry.h>

#include "nodegate/host_root.h"
#include "nodegate/result.h"
#include "nodegate/seams.h"

namespace nodegate {

class KernelEvents {
 public:
  using Sink = std::function<void(std::uint32_t trigger_bits)>;

  // registry may be null; seams.udev and seams.netlink give the sources (null: none of that
  // kind). Error only when no source at all could be opened.
  static Result<std::unique_ptr<KernelEvents>> start(const HostRoot& host, Sink sink,
                                                     std::shared_ptr<prometheus::Registry> registry,
                                                     const Seams& seams);
  ~KernelEvents();  // stops and joins the thread

  // More sinks beside the one given to start() (extensions, e.g. the DNS tracer's hop discovery):
  // each gets the bits of every batch on the event thread and must return at once. After
  // removeListener() returns, the sink is not running and is never called again.
  int addListener(Sink sink);
  void removeListener(int id);
  bool watchesLinks() const;  // the rtnetlink source is open
  KernelEvents(const KernelEvents&) = delete;
  KernelEvents& operator=(const KernelEvents&) = delete;

  struct Impl;

 private:
  KernelEvents() = default;
  std::unique_ptr<Impl> impl_;
};

// What a uevent says, as far as triggers go (any field may be null).
struct Uevent {
  const char* subsystem = nullptr;
  const char* sysname = nullptr;    // "kvm", "sda", "tap0"
  const char* action = nullptr;     // "add", "remove", "change", ...
  const char* kvm_event = nullptr;  // the EVENT property KVM puts on its VM lifecycle uevents
};

// The trigger bit of a uevent: by subsystem (0 for subsystems the agent does not watch), except
// KVM's VM lifecycle notices, which trigger nothing.
std::uint32_t triggerForUevent(const Uevent& ev);

}  // namespace nodegate
