/* The DNS tracer's kernel side: a tc classifier (one program, attached to both directions) that
 * reports every DNS packet it sees on a device, and a skb:kfree_skb raw tracepoint that reports
 * DNS packets the kernel drops, with the drop reason. Both share one parser (L3 → L4 → DNS header
 * → raw question) that reads through ng_load(): bpf_skb_load_bytes() for tc,
 * bpf_probe_read_kernel() for the tracepoint.
 *
 * Why these hooks: tc sees every frame on the KubeVirt devices (tap, bridge, veth) including
 * forwarded ones that never meet a socket; kprobes and fentry are unavailable on the target
 * kernels, and a raw tracepoint needs neither nor tracefs. Both only observe: tc returns
 * TC_ACT_UNSPEC so the next filter (or the default) decides, exactly as if we were not attached. */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "core_fixes.bpf.h"
#include "dns_event.h"
#include "dns_tracer_maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

_Static_assert(__builtin_offsetof(struct ng_dns_event, qname) == NG_DNS_REC_HEAD,
               "the ring record's fixed part is struct ng_dns_event up to qname");
_Static_assert(NG_DNS_REC_Q3 >= NG_DNS_QNAME_MAX, "the largest record holds a whole capture");

/* No loader settings in .rodata: a read of one is a load from a line nothing else on the packet
 * path touches, which at low packet rates is a cache miss per packet (the port check's was ~7 % of
 * the program's samples at 10k queries/s). The port is a constant; the wakeup threshold is derived
 * from the ring (ng_emit()). */
#define NG_DNS_PORT 53

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20); /* resized by the loader (TracerOptions::ring_bytes) */
} ng_events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, NG_STAT_MAX);
  __type(key, __u32);
  __type(value, __u64);
} ng_stats SEC(".maps");

/* TCP DNS senders may write the 2-byte length prefix in a segment of its own (RFC 7766 allows it;
 * a client with TCP_NODELAY that writes prefix and message separately does it). The bare prefix is
 * remembered per device and flow until the segment that starts at the next sequence number: that
 * one carries the message without a prefix. Only port-53 TCP segments whose first two bytes do not
 * describe the segment itself ever look here, so UDP and ordinary TCP DNS never touch the map. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, struct ng_tcp_flow);
  __type(value, struct ng_tcp_pending);
} ng_tcp_split SEC(".maps");

extern void* bpf_cast_to_kern_ctx(void* obj) __ksym;

#define ETH_P_IP_ 0x0800
#define ETH_P_IPV6_ 0x86DD
#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define IPPROTO_ICMP_ 1
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_ICMPV6_ 58
#define TC_ACT_UNSPEC_ (-1)

/* Where packet bytes come from. Offsets are relative to `base` (tc: the frame start; kfree_skb:
 * the network header), `len` bytes are readable from there. */
struct ng_src {
  struct __sk_buff* skb; /* tc */
  __u8 *data, *data_end; /* tc: linear packet data, for direct reads */
  const __u8* base;      /* kfree_skb: kernel address of the network header */
  __u32 len;
  bool kern;
};

/* What the L2–L4 walk found. */
struct ng_meta {
  __u8 saddr[16] __attribute__((aligned(8)));
  __u8 daddr[16];
  __u16 sport;
  __u16 dport;
  __u16 flags;
  __u16 l3_len;
  __u32 dns_off;   /* first byte of the DNS message (after the TCP length prefix) */
  __u32 dns_end;   /* one past its last readable byte */
  __u32 claim_end; /* one past its last byte as the headers say (kfree_skb: may be paged) */
  __u32 l3_end;    /* one past the last readable byte of the IP packet */
  __u32 tcp_seq;
  __u16 tcp_prefix; /* the TCP length prefix as read */
  __u8 tcp_bare;    /* the segment is only a length prefix */
  __u8 ctl;         /* no DNS message: an ICMP error, SYN or RST to report as such (ng_emit_ctl) */
  __u8 icmp_code;   /* NG_F_ICMP */
  __u8 tcp_odd;     /* the prefix does not describe this segment: maybe a split-off message */
};

/* Out of line, like every rare path of the tc program: counting happens on exits a DNS packet
 * almost never takes, and an inlined map lookup at each of them would sit between the lines of
 * the common path (see ng_parse_general()). */
static __noinline void ng_count(__u32 stat) {
  __u64* v = bpf_map_lookup_elem(&ng_stats, &stat);

  if (v) *v += 1;
}

/* n must be a constant or a verifier-bounded value > 0 at every call site. */
static __always_inline int ng_load(const struct ng_src* s, __u32 off, void* dst, __u64 n) {
  if (off > s->len || n > s->len - off) return -1;
  if (s->kern) return bpf_probe_read_kernel(dst, n, s->base + off);
  return bpf_skb_load_bytes(s->skb, off, dst, n);
}

/* Header bytes: a pointer to n bytes at off, or NULL when they are not there. tc points straight
 * into the linear packet data, so fields are read where they are (no copy to the stack first);
 * headers that are not in the linear part (rare: the stack pulls L2-L4 headers) make the packet
 * skipped, not read through a slower fallback, which would double the paths the verifier walks at
 * every read. The tracepoint copies them into buf (8-aligned: the verifier wants aligned stack
 * reads) with bpf_probe_read_kernel(). */
