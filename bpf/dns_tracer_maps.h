/* Map layouts shared by dns_tracer.bpf.c and the loader (dns_tracer.cpp). Plain C, fixed-width. */
#ifndef NODEGATE_DNS_TRACER_MAPS_H
#define NODEGATE_DNS_TRACER_MAPS_H

#ifndef __BPF__
#include <linux/types.h>
#endif

/* ifindex alone is ambiguous across network namespaces (every netns has its own ifindex 1, 2...),
 * so devices are keyed by the netns inode too. */
struct ng_hop_key {
  __u32 netns_ino;
  __u32 ifindex;
};

#define NG_HOPS_MAX 4096

/* Indices of the per-CPU counter array ng_stats. */
enum ng_stat {
  NG_STAT_LOST = 0,     /* bpf_ringbuf_reserve failed: an event was lost */
  NG_STAT_FRAG = 1,     /* non-first IP fragment: no L4 header, skipped */
  NG_STAT_EXT = 2,      /* IPv6 extension chain not walked (ESP, or longer than we follow) */
  NG_STAT_NOT_DNS = 3,  /* port 53 payload whose header is not a DNS message */
  NG_STAT_SHORT = 4,    /* port 53 packet too short for a DNS header */
  NG_STAT_MAX = 5,
};

#endif
