// Decoder of the ring records the BPF tracer writes and of the raw DNS question in them
// (bpf/dns_wire.cpp). The first input byte picks how much of the message the "capture" holds (as
// the kernel's record size would, and larger, which the decoder must also survive); the rest is the
// message after its header. The output must always be a NUL-terminated name within the record and
// only the two question flags, and a ring record must decode as its captured bytes do (one with
// no message and a not-a-message flag, as ICMP/SYN/RST records are, decodes to no question).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dns_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t rest = size - 1;
  const std::uint8_t* msg = data + 1;
  // 0..255: often below rest (a cut capture), sometimes above (rest is then all there is).
  const std::size_t cap = data[0] < rest ? data[0] : rest;
  using nodegate::dns::decodeQuestion;
  const auto q = decodeQuestion(msg, cap, rest);
  if (std::memchr(q.qname, '\0', sizeof q.qname) == nullptr) std::abort();
  if (q.flags & ~(NG_F_PARSE_ERR | NG_F_QNAME_TRUNC)) std::abort();
  if ((q.flags & NG_F_PARSE_ERR) && (q.qname[0] != '\0' || q.qtype != 0)) std::abort();
  // With the whole message there, only a name longer than the record can be truncated.
  if (cap == rest && (q.flags & NG_F_QNAME_TRUNC) && rest <= NG_DNS_QNAME_MAX) std::abort();

  // A ring record with room for data[0] question bytes, as many of them filled as the message has.
  const std::size_t room = data[0];
  std::vector<std::uint8_t> rec(NG_DNS_REC_HEAD + room, 0xA5);
  ng_dns_event head;
  std::memset(&head, 0x5A, sizeof head);
  head.qrest = static_cast<std::uint16_t>(rest > 0xFFFF ? 0xFFFF : rest);
  std::memcpy(rec.data(), &head, NG_DNS_REC_HEAD);
  std::memcpy(rec.data() + NG_DNS_REC_HEAD, msg, room < rest ? room : rest);
  ng_dns_event ev;
  if (!nodegate::dns::decodeRecord(rec.data(), rec.size(), ev)) std::abort();
  if (std::memchr(ev.qname, '\0', sizeof ev.qname) == nullptr) std::abort();
  if (head.qrest == 0 && (head.flags & NG_F_NOT_DNS_MSG)) {
    // An ICMP error without its quote, a SYN, a RST: no message, so nothing to decode and no
    // parse error (the head's fill has those flags set).
    if (ev.qname[0] != '\0' || ev.qtype != 0) std::abort();
    if (ev.flags & (NG_F_PARSE_ERR | NG_F_QNAME_TRUNC)) std::abort();
  } else {
    std::size_t captured = room < head.qrest ? room : head.qrest;
    if (captured > NG_DNS_QNAME_MAX) captured = NG_DNS_QNAME_MAX;
    const auto same = decodeQuestion(msg, captured, head.qrest);
    if (std::strcmp(same.qname, ev.qname) != 0 || same.qtype != ev.qtype) std::abort();
    if ((ev.flags & (NG_F_PARSE_ERR | NG_F_QNAME_TRUNC)) != same.flags) std::abort();
  }
  if (ev.hop != 0 || ev.dns_id != head.dns_id || ev.ts_ns != head.ts_ns) std::abort();
  // Shorter than the fixed part is refused, never read past.
  if (nodegate::dns::decodeRecord(rec.data(), NG_DNS_REC_HEAD - 1, ev)) std::abort();
  return 0;
}