#define NG_HDR(s, off, buf, n)                                           \
  ({                                                                     \
    const __u8* __p = NULL;                                              \
    __u32 __o = (off);                                                   \
    if ((s)->kern) {                                                     \
      if (!ng_load((s), __o, (buf), (n))) __p = (const __u8*)(buf);      \
    } else if (__o < 0x3FFF && (s)->data + __o + (n) <= (s)->data_end) { \
      __p = (s)->data + __o;                                             \
    }                                                                    \
    __p;                                                                 \
  })

/* Payload bytes: direct when they are in the linear data (every UDP message), copied into buf
 * through the helper otherwise (a TCP socket puts what it sends in page fragments, so the linear
 * data of a real segment ends with the TCP header). */
#define NG_PAYLOAD(s, off, buf, n)                                            \
  ({                                                                          \
    const __u8* __p = NULL;                                                   \
    __u32 __o = (off);                                                        \
    if (!(s)->kern && __o < 0x3FFF && (s)->data + __o + (n) <= (s)->data_end) \
      __p = (s)->data + __o;                                                  \
    else if (!ng_load((s), __o, (buf), (n)))                                  \
      __p = (const __u8*)(buf);                                               \
    __p;                                                                      \
  })

/* Field reads and copies at even (16-bit) and 4-byte offsets of a header: one load each instead
 * of the byte loads clang emits for a u8 pointer. Packet data may be unaligned, which the
 * architectures we build for (x86, arm64) load fine and the verifier accepts for packets; stack
 * buffers are 8-aligned and read at aligned offsets, as the verifier requires. */
static __always_inline __u16 ng_be16(const __u8* p) {
  return bpf_ntohs(*(const __u16*)p);
}

static __always_inline __u32 ng_be32(const __u8* p) {
  return bpf_ntohl(*(const __u32*)p);
}

static __always_inline void ng_cp4(__u8* dst, const __u8* src) {
  *(__u32*)dst = *(const __u32*)src;
}

static __always_inline void ng_cp16(__u8* dst, const __u8* src) {
#pragma unroll
  for (int i = 0; i < 16; i += 4) *(__u32*)(dst + i) = *(const __u32*)(src + i);
}

static __always_inline __u32 ng_min(__u32 a, __u32 b) {
  return a < b ? a : b;
}

/* IPv6: walk extension headers to the L4 header. Returns the L4 protocol, or -1 to stop. Real
 * DNS traffic carries at most a fragment header; every header kind a walk can take multiplies the
 * paths the verifier explores, so the walk stops (and counts NG_STAT_EXT) after a few. */
#define NG_IPV6_EXT_MAX 3
static __always_inline int ng_ipv6_ext(const struct ng_src* s, __u32* off, __u8 next,
                                       struct ng_meta* m) {
  __u8 buf[8] __attribute__((aligned(8)));
  const __u8* h;

#pragma unroll
  for (int i = 0; i < NG_IPV6_EXT_MAX; i++) {
    switch (next) {
      case IPPROTO_UDP_:
      case IPPROTO_TCP_:
      case IPPROTO_ICMPV6_:
        return next;
      case 0:  /* hop-by-hop options */
      case 43: /* routing */
      case 60: /* destination options */
        h = NG_HDR(s, *off, buf, 2);
        if (!h) return -1;
        next = h[0];
        *off += ((__u32)h[1] + 1) * 8;
        break;
      case 51: /* AH: length in 4-octet units minus 2 */
        h = NG_HDR(s, *off, buf, 2);
        if (!h) return -1;
        next = h[0];
        *off += ((__u32)h[1] + 2) * 4;
        break;
      case 44: { /* fragment */
        h = NG_HDR(s, *off, buf, 8);
        if (!h) return -1;
        __u16 fo = ng_be16(&h[2]);
        if (fo & 0xFFF8) { /* offset != 0: no L4 header here */
          ng_count(NG_STAT_FRAG);
          return -1;
        }
        if (fo & 1) m->flags |= NG_F_FRAG;
        next = h[0];
        *off += 8;
        break;
      }
      case 59: /* no next header */
        return -1;
      default: /* ESP (encrypted) and anything else we cannot see through */
        if (next == 50) ng_count(NG_STAT_EXT);
        return -1;
    }
  }
  if (next == IPPROTO_UDP_ || next == IPPROTO_TCP_ || next == IPPROTO_ICMPV6_) return next;
  ng_count(NG_STAT_EXT);
  return -1;
}

/* A TCP segment to or from port 53 without payload: 0 (report it, m->ctl set) for what says
 * whether a DNS connection opened — the client's SYN, the server's SYN+ACK, the server's RST (a
 * refused or reset connection: nothing listens, or `reject with tcp reset`) — and -1 for the rest
 * (ACKs, FINs). The sequence number that survives both NATs names the connection: the SYN's own,
 * or the ACK number of a reply to it (its SYN's plus one); a reset mid-stream acknowledges more. */
