// Decoder of the raw DNS question the BPF tracer captures (bpf/dns_wire.cpp). The first input byte
// picks how much of the message the "capture" holds (as the kernel's min(rest, 128) would, and
// larger, which the decoder must also survive); the rest is the message after its header. The
// output must always be a NUL-terminated name within the record and only the two question flags.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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

  // The in-place form, on a record as the ring delivers it.
  ng_dns_event ev;
  std::memset(&ev, 0xA5, sizeof ev);
  std::memcpy(ev.qname, msg, cap < sizeof ev.qname ? cap : sizeof ev.qname);
  ev.qrest = static_cast<std::uint16_t>(rest > 0xFFFF ? 0xFFFF : rest);
  nodegate::dns::decodeEventQuestion(ev);
  if (std::memchr(ev.qname, '\0', sizeof ev.qname) == nullptr) std::abort();
  return 0;
}
