// DnsTracer: loads the DNS tracer's BPF programs (bpf/dns_tracer.bpf.c), attaches the tc
// classifier to devices inside any network namespace, follows skb:kfree_skb for drop reasons, and
// delivers every ng_dns_event (bpf/dns_event.h) to one callback from a poll thread. The kernel side
// copies the question raw; the name, qtype and parse flags are decoded here (bpf/dns_wire.h)
// before the callback sees the event.
//
// Contract for users (the dns-path correlation in agent/dns builds on it; keep it stable):
// - open() loads everything the kernel can run; a program it cannot run (no kfree_skb reason on old
//   kernels) is switched off and reported by dropsAvailable(), not an error.
// - attach() is idempotent per (netns, ifindex) and only ever adds observers: the classifier
//   returns TC_ACT_UNSPEC, so the device's existing tc programs decide as before. Its two
//   filters carry the attachment's id as their classid (`tc filter show`: "flowid :N"), which is
//   how the program tells devices apart without reading their netns (bpf/dns_event.h). On a
//   device whose clsact it did not create, it first removes the ng_tc filters of dead agents (an
//   agent killed with SIGKILL leaves its filters running): cls_bpf filters named ng_tc whose
//   program no process holds, as seen in opts.procfs (the host's pid namespace only; otherwise
//   nothing is removed). Filters of a live agent stay.
// - Tracing is on while at least one device is attached: kfree_skb drops are followed from the
//   first attach() to the last detach() (a drop anywhere on the node is reported then, attached
//   device or not), and only then is the ring mapped and polled. With nothing attached the tracer
//   costs no memory in the process and no wakeups.
// - The destructor detaches everything it attached. It removes only its own filters (checked by
//   name and program id, not just handle and priority) and a clsact qdisc only where it created
//   it and no filter at all is left on it: another agent's, a CNI's or a user's filters and their
//   qdisc stay. A device or netns that disappeared in the meantime is not an error.
// - Thread safety: attach/detach/setHop/stats may be called from any thread; the callback runs on
//   the poll thread (or on the caller of consume()), never concurrently with itself.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dns_event.h"
#include "nodegate/result.h"

namespace nodegate::dns {

struct TracerOptions {
  // Ring buffer size in bytes (power of two, multiple of the page size). Rule: peak events/s ×
  // poll interval × record size, with headroom for the late polls of a busy agent; the program
  // forces a wakeup at half full. The ring is mapped twice while a device is attached (the data
  // pages again, for wrap-around reads): 2 MiB costs 4 MiB of RSS then. 512 KiB (the rule's
  // figure, docs/benchmarks/dns-bpf.md "Ring sizing") lost 2-15 % of the events at 13-19k
  // queries/s over 100 VMs where 2 MiB lost none (docs/benchmarks/density.md, ring phase).
  // The agent's --dns-ring-kib sets it (agent/cli/options.h keeps the same default).
  std::size_t ring_bytes = 2u << 20;
  // How often the poll thread drains the ring while events come; the BPF side does not wake user
  // space per event (BPF_RB_NO_WAKEUP) and forces a wakeup only when the ring is half full.
  std::chrono::milliseconds poll_interval{10};
  // How often it drains the ring once no event came for a second (at least poll_interval): at 10
  // ms an idle agent woke 100 times a second for nothing. An event read returns it to
  // poll_interval. The first events after a quiet spell wait up to this long to be read, never
  // longer than the half-full wakeup allows: 2 MiB fill to half in under 200 ms only above ~25k
  // events/s, and then the program wakes the thread itself.
  std::chrono::milliseconds idle_poll_interval{200};
  // Load the skb:kfree_skb program (drop reasons). Off = tc events only.
  bool trace_drops = true;
  // Mount point of procfs, for the tracer's own netns (HostRoot::proc()).
  std::string procfs = "/proc";
  // Follow kfree_skb through the raw_tp program even where tp_btf works (the fallback the loader
  // takes by itself when the kernel refuses tp_btf); for tests of that path.
  bool drops_via_raw_tp = false;
};

// One tc attachment target. netns_path names a network namespace file (/proc/PID/ns/net, a
// bind mount from `ip netns add`, or a --dns-netns path); empty = the caller's netns.
struct AttachTarget {
  std::string netns_path{};
  int ifindex = 0;
  uint8_t hop = 0;  // copied into ng_dns_event::hop for packets seen on this device
};

struct AttachmentInfo {
  uint64_t netns_ino = 0;     // st_ino of the netns file == ng_dns_event::netns_ino
  uint64_t netns_cookie = 0;  // == ng_dns_event::netns_cookie of its tc events; 0 if unknown
  int ifindex = 0;
  uint8_t hop = 0;
  bool created_qdisc = false;  // we created clsact; detach removes it if no filter is left on it
};

// Counters kept by the BPF programs (per-CPU, summed here).
struct TracerStats {
  uint64_t events_lost = 0;    // ring buffer reserve failures -> nodegate_bpf_events_lost_total
  uint64_t frags_skipped = 0;  // non-first IP fragments (no L4 header: ports unknown, so any
                               // UDP/TCP fragment on an attached device or dropped is counted)
  uint64_t ext_skipped = 0;    // IPv6 packets whose extension chain we do not walk (ESP, > 3)
  uint64_t not_dns = 0;        // port 53 payloads that are not a DNS message
  uint64_t short_packets = 0;  // port 53 packets truncated before the DNS header ends
  uint64_t tcp_prefix_segments = 0;  // TCP segments carrying only the 2-byte length prefix; the
                                     // message is reported from the segment that follows
  uint64_t paged_skipped = 0;  // dropped port-53 packets whose DNS bytes sit in page fragments
                               // (kfree_skb reads only the linear data): no drop event
  uint64_t events = 0;         // events delivered to the callback (user-space count)
};

class DnsTracer {
 public:
  using EventCallback = std::function<void(const ng_dns_event&)>;