static __always_inline int ng_tcp_ctl(struct ng_meta* m, __u8 tcp_flags, __u32 ack) {
  const bool syn = tcp_flags & 0x02, rst = tcp_flags & 0x04, has_ack = tcp_flags & 0x10;

  if (syn && !rst && (has_ack ? m->sport == NG_DNS_PORT : m->dport == NG_DNS_PORT))
    m->flags |= NG_F_SYN;
  else if (rst && !syn && m->sport == NG_DNS_PORT)
    m->flags |= NG_F_RST;
  else
    return -1;
  m->flags |= NG_F_TCP;
  if (has_ack) {
    m->flags |= NG_F_ACK;
    m->tcp_seq = ack;
  }
  m->ctl = 1;
  return 0;
}

/* An ICMP destination unreachable (ICMPv6 type 1) at `off`, quoting what was sent to port 53: the
 * guest's query refused by the server's host (port unreachable), by a firewall rule (`reject`) or
 * undeliverable (host unreachable). The quote is untrusted: every header is bounds-checked against
 * the linear data and the outer packet's end (l3_end), a quoted length only ever shortens what is
 * read, and anything that does not parse is skipped, not reported. Leaves m with the ICMP's sender
 * as saddr, the quoted destination, ports and, when the quote holds a whole DNS header (Linux
 * quotes up to 576 bytes, RFC 1812; RFC 792 only promises 8), the quoted message's bounds. A
 * global function: checked once by the verifier, whichever parser path leads here. */
/* n bytes of linear data at off, or NULL. off is 64-bit and pinned to one register
 * (barrier_var) so the bound check and the pointer arithmetic use the same one: clang otherwise
 * widens a 32-bit offset twice and the verifier then sees an unbounded pointer. */
static __always_inline const __u8* ng_at(const __u8* data, const __u8* end, __u64 off,
                                         const __u32 n) {
  barrier_var(off);
  if (off >= 0x3FFF) return NULL;
  const __u8* p = data + off;
  if (p + n > end) return NULL;
  return p;
}

__noinline int ng_parse_icmp(struct __sk_buff* skb, struct ng_meta* m, __u32 off32, __u32 l3_end,
                             int v6) {
  const __u8* data = (const __u8*)(long)skb->data;
  const __u8* data_end = (const __u8*)(long)skb->data_end;
  __u64 off = off32;
  const __u8* h;
  __u32 proto;

  if (!m) return -1;
  h = ng_at(data, data_end, off, 8);
  if (!h || h[0] != (v6 ? 1 : 3)) return -1;
  m->icmp_code = h[1];
  off += 8;
  if (!v6) {
    h = ng_at(data, data_end, off, 20);
    if (!h || (h[0] >> 4) != 4 || (h[0] & 0x0F) < 5) return -1;
    if (ng_be16(&h[6]) & 0x1FFF) return -1; /* a later fragment quoted: no ports in it */
    proto = h[9];
    ng_cp4(m->daddr, &h[16]);
    off += (h[0] & 0x0F) * 4;
  } else {
    h = ng_at(data, data_end, off, 40);
    if (!h || (h[0] >> 4) != 6) return -1;
    proto = h[6]; /* extension headers in a quote are not walked */
    ng_cp16(m->daddr, &h[24]);
    off += 40;
  }
  if (proto != IPPROTO_UDP_ && proto != IPPROTO_TCP_) return -1;
  h = ng_at(data, data_end, off, 8);
  if (!h) return -1;
  m->sport = ng_be16(&h[0]);
  m->dport = ng_be16(&h[2]);
  if (m->dport != NG_DNS_PORT) return -1; /* about a query, not about a late answer */
  m->flags |= NG_F_ICMP;
  m->ctl = 1;
  if (proto == IPPROTO_TCP_) {
    m->flags |= NG_F_TCP;
    m->tcp_seq = ng_be32(&h[4]);
    return 0;
  }
  /* off < 0x3FFF here (ng_at), so these sums do not wrap. */
  __u32 udp = (__u32)off;
  __u32 end = ng_min(l3_end, udp + ng_be16(&h[4]));
  if (end >= udp + 8 + 12) { /* a whole DNS header quoted: reported as the query it quotes */
    m->ctl = 0;
    m->dns_off = udp + 8;
    m->dns_end = end;
    m->claim_end = end;
  }
  return 0;
}

/* L3 at `off` (version 4 or 6) → L4 → start/end of the DNS message. Returns 0 for a port-53
 * packet that may carry a DNS message, -1 otherwise (the common non-DNS exit). The header-length
 * checks come later (ng_dns_bounds()), after a TCP message split from its prefix is put back
 * together. With `udp_only` (a constant: tc's inline IPv4 path, see ng_tc()) a TCP segment returns
 * 1 instead, for the caller to hand the packet to the general parser, so the TCP code is not
 * inlined into the common path. */
