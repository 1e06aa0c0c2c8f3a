/* The record the DNS tracer's BPF programs put on the ring buffer; shared by the programs in bpf/
 * and user space. Plain C, fixed-width types only, no vmlinux types. Layout changes need both sides
 * rebuilt (they are, in one build).
 *
 * Changelog (owner: bpf helper; tell the user-space side when this changes):
 * - 2026-11-29 added NG_DIR_NONE (drop events: kfree_skb has no direction), NG_F_VLAN (frame
 *   carried 802.1Q/802.1ad tags), NG_F_FRAG (first fragment of a fragmented datagram),
 *   NG_F_HOP_SET (hop came from the per-device map; 0 without it means "unconfigured device").
 *   netns_cookie is filled by tc events (bpf_get_netns_cookie) and by drop events (struct net).
 *   pkt_len = L3 length (IP header + payload) as seen, so truncation can be recognised. No field
 *   moved.
 * - 2026-11-29 (round 2) hop and NG_F_HOP_SET are stamped by the loader (DnsTracer) from its device
 *   table before the callback sees the event, no longer by the BPF side: same meaning for users.
 *   The BPF side reads the question's first length byte into the byte before qname, so _pad must
 *   stay right before qname (a static assert in dns_tracer.bpf.c checks it); it is 0 on delivery.
 *   No field moved.
 * - 2026-11-29 (round 3) the BPF side no longer walks the question name: it copies the raw
 *   wire-format question (labels, then qtype and qclass) into qname, min(qrest, NG_DNS_QNAME_MAX)
 *   bytes, and the loader decodes it on the poll thread (bpf/dns_wire.h) before the callback sees
 *   the event, so qname/qtype/NG_F_PARSE_ERR/NG_F_QNAME_TRUNC reach users as before. _pad is now
 *   qrest: the number of message bytes from the question on (clipped to 0xFFFF), kept on delivery.
 *   Changed meaning: a question longer than the capture (a name of more than 124 dotted
 *   characters) now comes with qtype 0 (unknown) and NG_F_QNAME_TRUNC, qname holding what was
 *   captured; every hop captures the same bytes, so such queries still correlate (by id and name
 *   prefix). Errors past the first 128 question bytes (a pointer or bad label there, a name over
 *   255 bytes) are no longer detected: those questions are reported truncated, not malformed.
 *   One tc program (ng_tc) now serves both hooks; dir comes from the kernel's skb->tc_at_ingress
 *   (same values for real attachments; a BPF_PROG_TEST_RUN run is outside any hook and says
 *   NG_DIR_EGRESS). No field moved.
 * - 2026-11-30 (round 4) the ring record is shorter than struct ng_dns_event: its first
 *   NG_DNS_REC_HEAD bytes (every field up to qname, same layout), then room for NG_DNS_REC_Q1,
 *   NG_DNS_REC_Q2 or NG_DNS_REC_Q3 question bytes, the smallest that holds every byte the loader's
 *   decoder reads (the kernel finds the end of the name by hopping over its labels). It carries
 *   min(qrest, NG_DNS_QNAME_MAX, record size - NG_DNS_REC_HEAD) question bytes; the loader rebuilds
 *   the full struct (bpf/dns_wire.h, decodeRecord()) and the decoded fields are exactly what the
 *   128-byte capture gave, so nothing changes for users. Drop events use the same rule. On the
 *   ring, hop and qtype are no longer written (stale bytes): decodeRecord() sets both.
 * - 2026-11-30 (round 5) tc events: netns_cookie is no longer read by the BPF side (a cold line of
 *   struct net per packet); the loader fills it in on delivery from its attachment of the device
 *   (SO_NETNS_COOKIE, taken in the device's netns at attach time). Same value for attached
 *   devices; 0 for a device the loader did not attach (BPF_PROG_TEST_RUN runs). No field moved.
 * - 2026-11-30 (round 6) tc events of the loader's filters no longer read netns_ino either (a
 *   cold line of struct net per packet). Each filter the loader adds carries a classid of its
 *   choosing (the attachment id, 1..0xFFEF), which cls_bpf puts in the skb before the program
 *   runs; on the ring such an event has netns_ino 0 and the attachment id in netns_cookie's place,
 *   and the loader fills in both from its table of attachments before delivery. Same values for
 *   users. A tc run with no classid (BPF_PROG_TEST_RUN) still reads the inode from the kernel and
 *   gets cookie 0; an event of a filter detached before its event was delivered comes with
 *   netns_ino 0, cookie 0 and no hop. No field moved.
 * - 2026-12-02 (failure taxonomy, issue 19) three kinds of tc event besides DNS messages, all
 *   kind NG_EV_PACKET, told apart by flags (consumers that only know DNS messages must skip events
 *   with NG_F_ICMP, NG_F_SYN or NG_F_RST):
 *   - NG_F_ICMP: an ICMP destination unreachable (ICMPv6 type 1) quoting a datagram or segment to
 *     port 53. saddr is the ICMP's sender, daddr/sport/dport the quoted packet's destination,
 *     source port and destination port, rcode the ICMP code. When the quote holds the whole DNS
 *     header, dns_id and the question are the quoted query's; otherwise qrest is 0 and qname "".
 *     A quoted TCP segment adds NG_F_TCP and its sequence number in tcp_seq.
 *   - NG_F_SYN / NG_F_RST (with NG_F_TCP): a TCP segment without payload that opens a connection
 *     to port 53 (SYN), accepts one (SYN+ACK from port 53) or refuses or resets one (RST from port
 *     53). NG_F_ACK when the segment has ACK set; tcp_seq is then its acknowledgement number,
 *     else its sequence number. No DNS fields (qrest 0). kfree_skb reports dropped ones too.
 *   NG_F_NOANS on responses whose ANCOUNT is 0 (with rcode NOERROR: NODATA). On the ring a
 *   record without a question (qrest 0) of these kinds carries tcp_seq in its first 4 question
 *   bytes; the loader moves it to the new field tcp_seq (appended after qname: no field moved). */