  // Opens, sizes the ring and loads the skeleton; starts nothing yet.
  static Result<std::unique_ptr<DnsTracer>> open(const TracerOptions& opts = {});
  ~DnsTracer();
  DnsTracer(const DnsTracer&) = delete;
  DnsTracer& operator=(const DnsTracer&) = delete;

  // Attaches the classifier to ingress and egress of target.ifindex inside target.netns_path.
  // The netns switch happens on a short-lived helper thread: the caller's netns never changes.
  Result<AttachmentInfo> attach(const AttachTarget& target);
  // Detaches from (netns_ino, ifindex); removes the clsact qdisc if attach() created it and no
  // other filter is on it.
  Result<void> detach(uint64_t netns_ino, int ifindex);
  void detachAll();
  std::vector<AttachmentInfo> attachments() const;

  // Hop id for packets seen (or dropped) on a device we do not attach to, e.g. a host veth
  // observed only through kfree_skb. attach() calls this itself.
  Result<void> setHop(uint64_t netns_ino, int ifindex, uint8_t hop);

  // Starts the poll thread; events go to cb. Call once.
  Result<void> start(EventCallback cb);
  // Stops the poll thread after a final drain. Idempotent; the destructor calls it.
  void stop();
  // Drains the ring on the calling thread (tests, or callers without start()). Returns the number
  // of events delivered; must not be mixed with a running poll thread.
  Result<int> consume(const EventCallback& cb);

  TracerStats stats() const;
  bool dropsAvailable() const;

  // "NO_SOCKET" for the kernel's SKB_DROP_REASON_NO_SOCKET, read from the running kernel's BTF
  // enum skb_drop_reason; "UNKNOWN(<n>)" when the value is not in it.
  std::string dropReasonName(uint32_t reason) const;

  // File descriptor of the classifier (one program on both hooks of every device), for
  // BPF_PROG_TEST_RUN in tests and run_time_ns in benchmarks. A test run is outside any hook, so
  // its events say NG_DIR_EGRESS (the kernel's tc_at_ingress bit is clear).
  int tcProgFd() const;
  // The kfree_skb program's fd (benchmarks read its run_time_ns); -1 when dropsAvailable() is
  // false.
  int dropProgFd() const;

  // Inode of a netns file (st_ino), as carried in ng_dns_event::netns_ino. Empty path = our own.
  Result<uint64_t> netnsInode(const std::string& netns_path) const;

  struct Impl;

 private:
  explicit DnsTracer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Dotted text of an event's address (IPv4 or IPv6 from NG_F_IPV6).
std::string formatAddress(const ng_dns_event& ev, bool source);

}  // namespace nodegate::dns