static __always_inline int ng_parse_l3(const struct ng_src* s, __u32 off, int version,
                                       struct ng_meta* m, const bool udp_only) {
  __u8 buf[40] __attribute__((aligned(8)));
  const __u8* h;
  __u32 l3_off = off, claim_end;
  int proto;

  if (version == 4) {
    h = NG_HDR(s, off, buf, 20);
    if (!h) return -1;
    __u32 ihl = (h[0] & 0x0F) * 4;
    __u16 fo = ng_be16(&h[6]);
    if ((h[0] >> 4) != 4 || ihl < 20) return -1;
    proto = h[9];
    if (proto != IPPROTO_UDP_ && proto != IPPROTO_TCP_ && proto != IPPROTO_ICMP_) return -1;
    if (fo & 0x1FFF) {
      if (proto != IPPROTO_ICMP_) ng_count(NG_STAT_FRAG);
      return -1;
    }
    if (fo & 0x2000) m->flags |= NG_F_FRAG;
    ng_cp4(m->saddr, &h[12]);
    ng_cp4(m->daddr, &h[16]);
    claim_end = l3_off + ng_be16(&h[2]);
    off += ihl;
  } else {
    h = NG_HDR(s, off, buf, 40);
    if (!h) return -1;
    if ((h[0] >> 4) != 6) return -1;
    ng_cp16(m->saddr, &h[8]);
    ng_cp16(m->daddr, &h[24]);
    m->flags |= NG_F_IPV6;
    claim_end = l3_off + 40 + ng_be16(&h[4]);
    off += 40;
    proto = ng_ipv6_ext(s, &off, h[6], m);
    if (proto < 0) return -1;
  }
  /* A truncated capture (or a lying length field) ends where the bytes end. */
  __u32 l3_end = ng_min(claim_end, s->len);
  m->l3_end = l3_end;
  m->l3_len = (__u16)ng_min(l3_end - l3_off, 0xFFFF);

  if (proto == IPPROTO_ICMP_ || proto == IPPROTO_ICMPV6_) {
    /* Rare (and pings): out of line, tc only (the quote is read straight from the linear data). */
    if (udp_only) return 1;
    if (s->kern) return -1;
    return ng_parse_icmp(s->skb, m, off, l3_end, version == 6);
  }
  if (proto == IPPROTO_UDP_) {
    h = NG_HDR(s, off, buf, 8);
    if (!h) return -1;
    m->sport = ng_be16(&h[0]);
    m->dport = ng_be16(&h[2]);
    if (m->sport != NG_DNS_PORT && m->dport != NG_DNS_PORT) return -1;
    m->dns_off = off + 8;
    m->claim_end = ng_min(claim_end, off + ng_be16(&h[4]));
    m->dns_end = ng_min(l3_end, m->claim_end);
    return 0;
  }
  if (udp_only) {
    /* TCP's ports are where UDP's are: only a port-53 segment is worth the general parser. */
    h = NG_HDR(s, off, buf, 4);
    if (!h || (ng_be16(&h[0]) != NG_DNS_PORT && ng_be16(&h[2]) != NG_DNS_PORT)) return -1;
    return 1;
  }

  h = NG_HDR(s, off, buf, 20);
  if (!h) return -1;
  m->sport = ng_be16(&h[0]);
  m->dport = ng_be16(&h[2]);
  if (m->sport != NG_DNS_PORT && m->dport != NG_DNS_PORT) return -1;
  if ((h[12] >> 4) < 5) return -1;
  m->tcp_seq = ng_be32(&h[4]);
  off += (h[12] >> 4) * 4;
  if (off >= claim_end) return ng_tcp_ctl(m, h[13], ng_be32(&h[8]));
  /* SYN, ACK, FIN: no payload, decided from the lengths alone; only the connection's opening and
   * refusal are reported (ng_tcp_ctl). A segment carrying a message starts with the 2-byte length
   * prefix (RFC 1035 4.2.2), unless the sender wrote the prefix in a segment of its own (see
   * ng_tcp_split). Later segments of a long message fail the header check. */
  m->flags |= NG_F_TCP;
  m->dns_off = off + 2;
  m->claim_end = claim_end;
  if (off + 2 > l3_end) {
    m->dns_end = l3_end; /* ng_dns_bounds() tells a paged payload from a short one */
    return 0;
  }
  h = NG_PAYLOAD(s, off, buf, 2);
  if (!h) return -1;
  m->tcp_prefix = ng_be16(&h[0]);
  m->tcp_bare = claim_end - off == 2;
  m->tcp_odd = claim_end - off != 2 + (__u32)m->tcp_prefix;
  m->dns_end = ng_min(l3_end, off + 2 + m->tcp_prefix);
  return 0;
}

/* A TCP segment whose first two bytes are not the length of what follows: if this device just saw
 * a bare prefix of the same flow that ends where this segment starts, the segment is that message
 * without its prefix. A bare prefix itself is remembered and never reported. Returns -1 to skip.
 * Out of line: rare, and its map calls are many lines of code (see ng_count()). */
static __noinline int ng_tcp_split_fix(struct ng_meta* m, __u32 where, __u32 ifindex) {
  struct ng_tcp_flow k = {.where = where, .ifindex = ifindex, .sport = m->sport, .dport = m->dport};

  ng_cp16(k.saddr, m->saddr);
  ng_cp16(k.daddr, m->daddr);
  if (m->tcp_bare) {
    struct ng_tcp_pending v = {.next_seq = m->tcp_seq + 2, .msg_len = m->tcp_prefix};
    bpf_map_update_elem(&ng_tcp_split, &k, &v, BPF_ANY);
    ng_count(NG_STAT_TCP_PREFIX);
    return -1;
  }
  struct ng_tcp_pending* p = bpf_map_lookup_elem(&ng_tcp_split, &k);
  if (p && p->next_seq == m->tcp_seq) {
    __u16 len = p->msg_len;
    bpf_map_delete_elem(&ng_tcp_split, &k);
    m->dns_off -= 2;
    m->claim_end = ng_min(m->claim_end, m->dns_off + len);
    m->dns_end = ng_min(m->l3_end, m->dns_off + len);
  }
  return 0;
}

