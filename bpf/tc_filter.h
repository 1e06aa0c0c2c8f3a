// Adding the tracer's tc filter over rtnetlink. libbpf's bpf_tc_attach() cannot set a filter's
// classid, and the tracer needs one: cls_bpf stores it in the skb (qdisc_skb_cb::tc_classid) right
// before it runs the program, so the program learns which of our attachments it runs for by
// reading its own skb instead of walking to the device's struct net (dns_tracer.bpf.c, ng_tc).
// Removing a filter and the clsact qdisc stays with libbpf (bpf_tc_detach() finds a filter by
// handle and priority, which this returns); listFilters() is what tells the tracer, before it
// removes anything, whether that filter is still its own and whether the qdisc is empty (libbpf's
// bpf_tc_query() looks up one filter, it cannot list).
// What the classid touches outside our program: cls_bpf rewrites tc_classid before every bpf
// filter it runs, and the value is not used by the stack after the hook (the IP layer reuses that
// part of skb->cb), so only a tc action program (act_bpf) later on the same hook could read our
// id there. The filter's result class is irrelevant: the program returns TC_ACT_UNSPEC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nodegate/result.h"

namespace nodegate::dns {

struct TcFilter {
  uint32_t handle = 0;
  uint32_t priority = 0;
};

// Attaches prog_fd as a cls_bpf filter in direct-action mode to the ingress or egress hook of the
// clsact qdisc on `ifindex` (which must exist), in the calling thread's network namespace, with
// `classid` as the filter's class id (only its 16 minor bits reach the program). Handle and
// priority are left to the kernel (a priority ahead of the filters already there) and read back
// from its echo of the new filter.
Result<TcFilter> addClsBpfFilter(int ifindex, bool ingress, int prog_fd, uint32_t classid,
                                 const char* name);

// One filter of a clsact hook as the kernel lists it. The kernel also lists one entry with
// handle 0 per priority (the classifier instance the filters of that priority hang off).
struct TcFilterEntry {
  uint32_t handle = 0;
  uint32_t priority = 0;
  std::string kind;      // "bpf", "u32", "matchall", ...
  std::string bpf_name;  // cls_bpf only: the name given at attach (TCA_BPF_NAME)
  uint32_t prog_id = 0;  // cls_bpf only: the program's id (TCA_BPF_ID)
};

// Every filter on the ingress or egress hook of the clsact qdisc on `ifindex`, all chains, in the
// calling thread's network namespace. No qdisc or no device lists as empty.
Result<std::vector<TcFilterEntry>> listFilters(int ifindex, bool ingress);

}  // namespace nodegate::dns
