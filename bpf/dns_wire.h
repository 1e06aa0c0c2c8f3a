// Decoding of the DNS question the tracer's BPF programs capture raw. The kernel copies the
// wire-format question (length-prefixed labels, then qtype and qclass) into ng_dns_event::qname
// without looking at it; the loader decodes it on the poll thread, so every consumer receives the
// dotted name, qtype and the NG_F_PARSE_ERR / NG_F_QNAME_TRUNC flags (bpf/dns_event.h).
// No libbpf here: the fuzz build compiles this file on its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dns_event.h"

namespace nodegate::dns {

struct WireQuestion {
  char qname[NG_DNS_QNAME_MAX] = {};  // dotted, NUL-terminated; "" for the root and on errors
  uint16_t qtype = 0;                 // 0 = not captured (never a valid type in a question)
  uint16_t flags = 0;                 // NG_F_PARSE_ERR and/or NG_F_QNAME_TRUNC, nothing else
};

// Decodes the question from `captured` (the first `size` bytes of the message after its 12-byte
// header). `rest` is how many bytes the message had from there on: more than `size` means the
// capture stopped early (the question may continue: NG_F_QNAME_TRUNC, never an error), equal means
// the packet itself ends there (a name or qtype running past it is NG_F_PARSE_ERR). A `rest`
// smaller than `size` is treated as `size` bytes of message; a null `captured` as nothing captured.
// - NG_F_PARSE_ERR: compression pointer (nothing precedes the question, so a pointer there is
//   forward or a loop), reserved label type or label longer than 63, name over 255 bytes, name or
//   qtype running past the end of the message. qname is "" and qtype 0.
// - NG_F_QNAME_TRUNC: the question did not fit: qname is the dotted text of what was captured (a
//   prefix of the name, or all of it when only qtype was cut; at most NG_DNS_QNAME_MAX-1 chars)
//   and qtype is 0 unless it was captured. Only the captured bytes are checked.
// Label bytes are copied as they are, as the kernel-side walk did before.
WireQuestion decodeQuestion(const uint8_t* captured, std::size_t size, std::size_t rest);

// Rebuilds the delivered event from one ring record of `size` bytes (bpf/dns_event.h: the fields of
// struct ng_dns_event up to qname, then min(qrest, NG_DNS_QNAME_MAX, size - NG_DNS_REC_HEAD) raw
// question bytes): copies the fixed part, decodes the question (qname, qtype, the two flags; qrest
// is kept) and clears hop, which the loader stamps. A record without a DNS message (qrest 0 with
// NG_F_ICMP, NG_F_SYN or NG_F_RST) gets an empty name, no parse error, and tcp_seq from its first
// four question bytes when it is about TCP (0 otherwise). Returns false, leaving `ev` unspecified,
// for a record shorter than its fixed part (not written by this build's programs).
bool decodeRecord(const void* rec, std::size_t size, ng_dns_event& ev);

}  // namespace nodegate::dns
