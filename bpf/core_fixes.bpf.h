/* CO-RE compatibility for kernel changes the DNS tracer meets. Each entry cites the change. */
#ifndef NODEGATE_CORE_FIXES_BPF_H
#define NODEGATE_CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/* struct net::net_cookie was an atomic64_t until v5.14 ("net: initialize net->net_cookie at netns
 * setup", which made it a plain u64 set once). Both are 8 bytes; read through the flavour that
 * matches so the relocation does not fail on the type. */
struct net___old {
  struct {
    long long counter;
  } net_cookie;
} __attribute__((preserve_access_index));

static __always_inline __u64 ng_net_cookie(struct net* net) {
  struct net___old* old = (void*)net;

  if (bpf_core_field_exists(net->net_cookie)) return BPF_CORE_READ(net, net_cookie);
  if (bpf_core_field_exists(old->net_cookie)) return (__u64)BPF_CORE_READ(old, net_cookie.counter);
  return 0;
}

/* SKB_CONSUMED (v6.1, "net: dropreason: add SKB_CONSUMED reason") marks frees that are not drops.
 * Since v6.2 those go to skb:consume_skb instead, but v6.1 still sent them through kfree_skb; older
 * kernels lack the value and never passed a consumed free here. */
static __always_inline bool ng_reason_is_drop(__u32 reason) {
  if (reason == SKB_NOT_DROPPED_YET) return false;
  if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_CONSUMED) &&
      reason == (__u32)bpf_core_enum_value(enum skb_drop_reason, SKB_CONSUMED))
    return false;
  return true;
}

#endif