/* Enough bytes for a DNS header? A kfree_skb copy whose headers claim more than its linear data
 * holds has its payload in page fragments, which the tracepoint cannot read: counted apart. */
static __always_inline int ng_dns_bounds(const struct ng_src* s, const struct ng_meta* m) {
  if (m->dns_end >= m->dns_off + 12) return 0;
  ng_count(s->kern && m->claim_end >= m->dns_off + 12 ? NG_STAT_PAGED : NG_STAT_SHORT);
  return -1;
}

/* The question, raw: its first wire bytes (labels, qtype, qclass, and whatever follows when the
 * question is shorter) are copied into ev->qname as they are, and ev->qrest says how many message
 * bytes there were from qoff on. No per-byte work here: the loader decodes the name, qtype and the
 * parse flags on its poll thread (bpf/dns_wire.h), before any consumer sees the event. The record
 * has room for `cap` question bytes (a constant at every call: one of NG_DNS_REC_Q*), of which
 * min(avail, cap, NG_DNS_QNAME_MAX) are copied (the loader reads exactly those). tc copies straight
 * from the linear data with word loads when the record's worth is there, or, for the smallest
 * record, when at least 8 bytes are; through one bounded helper call otherwise (TCP payload in
 * page fragments, kfree_skb, the rare longer question that ends before its record's room). */
static __always_inline void ng_question(const struct ng_src* s, __u32 qoff, __u32 avail,
                                        struct ng_dns_event* ev, const __u32 cap) {
  const __u32 w = cap < NG_DNS_QNAME_MAX ? cap : NG_DNS_QNAME_MAX;

  ev->qrest = avail > 0xFFFF ? 0xFFFF : avail;
  if (!s->kern && qoff < 0x3FFF && s->data + qoff + w <= s->data_end) {
    /* Word copies; the packet side may be unaligned, which x86 and arm64 load fine. */
    const __u64* src = (const __u64*)(s->data + qoff);
    __u64* dst = (__u64*)ev->qname;
#pragma unroll
    for (int i = 0; i < w / 8; i++) dst[i] = src[i];
    return;
  }
  /* 64-bit so the compiler checks the very register it passes to the helper. */
  __u64 n = avail;
  if (n > w) n = w;
  barrier_var(n);
  if (n == 0 || n > w) goto none;
  /* The smallest record, with fewer bytes left in the linear data than it has room for (every
   * query and short answer): whole words, then the last 8 bytes once more, ending where the message
   * ends. The helper call and its kernel code cost more at low rates than these few loads. */
  /* q: qoff widened once, so the bound check and the pointer use the same register (clang would
   * otherwise widen it twice, and the verifier gives a packet pointer no range when its offset is
   * not the one it saw bounded). */
  __u64 q = qoff;
  barrier_var(q);
  if (cap == NG_DNS_REC_Q1 && !s->kern && n >= 8 && q < 0x3FFF) {
    const __u8* src = s->data + q;
    const __u8* tail = src + (n - 8);
    if (tail + 8 <= s->data_end) {
      *(__u64*)(ev->qname + (n - 8)) = *(const __u64*)tail;
#pragma unroll
      for (int i = 0; i < NG_DNS_REC_Q1 / 8; i++) {
        if (8 * (i + 1) > n || src + 8 * (i + 1) > s->data_end) break;
        ((__u64*)ev->qname)[i] = ((const __u64*)src)[i];
      }
      return;
    }
  }
  if (!ng_load(s, qoff, ev->qname, n)) return;
none:
  ev->qrest = 0; /* nothing captured: the loader reports a parse error */
}

/* How many question bytes the loader's decoder (bpf/dns_wire.cpp) reads before it decides: up to
 * the name's zero byte and the two qtype bytes, or up to the first byte that makes it an error (a
 * pointer, a reserved label type). A record with room for that many bytes decodes exactly as a
 * 128-byte capture would, so the record size follows the question instead of the worst case. The
 * walk hops from length byte to length byte (a handful of loads from the linear data the copy reads
 * next). What it cannot settle takes the largest record: names of more labels than it follows,
 * questions it cannot read directly (kfree_skb, TCP payload in page fragments) and names cut by the
 * end of the data. It does not look at where the message ends: past that end it reads other bytes
 * of the frame and returns more than the message holds, which is still room enough. Comparing with
 * the message length would give the verifier a range of it for every way out of the loop (it is a
 * helper's size argument later). A global function: the verifier checks it once, not once for every
 * way the parser can reach it (that took the tc program from 145k to 450k-860k instructions
 * verified), at the price of a BPF-to-BPF call. */
