// The tracer's attachments: which devices the BPF classifier runs on now (by the netns inode the
// BPF side stamps on events and the ifindex), and one open fd per traced netns. The tracer enters
// a netns through /proc/self/fd/N, which stays valid after the virt-launcher whose
// /proc/PID/ns/net it was found by has exited, so detaching still reaches the devices; the same
// fd feeds the per-netns link watch (agent/triggers/netns_watch.h).
//
// apply() runs on one thread at a time (the DNS service's worker); owner(), devices() and the
// other readers may be called from any thread (the tracer's poll thread, HTTP handlers).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dns/discovery.h"

namespace nodegate::dns {

class DnsTracer;
class NetnsLinkWatch;

class Attachments {
 public:
  explicit Attachments(DnsTracer& tracer) : tracer_(tracer) {}
  ~Attachments();  // closes the netns fds; detaching is the tracer's (DnsTracer::detachAll)
  Attachments(const Attachments&) = delete;
  Attachments& operator=(const Attachments&) = delete;

  // Where netns fds are registered for link events; null: none. Set before the first apply().
  void setNetnsWatch(NetnsLinkWatch* watch) { watch_ = watch; }
  // Makes the traced set `want`: detaches devices no longer wanted (or whose hop or VMI changed),
  // attaches new ones, and closes the fds of netns nothing is traced in any more. A device that
  // fails to attach (its launcher exited meanwhile) is logged and left out.
  void apply(const std::vector<HopDevice>& want);
  // Stops using the netns watch (it is about to go) and closes every fd.
  void closeAll();

  struct Owner {
    std::string vmi;  // "" on the shared side
    Hop hop = Hop::Unknown;
  };
  // The traced device an event came from; nullopt when it is not (or no longer) traced.
  std::optional<Owner> owner(std::uint32_t netns_ino, int ifindex) const;
  std::vector<HopDevice> devices() const;  // in (netns inode, ifindex) order
  std::size_t size() const;
  // A hop beyond the host veth (HostOut or Server) is traced.
  bool beyondHostTraced() const;

 private:
  using Key = std::pair<std::uint32_t, int>;  // (netns inode as the BPF side carries it, ifindex)
  std::string stablePath(const HopDevice& d);
  void releaseUnusedNetns();

  DnsTracer& tracer_;
  NetnsLinkWatch* watch_ = nullptr;
  mutable std::mutex mu_;  // devices_
  std::map<Key, HopDevice> devices_;
  std::map<std::uint64_t, int> netns_fds_;  // the apply() thread's alone
};

}  // namespace nodegate::dns
