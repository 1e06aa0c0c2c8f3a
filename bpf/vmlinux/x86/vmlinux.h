/* Trimmed vmlinux.h for x86_64: only the kernel-internal types the DNS tracer reads, declared by
 * hand with the CO-RE attribute so libbpf relocates every field access against the running
 * kernel's BTF (/sys/kernel/btf/vmlinux). The full `bpftool btf dump file
 * /sys/kernel/btf/vmlinux format c` is 2.8 MB for 6.18; this lists the whole kernel surface we
 * depend on instead. Field layouts here are NOT the kernel's: offsets come from relocations, so
 * only names and kinds must match. UAPI types (struct __sk_buff, BPF_* constants) come from the
 * distribution's linux/bpf.h.
 *
 * To add a type: copy the member names from `bpftool btf dump file /sys/kernel/btf/vmlinux
 * format c` (only the members you read) and keep the preserve_access_index attribute. */
#ifndef NODEGATE_VMLINUX_H
#define NODEGATE_VMLINUX_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef _Bool bool;
#define true 1
#define false 0

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct ns_common {
  unsigned int inum;
};

struct net {
  struct ns_common ns;
  u64 net_cookie; /* u64 since v5.14; see core_fixes.bpf.h */
};

typedef struct {
  struct net *net;
} possible_net_t;

struct net_device {
  int ifindex;
  possible_net_t nd_net;
};

struct sock_common {
  possible_net_t skc_net;
};

struct sock {
  struct sock_common __sk_common;
};

struct sk_buff {
  struct net_device *dev;
  struct sock *sk;
  unsigned int len;
  unsigned int data_len;
  __u16 network_header;
  unsigned char *head;
  unsigned char *data;
};

#pragma clang attribute pop

/* Only the values we relocate with bpf_core_enum_value*(); the rest are decoded by name in user
 * space from the kernel's own BTF. */
enum skb_drop_reason {
  SKB_NOT_DROPPED_YET = 0,
  SKB_CONSUMED = 1,
};

#endif