#define NG_QWALK_LABELS 16
__noinline int ng_question_need(struct __sk_buff* skb, __u32 qoff) {
  const __u8* data = (const __u8*)(long)skb->data;
  const __u8* data_end = (const __u8*)(long)skb->data_end;
  __u32 pos = 0;

  if (qoff >= 0x3FFF) return NG_DNS_QNAME_MAX;
#pragma clang loop unroll(disable)
  for (int i = 0; i < NG_QWALK_LABELS; i++) {
    if (pos >= NG_DNS_QNAME_MAX) break;
    const __u8* p = data + qoff + pos;
    if (p + 1 > data_end) break;
    __u8 len = *p;
    if (len == 0) return pos + 3; /* zero byte and qtype */
    if (len & 0xC0) return pos + 1;
    pos += len + 1;
  }
  return NG_DNS_QNAME_MAX;
}

/* A record with room for `cap` question bytes (a constant at every call, so the reservation's
 * size is one too), the question copied in; NULL when the ring is full. */
static __always_inline struct ng_dns_event* ng_reserve(const struct ng_src* s, __u32 qoff,
                                                       __u32 avail, const __u32 cap) {
  struct ng_dns_event* ev = bpf_ringbuf_reserve(&ng_events, NG_DNS_REC_HEAD + cap, 0);

  if (ev) ng_question(s, qoff, avail, ev, cap);
  return ev;
}

/* Envelope of one event: where it was seen. */
struct ng_where {
  __u64 netns_cookie; /* tc: the attachment id instead (0: none), see ng_tc() and dns_event.h */
  __u32 netns_ino;
  __u32 ifindex;
  __u32 drop_reason;
  __u16 kind;
  __u16 dir;
};

/* The fields every event has: where and when it was seen, addresses and ports. */
static __always_inline void ng_fill(struct ng_dns_event* ev, const struct ng_meta* m,
                                    const struct ng_where* w) {
  ev->ts_ns = bpf_ktime_get_ns();
  ev->netns_cookie = w->netns_cookie;
  ev->netns_ino = w->netns_ino;
  ev->ifindex = w->ifindex;
  ev->drop_reason = w->drop_reason;
  ev->kind = w->kind;
  ev->dir = w->dir;
  ng_cp16(ev->saddr, m->saddr);
  ng_cp16(ev->daddr, m->daddr);
  ev->sport = m->sport;
  ev->dport = m->dport;
  ev->flags = m->flags;
  ev->pkt_len = m->l3_len;
}

static __always_inline void ng_emit(const struct ng_src* s, const struct ng_meta* m,
                                    const struct ng_where* w) {
  __u8 buf[12] __attribute__((aligned(8)));
  struct ng_dns_event* ev;
  __u32 qoff = m->dns_off + 12;
  const __u8* hdr = NG_PAYLOAD(s, m->dns_off, buf, 12);

  if (!hdr) return;
  __u16 fl = ng_be16(&hdr[2]);
  __u8 opcode = (fl >> 11) & 0xF;
  /* Every DNS message in use carries exactly one question; opcodes 3 and 7–15 are unassigned.
   * Port-53 traffic failing this is not DNS (or a TCP continuation segment). */
  if (ng_be16(&hdr[4]) != 1 || opcode == 3 || opcode > 6) {
    ng_count(NG_STAT_NOT_DNS);
    return;
  }

  /* The smallest record that holds what the decoder will read (see NG_DNS_REC_HEAD for why these
   * sizes). One reservation per size: bpf_ringbuf_reserve() takes a constant size, and
   * bpf_ringbuf_reserve_dynptr() with an exact size would need a helper or kfunc call for every
   * access to the record and would break the cache-line alignment of the records. */
  __u32 avail = m->dns_end - qoff;
  /* A message that ends within the smallest record needs no walk (most queries, short answers). */
  __u32 need = avail <= NG_DNS_REC_Q1 ? avail
               : s->kern              ? NG_DNS_QNAME_MAX
                                      : (__u32)ng_question_need(s->skb, qoff);
  if (need <= NG_DNS_REC_Q1)
    ev = ng_reserve(s, qoff, avail, NG_DNS_REC_Q1);
  else if (need <= NG_DNS_REC_Q2)
    ev = ng_reserve(s, qoff, avail, NG_DNS_REC_Q2);
  else
    ev = ng_reserve(s, qoff, avail, NG_DNS_REC_Q3);
  if (!ev) {
    ng_count(NG_STAT_LOST);
    return;
  }
  /* Every field the loader passes on is written below (no memset); qtype and the dotted qname are
   * filled in by the loader from the raw question, and it stamps the hop from the device
   * (DnsTracer), off the packet path. */
  ng_fill(ev, m, w);
  ev->dns_id = ng_be16(&hdr[0]);
  if (fl & 0x8000) {
    ev->flags |= NG_F_QR;
    if (ng_be16(&hdr[6]) == 0) ev->flags |= NG_F_NOANS; /* no answer records */
  }
  if (fl & 0x0200) ev->flags |= NG_F_TC;
  ev->rcode = m->flags & NG_F_ICMP ? m->icmp_code : fl & 0xF;

  __u64 wake = BPF_RB_NO_WAKEUP;
  /* Batching: the reader polls every few ms; wake it early only when the ring is half full. Both
   * queries read lines the reservation just touched. */
  if (bpf_ringbuf_query(&ng_events, BPF_RB_AVAIL_DATA) >=
      bpf_ringbuf_query(&ng_events, BPF_RB_RING_SIZE) / 2)
    wake = BPF_RB_FORCE_WAKEUP;
  bpf_ringbuf_submit(ev, wake);
}

