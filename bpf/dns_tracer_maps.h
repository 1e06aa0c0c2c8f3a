/* Map layouts shared by dns_tracer.bpf.c and the loader (dns_tracer.cpp). Plain C, fixed-width. */
#ifndef NODEGATE_DNS_TRACER_MAPS_H
#define NODEGATE_DNS_TRACER_MAPS_H

#ifndef __BPF__
#include <linux/types.h>
#endif

/* Devices with a hop id (the loader keeps them and stamps ng_dns_event::hop in user space: one
 * lookup per event off the packet path instead of a hash lookup per packet in the kernel). */
#define NG_HOPS_MAX 4096

/* One direction of a TCP connection as seen on one device: ifindex alone is ambiguous across
 * network namespaces, and NAT changes addresses from hop to hop. */
struct ng_tcp_flow {
  __u32 where; /* the netns inode where the program knows it, else the tc attachment id */
  __u32 ifindex;
  __u8 saddr[16];
  __u8 daddr[16];
  __u16 sport;
  __u16 dport;
};

/* A bare 2-byte length prefix was seen: the message starts at next_seq. */
struct ng_tcp_pending {
  __u32 next_seq;
  __u16 msg_len;
  __u16 _pad;
};

/* Indices of the per-CPU counter array ng_stats. */
enum ng_stat {
  NG_STAT_LOST = 0,       /* bpf_ringbuf_reserve failed: an event was lost */
  NG_STAT_FRAG = 1,       /* non-first IP fragment: no L4 header, skipped */
  NG_STAT_EXT = 2,        /* IPv6 extension chain not walked (ESP, or longer than we follow) */
  NG_STAT_NOT_DNS = 3,    /* port 53 payload whose header is not a DNS message */
  NG_STAT_SHORT = 4,      /* port 53 packet too short for a DNS header */
  NG_STAT_TCP_PREFIX = 5, /* TCP segment carrying only the 2-byte length prefix (the message
                             follows in the next segment and is reported from there) */
  NG_STAT_PAGED = 6,      /* dropped port-53 packet whose DNS bytes are outside the skb's linear
                             data (TCP payload in page fragments): kfree_skb cannot read them */
  NG_STAT_MAX = 7,
};

#endif
