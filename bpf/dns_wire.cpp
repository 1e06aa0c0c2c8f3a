#include "dns_wire.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace nodegate::dns {

namespace {

// RFC 1035 3.1: a name is at most 255 bytes on the wire, length bytes and the final zero included.
constexpr std::size_t kMaxWireName = 255;
constexpr std::size_t kMaxText = NG_DNS_QNAME_MAX - 1;

WireQuestion parseError() {
  WireQuestion q;
  q.flags = NG_F_PARSE_ERR;
  return q;
}

}  // namespace

WireQuestion decodeQuestion(const uint8_t* captured, std::size_t size, std::size_t rest) {
  if (captured == nullptr) size = 0;
  const bool cut = rest > size;  // the capture, not the packet, ends at `size`
  WireQuestion q;
  std::size_t text = 0;  // characters written to q.qname
  auto append = [&](const uint8_t* p, std::size_t n) {
    n = std::min(n, kMaxText - text);
    std::memcpy(q.qname + text, p, n);
    text += n;
  };
  auto truncated = [&] {
    q.qname[text] = '\0';
    q.flags |= NG_F_QNAME_TRUNC;
    return q;
  };

  std::size_t pos = 0;  // offset of the current length byte
  for (;;) {
    if (pos >= size) return cut ? truncated() : parseError();
    const uint8_t len = captured[pos];
    if (len == 0) break;
    if (len & 0xC0) return parseError();  // pointer (0xC0), reserved types 0x40/0x80; > 63
    const std::size_t next = pos + 1 + len;
    if (next + 1 > kMaxWireName) return parseError();  // the final zero would not fit
    if (text > 0 && text < kMaxText) q.qname[text++] = '.';
    const std::size_t have = std::min<std::size_t>(len, size - std::min(size, pos + 1));
    append(captured + pos + 1, have);
    if (have < len) return cut ? truncated() : parseError();
    pos = next;
  }
  q.qname[text] = '\0';
  // A dotted name never needs more than 253 characters, but the record keeps 127 of them.
  const bool name_cut = pos > kMaxText + 1;  // wire bytes before the zero = dotted length + 1
  if (pos + 2 >= size) {
    if (!cut) return parseError();  // qtype runs past the message
    return truncated();
  }
  q.qtype = static_cast<uint16_t>((captured[pos + 1] << 8) | captured[pos + 2]);
  if (name_cut) q.flags |= NG_F_QNAME_TRUNC;
  return q;
}

static_assert(offsetof(ng_dns_event, qname) == NG_DNS_REC_HEAD,
              "the ring record's fixed part is struct ng_dns_event up to qname");

bool decodeRecord(const void* rec, std::size_t size, ng_dns_event& ev) {
  if (rec == nullptr || size < NG_DNS_REC_HEAD) return false;
  const auto* bytes = static_cast<const uint8_t*>(rec);
  std::memcpy(&ev, bytes, NG_DNS_REC_HEAD);
  ev.hop = 0;
  ev.tcp_seq = 0;
  if (ev.qrest == 0 && (ev.flags & NG_F_NOT_DNS_MSG)) {
    // No DNS message on the wire (an ICMP error without the quoted header, a SYN, a RST): nothing
    // to decode and no parse error; the record's first question bytes hold the sequence number.
    if ((ev.flags & NG_F_TCP) && size >= NG_DNS_REC_HEAD + sizeof ev.tcp_seq)
      std::memcpy(&ev.tcp_seq, bytes + NG_DNS_REC_HEAD, sizeof ev.tcp_seq);
    std::memset(ev.qname, 0, sizeof ev.qname);
    ev.qtype = 0;
    ev.flags = static_cast<uint16_t>(ev.flags & ~(NG_F_PARSE_ERR | NG_F_QNAME_TRUNC));
    return true;
  }
  const std::size_t captured = std::min(
      {static_cast<std::size_t>(ev.qrest), std::size_t{NG_DNS_QNAME_MAX}, size - NG_DNS_REC_HEAD});
  const WireQuestion q = decodeQuestion(bytes + NG_DNS_REC_HEAD, captured, ev.qrest);
  std::memcpy(ev.qname, q.qname, sizeof ev.qname);
  ev.qtype = q.qtype;
  ev.flags = static_cast<uint16_t>((ev.flags & ~(NG_F_PARSE_ERR | NG_F_QNAME_TRUNC)) | q.flags);
  return true;
}

}  // namespace nodegate::dns