/* An event without a DNS message (m->ctl: an ICMP error, a SYN or a RST; dns_event.h): the
 * smallest record, no question, the TCP sequence number in the first question bytes. Out of line:
 * rare, and kept away from the common path's lines. */
static __noinline void ng_emit_ctl(const struct ng_meta* m, const struct ng_where* w) {
  struct ng_dns_event* ev = bpf_ringbuf_reserve(&ng_events, NG_DNS_REC_HEAD + NG_DNS_REC_Q1, 0);

  if (!ev) {
    ng_count(NG_STAT_LOST);
    return;
  }
  ng_fill(ev, m, w);
  ev->dns_id = 0;
  ev->rcode = m->icmp_code;
  ev->qrest = 0;
  *(__u32*)ev->qname = m->tcp_seq;
  bpf_ringbuf_submit(ev, 0);
}

/* The TCP fix-up and the length check, shared by both hooks once the packet's netns and device
 * are known. */
static __always_inline int ng_finish(const struct ng_src* s, struct ng_meta* m,
                                     const struct ng_where* w) {
  /* A tc run of one of our filters names its device by attachment id, anything else by netns. */
  if ((m->tcp_bare || m->tcp_odd) &&
      ng_tcp_split_fix(m, w->netns_ino ? w->netns_ino : (__u32)w->netns_cookie, w->ifindex))
    return -1;
  return ng_dns_bounds(s, m);
}

/* Everything tc sees other than an untagged IPv4 UDP packet: VLAN tags, IPv6, TCP. Out of line
 * (a BPF-to-BPF call) so that its code does not sit between the lines of the common path: at
 * moderate packet rates the program's code is cold at every packet. With the general parser
 * inlined, an IPv4 UDP query ran through ~37 lines of JITed code; a diagnostic IPv4/UDP-only
 * build ran through ~25 and was ~40 ns per packet cheaper at 10k queries/s. This split measured
 * −30 ns there (docs/benchmarks/dns-bpf.md, round 6). m is cleared first: the inline path may
 * have written parts of it before it gave up on a TCP segment. Returns what ng_parse_l3() does
 * without `udp_only`: 0 or -1. */
static __noinline int ng_parse_general(struct __sk_buff* skb, struct ng_meta* m) {
  struct ng_src s = {
      .skb = skb,
      .data = (__u8*)(long)skb->data,
      .data_end = (__u8*)(long)skb->data_end,
      .len = skb->len,
  };
  __u8 buf[2] __attribute__((aligned(8)));
  const __u8* eth;
  __u32 off = 14;
  __u16 proto;

  __builtin_memset(m, 0, sizeof(*m));
  eth = NG_HDR(&s, 12, buf, 2);
  if (!eth) return -1;
  proto = ng_be16(eth);
  /* Up to two tags (802.1ad outer + 802.1Q inner); an offloaded tag is not in the data at all. */
#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (proto != ETH_P_8021Q_ && proto != ETH_P_8021AD_) break;
    eth = NG_HDR(&s, off + 2, buf, 2);
    if (!eth) return -1;
    proto = ng_be16(eth);
    off += 4;
    m->flags |= NG_F_VLAN;
  }
  if (proto == ETH_P_IP_) return ng_parse_l3(&s, off, 4, m, false);
  if (proto == ETH_P_IPV6_) return ng_parse_l3(&s, off, 6, m, false);
  return -1;
}

/* The direction of a tc run. The kernel sets sk_buff::tc_at_ingress as the packet enters the
 * ingress hook and clears it for the egress hook (tcx_set_ingress() in sch_handle_ingress() and
 * sch_handle_egress(), which run clsact's filters as well as tcx programs; act_mirred reads the
 * same bit through skb_at_tc_ingress()). So it names the hook the program runs in, whatever the
 * packet did before: forwarded, bridged, redirected or sent back out the device it came in on,
 * where comparing ingress_ifindex with ifindex would call the egress pass ingress. One program
 * for both hooks keeps one copy of its code in the caches instead of two. */
struct sk_buff___ng {
  __u8 tc_at_ingress : 1;
} __attribute__((preserve_access_index));