#ifndef NODEGATE_DNS_EVENT_H
#define NODEGATE_DNS_EVENT_H

#ifdef __BPF__
/* vmlinux.h provides the __u* types on the kernel side. */
#else
#include <linux/types.h>
#endif

#define NG_DNS_QNAME_MAX                                                 \
  128 /* bytes of the question name kept, dotted, NUL-terminated (on the \
         ring: bytes of the raw wire-format question captured) */

/* Ring record sizes. With the ring's 8-byte header the three sizes take 128, 192 and 256 bytes of
 * ring: multiples of 64, so every record starts on a cache line and a record with a short question
 * (most of them: a name of up to 36 dotted characters, such as
 * kubernetes.default.svc.cluster.local) writes two lines where the 216-byte record
 * wrote four or five, straddling lines at varying offsets. Only the bytes written are touched: the
 * largest size is padded to keep the alignment, its last 40 bytes are never written. */
#define NG_DNS_REC_HEAD 80 /* offsetof(struct ng_dns_event, qname) */
#define NG_DNS_REC_Q1 40
#define NG_DNS_REC_Q2 104
#define NG_DNS_REC_Q3 168 /* NG_DNS_QNAME_MAX captured, 40 bytes of padding */

enum ng_dns_event_kind {
  NG_EV_PACKET = 1, /* a DNS packet seen by a tc program */
  NG_EV_DROP = 2,   /* a DNS packet freed by the kernel with a drop reason (kfree_skb) */
};

enum ng_dns_dir {
  NG_DIR_INGRESS = 0,
  NG_DIR_EGRESS = 1,
  NG_DIR_NONE = 2, /* NG_EV_DROP */
};

/* flags */
#define NG_F_QR 0x0001        /* response */
#define NG_F_TC 0x0002        /* truncated */
#define NG_F_TCP 0x0004       /* carried over TCP (length prefix parsed) */
#define NG_F_IPV6 0x0008      /* IPv6 packet */
#define NG_F_PARSE_ERR 0x0010 /* port 53 but not parseable DNS (qname empty) */
#define NG_F_QNAME_TRUNC                                                                     \
  0x0020                    /* question longer than the capture (or the name longer than     \
                               NG_DNS_QNAME_MAX-1): qname is the captured prefix; qtype 0 if \
                               it was not captured */
#define NG_F_VLAN 0x0040    /* 802.1Q/802.1ad tag(s) in the frame (skipped, up to two) */
#define NG_F_FRAG 0x0080    /* first fragment of a fragmented IP datagram */
#define NG_F_HOP_SET 0x0100 /* hop looked up from the device map */
#define NG_F_NOANS 0x0200   /* response with ANCOUNT 0 (NOERROR: NODATA) */
#define NG_F_ICMP 0x0400    /* ICMP destination unreachable quoting a packet to port 53 */
#define NG_F_SYN 0x0800     /* TCP SYN (or SYN+ACK from port 53) without payload: no DNS fields */
#define NG_F_RST 0x1000     /* TCP RST from port 53: no DNS fields */
#define NG_F_ACK 0x2000     /* NG_F_SYN/NG_F_RST segment with ACK: tcp_seq is the ack number */
/* Events that are not a DNS message seen on the wire. */
#define NG_F_NOT_DNS_MSG (NG_F_ICMP | NG_F_SYN | NG_F_RST)

struct ng_dns_event {
  __u64 ts_ns;        /* bpf_ktime_get_ns() */
  __u64 netns_cookie; /* the netns cookie (SO_NETNS_COOKIE) where known, else 0: tc events get
                         it from the loader's table of attached devices, drop events from
                         struct net (on the ring, tc events carry the attachment id here) */
  __u32 netns_ino;    /* inode of the skb's device netns (matches /proc/PID/ns/net); tc events
                         of attached devices get it from the loader's table */
  __u32 ifindex;
  __u32 drop_reason; /* NG_EV_DROP: enum skb_drop_reason value, decoded by name in user space */
  __u16 kind;        /* enum ng_dns_event_kind */
  __u16 dir;         /* enum ng_dns_dir */
  __u8 saddr[16];    /* IPv4 in the first 4 bytes */
  __u8 daddr[16];
  __u16 sport; /* host byte order */
  __u16 dport;
  __u16 dns_id;
  __u16 flags; /* NG_F_* */
  __u16 qtype;
  __u8 rcode; /* DNS rcode; NG_F_ICMP: the ICMP code */
  __u8 hop;   /* hop class configured per attached device (user space assigns) */
  __u16 pkt_len;
  __u16 qrest; /* bytes of the DNS message from the question on, clipped to 0xFFFF */
  char qname[NG_DNS_QNAME_MAX]; /* delivered: dotted name; on the ring: raw question bytes */
  __u32 tcp_seq; /* NG_F_SYN/NG_F_RST, and NG_F_ICMP quoting TCP: see the changelog (delivered
                    only; on the ring in the question bytes) */
};

#endif
