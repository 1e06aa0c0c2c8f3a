// Builders for the crafted frames the tc parser is tested on: Ethernet (optionally VLAN-tagged),
// IPv4 or IPv6 (optionally with extension headers / fragment fields), UDP or TCP, and DNS messages.
// Checksums are left zero: the tc program never looks at them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nodegate::dns::test {

using Bytes = std::vector<uint8_t>;

inline void put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

// Wire-format name from a dotted one; "" is the root.
inline Bytes wireName(std::string_view dotted) {
  Bytes out;
  while (!dotted.empty()) {
    auto dot = dotted.find('.');
    auto label = dotted.substr(0, dot);
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    if (dot == std::string_view::npos) break;
    dotted.remove_prefix(dot + 1);
  }
  out.push_back(0);
  return out;
}

struct DnsMsg {
  uint16_t id = 0x1234;
  uint16_t flags = 0x0100;  // RD
  uint16_t qdcount = 1;
  uint16_t ancount = 0;  // only the count: no answer records follow
  Bytes name = wireName("www.example.com");
  uint16_t qtype = 1;
  uint16_t qclass = 1;

  Bytes bytes() const {
    Bytes b;
    put16(b, id);
    put16(b, flags);
    put16(b, qdcount);
    put16(b, ancount);
    put16(b, 0);
    put16(b, 0);
    b.insert(b.end(), name.begin(), name.end());
    put16(b, qtype);
    put16(b, qclass);
    return b;
  }
};

struct FrameSpec {
  bool ipv6 = false;
  bool tcp = false;
  uint16_t sport = 40000;
  uint16_t dport = 53;
  std::vector<uint16_t> vlan_tpids{};  // outer first: {0x88A8, 0x8100} for QinQ
  uint16_t ipv4_frag = 0;              // IPv4 flags+offset field (0x2000 = MF)
  Bytes ipv6_ext{};                    // extension headers, already chained; last next-header = L4
  uint8_t ipv6_first_next = 0;         // next-header of the fixed header when ipv6_ext is set
  bool tcp_length_prefix = true;
  uint8_t tcp_flags = 0x18;  // PSH|ACK
  uint32_t tcp_seq = 0;
  uint32_t tcp_ack = 0;
};

inline constexpr uint8_t kSrc4[4] = {10, 0, 2, 2};
inline constexpr uint8_t kDst4[4] = {10, 96, 0, 10};
inline constexpr uint8_t kSrc6[16] = {0xfd, 0x10, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
inline constexpr uint8_t kDst6[16] = {0xfd, 0x10, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};

inline Bytes buildFrame(const FrameSpec& f, const Bytes& payload) {
  Bytes l4;
  if (f.tcp) {
    Bytes seg;
    if (f.tcp_length_prefix && !payload.empty()) put16(seg, static_cast<uint16_t>(payload.size()));
    seg.insert(seg.end(), payload.begin(), payload.end());
    put16(l4, f.sport);
    put16(l4, f.dport);
    put16(l4, static_cast<uint16_t>(f.tcp_seq >> 16));
    put16(l4, static_cast<uint16_t>(f.tcp_seq));
    put16(l4, static_cast<uint16_t>(f.tcp_ack >> 16));
    put16(l4, static_cast<uint16_t>(f.tcp_ack));
    l4.push_back(5 << 4);  // data offset 20
    l4.push_back(f.tcp_flags);
    put16(l4, 65535);
    put16(l4, 0);
    put16(l4, 0);
    l4.insert(l4.end(), seg.begin(), seg.end());
  } else {
    put16(l4, f.sport);
    put16(l4, f.dport);
    put16(l4, static_cast<uint16_t>(8 + payload.size()));
    put16(l4, 0);
    l4.insert(l4.end(), payload.begin(), payload.end());
  }
  const uint8_t proto = f.tcp ? 6 : 17;

  Bytes frame = {0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2};
  for (uint16_t tpid : f.vlan_tpids) {
    put16(frame, tpid);
    put16(frame, 100);  // TCI: VLAN 100
  }
  if (!f.ipv6) {
    put16(frame, 0x0800);
    frame.push_back(0x45);
    frame.push_back(0);
    put16(frame, static_cast<uint16_t>(20 + l4.size()));
    put16(frame, 0x4242);
    put16(frame, f.ipv4_frag);
    frame.push_back(64);
    frame.push_back(proto);
    put16(frame, 0);
    frame.insert(frame.end(), kSrc4, kSrc4 + 4);
    frame.insert(frame.end(), kDst4, kDst4 + 4);
  } else {
    put16(frame, 0x86DD);
    frame.push_back(0x60);
    frame.push_back(0);
    put16(frame, 0);
    put16(frame, static_cast<uint16_t>(f.ipv6_ext.size() + l4.size()));
    frame.push_back(f.ipv6_ext.empty() ? proto : f.ipv6_first_next);
    frame.push_back(64);
    frame.insert(frame.end(), kSrc6, kSrc6 + 16);
    frame.insert(frame.end(), kDst6, kDst6 + 16);
    frame.insert(frame.end(), f.ipv6_ext.begin(), f.ipv6_ext.end());
  }
  frame.insert(frame.end(), l4.begin(), l4.end());
  return frame;
}

// The IP packet (no Ethernet header) of a frame buildFrame() made: what an ICMP error quotes.
inline Bytes l3Of(const Bytes& frame) {
  return Bytes(frame.begin() + 14, frame.end());
}

// An ICMP destination unreachable (ICMPv6 type 1 for ipv6) from `from` (4 or 16 bytes) to the
// guest, quoting `quote` (an IP packet, cut wherever the caller likes). type overrides the
// destination-unreachable type for tests of other ICMP messages.
struct IcmpSpec {
  bool ipv6 = false;
  uint8_t code = 3;  // port unreachable (ICMPv6: 4)
  int type = -1;     // -1: destination unreachable
  Bytes from = {10, 96, 0, 10};
};

inline Bytes buildIcmp(const IcmpSpec& f, const Bytes& quote) {
  Bytes icmp = {
      static_cast<uint8_t>(f.type >= 0 ? f.type : f.ipv6 ? 1 : 3), f.code, 0, 0, 0, 0, 0, 0};
  icmp.insert(icmp.end(), quote.begin(), quote.end());
  Bytes frame = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  if (!f.ipv6) {
    put16(frame, 0x0800);
    frame.push_back(0x45);
    frame.push_back(0xC0);
    put16(frame, static_cast<uint16_t>(20 + icmp.size()));
    put16(frame, 0);
    put16(frame, 0);
    frame.push_back(64);
    frame.push_back(1);
    put16(frame, 0);
    frame.insert(frame.end(), f.from.begin(), f.from.end());
    frame.insert(frame.end(), kSrc4, kSrc4 + 4);
  } else {
    put16(frame, 0x86DD);
    frame.push_back(0x60);
    frame.push_back(0);
    put16(frame, 0);
    put16(frame, static_cast<uint16_t>(icmp.size()));
    frame.push_back(58);
    frame.push_back(64);
    frame.insert(frame.end(), f.from.begin(), f.from.end());
    frame.insert(frame.end(), kSrc6, kSrc6 + 16);
  }
  frame.insert(frame.end(), icmp.begin(), icmp.end());
  return frame;
}

}  // namespace nodegate::dns::test