SEC("tc")
int ng_tc(struct __sk_buff* skb) {
  struct ng_src s = {
      .skb = skb,
      .data = (__u8*)(long)skb->data,
      .data_end = (__u8*)(long)skb->data_end,
      .len = skb->len,
  };
  struct ng_meta m = {};
  __u16 proto = bpf_ntohs(skb->protocol);
  int r = 1;

  /* Cheap exit for what cannot be IP (ARP, LLDP...) before touching packet bytes. */
  if (proto != ETH_P_IP_ && proto != ETH_P_IPV6_ && proto != ETH_P_8021Q_ && proto != ETH_P_8021AD_)
    return TC_ACT_UNSPEC_;
  /* The common case inline: an untagged IPv4 UDP packet (EtherType 0x0800 in the frame itself).
   * Everything else goes through ng_parse_general(). */
  if (proto == ETH_P_IP_ && s.data + 14 <= s.data_end && ng_be16(s.data + 12) == ETH_P_IP_)
    r = ng_parse_l3(&s, 14, 4, &m, true);
  if (r > 0) r = ng_parse_general(skb, &m);
  if (r) return TC_ACT_UNSPEC_;

  /* The kernel skb behind the context is a BTF pointer: plain (CO-RE relocated) loads walk it,
   * much cheaper than a bpf_probe_read_kernel() per hop. */
  struct sk_buff* kskb = bpf_cast_to_kern_ctx(skb);
  struct sk_buff___ng* kbits = (void*)kskb;
  /* Which attachment this run is for: the loader gives each filter it adds a classid, and cls_bpf
   * writes it into the skb's qdisc cb (tc_classid, 16 bits) just before running the program, so
   * it is a load from a line of the skb. The loader knows each attachment's netns (inode and
   * cookie), so neither is read here: both sit on lines of struct net that nothing else on this
   * path touches, a miss per packet at low rates (the inode's load at the end of
   * skb->dev->nd_net->ns had ~4 % of the program's samples at 25k queries/s). 0 means no filter of
   * ours (BPF_PROG_TEST_RUN): the inode comes from the kernel then. */
  __u32 attach_id = skb->tc_classid;
  struct ng_where w = {
      .netns_cookie = attach_id,
      .ifindex = skb->ifindex,
      .kind = NG_EV_PACKET,
      .dir = BPF_CORE_READ_BITFIELD(kbits, tc_at_ingress) ? NG_DIR_INGRESS : NG_DIR_EGRESS,
  };
  if (!attach_id) w.netns_ino = kskb->dev->nd_net.net->ns.inum;
  if (m.ctl) {
    ng_emit_ctl(&m, &w);
    return TC_ACT_UNSPEC_;
  }
  if (ng_finish(&s, &m, &w)) return TC_ACT_UNSPEC_;
  ng_emit(&s, &m, &w);
  return TC_ACT_UNSPEC_;
}

/* skb:kfree_skb(skb, location, reason[, rx_sk]). Runs for every freed-as-dropped skb on the node,
 * so the non-DNS exit is a handful of reads. Only the linear part of the skb is parsed: a paged
 * skb's fragments are struct page references, and turning one into an address needs the kernel's
 * page_address() (page_offset_base and vmemmap_base, randomized and not exported), so a dropped
 * segment whose DNS bytes are in fragments is counted (NG_STAT_PAGED), not reported. Two
 * attachments of the same code: tp_btf (typed arguments, skb fields read with plain loads) where
 * the kernel allows it, raw_tp (every read through bpf_probe_read_kernel) otherwise; the loader
 * picks one. */
#define NG_SKB_READ(btf, skb, field) ((btf) ? (skb)->field : BPF_CORE_READ((skb), field))

static __always_inline int ng_drop(struct sk_buff* skb, __u32 reason, const bool btf) {
  if (!ng_reason_is_drop(reason)) return 0;

  __u16 nh = NG_SKB_READ(btf, skb, network_header);
  unsigned char* head = NG_SKB_READ(btf, skb, head);
  unsigned char* data = NG_SKB_READ(btf, skb, data);
  __u32 linear = NG_SKB_READ(btf, skb, len) - NG_SKB_READ(btf, skb, data_len);
  if (nh == (__u16)~0U || !head) return 0;
  const __u8* l3 = head + nh;
  const __u8* end = data + linear;
  if (end <= l3 || end - l3 > 0xFFFF) return 0;

  struct ng_src s = {.base = l3, .len = (__u32)(end - l3), .kern = true};
  struct ng_meta m = {};
  __u8 v;
  if (bpf_probe_read_kernel(&v, 1, l3)) return 0;
  v >>= 4;
  if (v == 4) {
    if (ng_parse_l3(&s, 0, 4, &m, false)) return 0;
  } else if (v == 6) {
    if (ng_parse_l3(&s, 0, 6, &m, false)) return 0;
  } else {
    return 0;
  }

  /* The device's netns names the hop; an skb already detached from its device (socket layer)
   * still has its socket's. Only DNS packets get here, so CO-RE reads are fine. */
  struct net_device* dev = BPF_CORE_READ(skb, dev);
  struct net* net = NULL;
  struct ng_where w = {.kind = NG_EV_DROP, .dir = NG_DIR_NONE, .drop_reason = reason};
  if (dev) {
    w.ifindex = BPF_CORE_READ(dev, ifindex);
    net = BPF_CORE_READ(dev, nd_net.net);
  } else {
    struct sock* sk = BPF_CORE_READ(skb, sk);
    if (sk) net = BPF_CORE_READ(sk, __sk_common.skc_net.net);
  }
  if (net) {
    w.netns_ino = BPF_CORE_READ(net, ns.inum);
    w.netns_cookie = ng_net_cookie(net);
  }
  if (m.ctl) {
    ng_emit_ctl(&m, &w); /* a dropped SYN: why a TCP retry never connected */
    return 0;
  }
  if (ng_finish(&s, &m, &w)) return 0;
  ng_emit(&s, &m, &w);
  return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(ng_kfree_skb_btf, struct sk_buff* skb, void* location, enum skb_drop_reason reason) {
  return ng_drop(skb, reason, true);
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(ng_kfree_skb, struct sk_buff* skb, void* location, unsigned int reason) {
  return ng_drop(skb, reason, false);
}
