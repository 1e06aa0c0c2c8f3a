// The user-space decoder of the raw question the BPF programs capture (bpf/dns_wire.h), on literal
// wire bytes: every outcome the kernel-side walk used to produce, and what changed for questions
// longer than the capture.
#include "dns_wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace nodegate::dns {
namespace {

using Bytes = std::vector<uint8_t>;

// Whole message after the header: rest == size.
WireQuestion decodeAll(const Bytes& b) {
  return decodeQuestion(b.data(), b.size(), b.size());
}

// A question as the kernel captures it: the first `cap` bytes of a longer message.
WireQuestion decodeCaptured(const Bytes& b, std::size_t cap) {
  return decodeQuestion(b.data(), std::min(cap, b.size()), b.size());
}

Bytes wire(const std::vector<std::string>& labels, uint16_t qtype = 1) {
  Bytes out;
  for (const auto& l : labels) {
    out.push_back(static_cast<uint8_t>(l.size()));
    out.insert(out.end(), l.begin(), l.end());
  }
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(qtype >> 8));
  out.push_back(static_cast<uint8_t>(qtype));
  out.push_back(0);  // qclass IN
  out.push_back(1);
  return out;
}

void expectParseError(const WireQuestion& q) {
  EXPECT_EQ(q.flags, NG_F_PARSE_ERR);
  EXPECT_STREQ(q.qname, "");
  EXPECT_EQ(q.qtype, 0);
}

TEST(DnsWire, OrdinaryQuestion) {
  const Bytes b = {3,   'w', 'w', 'w', 7,   'e', 'x', 'a', 'm', 'p', 'l',
                   'e', 3,   'c', 'o', 'm', 0,   0,   28,  0,   1};
  auto q = decodeAll(b);
  EXPECT_EQ(q.flags, 0);
  EXPECT_STREQ(q.qname, "www.example.com");
  EXPECT_EQ(q.qtype, 28);
}

TEST(DnsWire, FollowingSectionsAreIgnored) {
  Bytes b = wire({"svc", "cluster", "local"}, 33);
  const Bytes opt = {0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0};  // EDNS OPT record after the question
  b.insert(b.end(), opt.begin(), opt.end());
  auto q = decodeAll(b);
  EXPECT_EQ(q.flags, 0);
  EXPECT_STREQ(q.qname, "svc.cluster.local");
  EXPECT_EQ(q.qtype, 33);
}

TEST(DnsWire, RootName) {
  auto q = decodeAll({0, 0, 2, 0, 1});  // ". NS"
  EXPECT_EQ(q.flags, 0);
  EXPECT_STREQ(q.qname, "");
  EXPECT_EQ(q.qtype, 2);
}

TEST(DnsWire, EmptyAndMissing) {
  expectParseError(decodeAll({}));
  expectParseError(decodeQuestion(nullptr, 0, 0));
  // Nothing captured of a message that goes on: nothing known, nothing wrong. No pointer means
  // nothing captured, whatever the size says.
  for (auto q : {decodeQuestion(nullptr, 0, 40), decodeQuestion(nullptr, 5, 5)}) {
    EXPECT_EQ(q.flags, NG_F_QNAME_TRUNC);
    EXPECT_STREQ(q.qname, "");
    EXPECT_EQ(q.qtype, 0);
  }
}

TEST(DnsWire, CutByTheEndOfThePacket) {
  const Bytes full = wire({"www", "example", "com"}, 1);
  // Every cut before the end of qtype is malformed; from there on the question is whole.
  for (std::size_t len = 0; len < full.size(); len++) {
    SCOPED_TRACE("len=" + std::to_string(len));
    Bytes cut(full.begin(), full.begin() + static_cast<long>(len));
    auto q = decodeAll(cut);
    if (len < 17 + 2) {
      expectParseError(q);
    } else {
      EXPECT_EQ(q.flags, 0);
      EXPECT_STREQ(q.qname, "www.example.com");
      EXPECT_EQ(q.qtype, 1);
    }
  }
}

TEST(DnsWire, CompressionPointersAndReservedLabelTypes) {
  expectParseError(decodeAll({0xC0, 0x0C, 0, 1, 0, 1}));                    // to itself
  expectParseError(decodeAll({3, 'w', 'w', 'w', 0xC0, 0x0C, 0, 1, 0, 1}));  // back to the start
  expectParseError(decodeAll({3, 'w', 'w', 'w', 0xC0, 0x20, 0, 1, 0, 1}));  // forward
  expectParseError(decodeAll({0x40, 'x', 0, 0, 1, 0, 1}));                  // extended label 01
  expectParseError(decodeAll({0x80, 'x', 0, 0, 1, 0, 1}));                  // reserved 10
  // A pointer inside the capture is an error even when the message goes on past it.
  const Bytes ptr = {1, 'a', 0xC0, 0x0C};
  expectParseError(decodeQuestion(ptr.data(), ptr.size(), 400));
}

TEST(DnsWire, LabelLongerThan63) {
  Bytes b = {64};
  b.insert(b.end(), 64, 'x');
  b.insert(b.end(), {0, 0, 1, 0, 1});
  expectParseError(decodeAll(b));
  // 63 is the longest a label may be.
  Bytes ok = wire({std::string(63, 'y')});
  auto q = decodeAll(ok);
  EXPECT_EQ(q.flags, 0);
  EXPECT_EQ(std::string(q.qname), std::string(63, 'y'));
}

TEST(DnsWire, MaximumLengthName) {
  // Labels of 63, 63, 63, 61: 255 wire bytes with the final zero, 253 dotted characters.
  const std::string a(63, 'a'), b(61, 'b');
  const Bytes w = wire({a, a, a, b}, 33);
  ASSERT_EQ(w.size(), 255u + 4);
  const std::string dotted = a + "." + a + "." + a + "." + b;

  // Decoded whole (a capture as long as the message): the name does not fit the record, qtype is
  // known.
  auto whole = decodeAll(w);
  EXPECT_EQ(whole.flags, NG_F_QNAME_TRUNC);
  EXPECT_EQ(std::string(whole.qname), dotted.substr(0, NG_DNS_QNAME_MAX - 1));
  EXPECT_EQ(whole.qtype, 33);

  // As the kernel captures it (128 bytes): the same prefix, qtype unknown.
  auto cap = decodeCaptured(w, NG_DNS_QNAME_MAX);
  EXPECT_EQ(cap.flags, NG_F_QNAME_TRUNC);
  EXPECT_EQ(std::string(cap.qname), dotted.substr(0, NG_DNS_QNAME_MAX - 1));
  EXPECT_EQ(cap.qtype, 0);

  // One byte more than 255 is not a name.
  expectParseError(decodeAll(wire({a, a, a, std::string(62, 'b')})));
  expectParseError(decodeAll(wire({a, a, a, a, "x"})));
}

TEST(DnsWire, WhatFitsTheCapture) {
  // 125 dotted characters: 127 name bytes; qtype needs two more than the 128 captured.
  const std::string l60(60, 'c'), l62(62, 'd');
  const Bytes w125 = wire({l60, l62, "e"}, 16);
  const std::string d = l60 + "." + l62 + "." + "e";
  ASSERT_EQ(d.size(), 125u);
  auto q = decodeCaptured(w125, NG_DNS_QNAME_MAX);
  EXPECT_EQ(q.flags, NG_F_QNAME_TRUNC);
  EXPECT_EQ(std::string(q.qname), d);  // the whole name, only qtype was cut
  EXPECT_EQ(q.qtype, 0);

  // 124 dotted characters: name and qtype fit.
  const Bytes w124 = wire({std::string(59, 'c'), l62, "e"}, 16);
  auto q2 = decodeCaptured(w124, NG_DNS_QNAME_MAX);
  EXPECT_EQ(q2.flags, 0);
  EXPECT_EQ(std::string(q2.qname).size(), 124u);
  EXPECT_EQ(q2.qtype, 16);

  // The same bytes give the same answer however long the message goes on: every hop of one query
  // decodes its question alike, so the correlation key (id, name, type) still matches.
  auto again = decodeQuestion(w125.data(), NG_DNS_QNAME_MAX, 4000);
  EXPECT_STREQ(again.qname, q.qname);
  EXPECT_EQ(again.qtype, q.qtype);
  EXPECT_EQ(again.flags, q.flags);
}

TEST(DnsWire, CutMidLabelByTheCapture) {
  const Bytes w = wire({std::string(50, 'a'), std::string(50, 'b'), std::string(50, 'c')});
  auto q = decodeCaptured(w, 110);
  EXPECT_EQ(q.flags, NG_F_QNAME_TRUNC);
  // 51 + 51 bytes of labels, then the third length byte and 7 of its 50 bytes.
  EXPECT_EQ(std::string(q.qname),
            std::string(50, 'a') + "." + std::string(50, 'b') + "." + std::string(7, 'c'));
  // Cut right after a length byte: the dot is there, no label text yet.
  auto q2 = decodeCaptured(w, 103);
  EXPECT_EQ(std::string(q2.qname), std::string(50, 'a') + "." + std::string(50, 'b') + ".");
}

// A ring record as the kernel writes it: the event's fields up to qname, then `room` bytes of which
// the first min(qrest, 128, room) are the captured question; the rest is whatever the ring held.
Bytes record(const ng_dns_event& head, const Bytes& question, std::size_t room) {
  Bytes r(NG_DNS_REC_HEAD + room, 0xAB);  // stale ring bytes
  std::memcpy(r.data(), &head, NG_DNS_REC_HEAD);
  std::memcpy(r.data() + NG_DNS_REC_HEAD, question.data(), std::min(room, question.size()));
  return r;
}

TEST(DnsWire, RecordIsDecoded) {
  ng_dns_event head{};
  head.ts_ns = 123456789;
  head.netns_cookie = 42;
  head.netns_ino = 4026531840u;
  head.ifindex = 7;
  head.kind = NG_EV_PACKET;
  head.dir = NG_DIR_INGRESS;
  head.saddr[0] = 10;
  head.sport = 53;
  head.dport = 40000;
  head.dns_id = 0xBEEF;
  head.flags = NG_F_QR | NG_F_TCP | NG_F_PARSE_ERR;  // a stale parse flag must not survive
  head.rcode = 3;
  head.hop = 9;  // never written by the kernel: the loader stamps it
  head.pkt_len = 99;
  const Bytes w = wire({"kube-dns", "kube-system", "svc"}, 28);  // fits the smallest record
  head.qrest = static_cast<uint16_t>(w.size());
  for (std::size_t room :
       {std::size_t{NG_DNS_REC_Q1}, std::size_t{NG_DNS_REC_Q2}, std::size_t{NG_DNS_REC_Q3}}) {
    SCOPED_TRACE("room=" + std::to_string(room));
    const Bytes r = record(head, w, room);
    ng_dns_event ev;
    std::memset(&ev, 0x5A, sizeof ev);
    ASSERT_TRUE(decodeRecord(r.data(), r.size(), ev));
    EXPECT_STREQ(ev.qname, "kube-dns.kube-system.svc");
    EXPECT_EQ(ev.qtype, 28);
    EXPECT_EQ(ev.flags, NG_F_QR | NG_F_TCP);
    EXPECT_EQ(ev.hop, 0);
    EXPECT_EQ(ev.qrest, w.size());
    EXPECT_EQ(ev.ts_ns, 123456789u);
    EXPECT_EQ(ev.netns_cookie, 42u);
    EXPECT_EQ(ev.netns_ino, 4026531840u);
    EXPECT_EQ(ev.ifindex, 7u);
    EXPECT_EQ(ev.kind, NG_EV_PACKET);
    EXPECT_EQ(ev.dir, NG_DIR_INGRESS);
    EXPECT_EQ(ev.saddr[0], 10);
    EXPECT_EQ(ev.sport, 53);
    EXPECT_EQ(ev.dport, 40000);
    EXPECT_EQ(ev.dns_id, 0xBEEF);
    EXPECT_EQ(ev.rcode, 3);
    EXPECT_EQ(ev.pkt_len, 99);
  }
}

TEST(DnsWire, RecordCarriesWhatItsSizeHolds) {
  // The captured bytes are min(qrest, 128, room): a record too small for the question decodes as
  // a capture cut there (which is why the kernel sizes records by what the decoder reads).
  const std::string l50(50, 'x');
  const Bytes w = wire({l50}, 16);  // 52 name bytes + qtype: the decoder reads 54
  ng_dns_event head{};
  head.qrest = static_cast<uint16_t>(w.size());
  ng_dns_event ev;
  Bytes small = record(head, w, NG_DNS_REC_Q1);
  ASSERT_TRUE(decodeRecord(small.data(), small.size(), ev));
  EXPECT_EQ(ev.flags, NG_F_QNAME_TRUNC);
  EXPECT_EQ(std::string(ev.qname), std::string(NG_DNS_REC_Q1 - 1, 'x'));
  EXPECT_EQ(ev.qtype, 0);
  Bytes fits = record(head, w, NG_DNS_REC_Q2);
  ASSERT_TRUE(decodeRecord(fits.data(), fits.size(), ev));
  EXPECT_EQ(ev.flags, 0);
  EXPECT_EQ(std::string(ev.qname), l50);
  EXPECT_EQ(ev.qtype, 16);

  // The largest record is padded past the 128-byte capture: its padding is never read.
  const std::string l63(63, 'a');
  const Bytes big = wire({l63, l63, l63, std::string(61, 'b')}, 33);
  head.qrest = static_cast<uint16_t>(big.size());
  Bytes padded = record(head, big, NG_DNS_REC_Q3);
  std::fill(padded.begin() + NG_DNS_REC_HEAD + NG_DNS_QNAME_MAX, padded.end(), 0);
  ASSERT_TRUE(decodeRecord(padded.data(), padded.size(), ev));
  auto cap = decodeCaptured(big, NG_DNS_QNAME_MAX);
  EXPECT_EQ(ev.flags, cap.flags);
  EXPECT_STREQ(ev.qname, cap.qname);
  EXPECT_EQ(ev.qtype, 0);

  // qrest past the record: only the record's bytes are read ("\x01" labels, never terminated).
  head.qrest = 0xFFFF;
  Bytes ones = record(head, Bytes(NG_DNS_REC_Q1, 1), NG_DNS_REC_Q1);
  ASSERT_TRUE(decodeRecord(ones.data(), ones.size(), ev));
  EXPECT_EQ(ev.flags, NG_F_QNAME_TRUNC);
  EXPECT_EQ(ev.qtype, 0);
  EXPECT_LT(std::strlen(ev.qname), static_cast<std::size_t>(NG_DNS_REC_Q1));

  // Nothing captured (the kernel says so with qrest 0): a parse error.
  head.qrest = 0;
  Bytes none = record(head, {}, NG_DNS_REC_Q1);
  ASSERT_TRUE(decodeRecord(none.data(), none.size(), ev));
  EXPECT_EQ(ev.flags, NG_F_PARSE_ERR);

  // Shorter than the fixed part: not one of our records.
  EXPECT_FALSE(decodeRecord(none.data(), NG_DNS_REC_HEAD - 1, ev));
  EXPECT_FALSE(decodeRecord(nullptr, 0, ev));
  // The fixed part alone is a record without question bytes.
  head.qrest = 20;
  Bytes bare = record(head, {}, 0);
  ASSERT_TRUE(decodeRecord(bare.data(), bare.size(), ev));
  EXPECT_EQ(ev.flags, NG_F_QNAME_TRUNC);
  EXPECT_STREQ(ev.qname, "");
}

// Records without a DNS message (SYN, RST, an ICMP error quoting only the ports): no parse error,
// an empty name, and for TCP the sequence number the kernel put where the question would be.
TEST(DnsWire, ControlRecordsCarryTheSequenceNumberAndNoQuestion) {
  for (uint16_t kind : {NG_F_SYN, NG_F_RST, NG_F_ICMP}) {
    ng_dns_event head{};
    head.kind = NG_EV_PACKET;
    head.flags = static_cast<uint16_t>(kind | NG_F_TCP | NG_F_ACK | NG_F_PARSE_ERR);
    head.qrest = 0;
    Bytes r(NG_DNS_REC_HEAD + NG_DNS_REC_Q1, 0xAA);  // stale ring bytes after the sequence number
    std::memcpy(r.data(), &head, NG_DNS_REC_HEAD);
    const uint32_t seq = 0xDEADBEEF;
    std::memcpy(r.data() + NG_DNS_REC_HEAD, &seq, sizeof seq);
    ng_dns_event ev;
    ASSERT_TRUE(decodeRecord(r.data(), r.size(), ev));
    EXPECT_EQ(ev.tcp_seq, seq);
    EXPECT_STREQ(ev.qname, "");
    EXPECT_EQ(ev.qtype, 0);
    EXPECT_FALSE(ev.flags & NG_F_PARSE_ERR);
    EXPECT_TRUE(ev.flags & kind);
  }
  // Without NG_F_TCP (an ICMP error quoting UDP ports) there is no sequence number; a DNS message
  // without a question is still a parse error.
  ng_dns_event head{};
  head.flags = NG_F_ICMP;
  Bytes r(NG_DNS_REC_HEAD + NG_DNS_REC_Q1, 0xAA);
  std::memcpy(r.data(), &head, NG_DNS_REC_HEAD);
  ng_dns_event ev;
  ASSERT_TRUE(decodeRecord(r.data(), r.size(), ev));
  EXPECT_EQ(ev.tcp_seq, 0u);
  EXPECT_FALSE(ev.flags & NG_F_PARSE_ERR);
  head.flags = NG_F_QR;
  std::memcpy(r.data(), &head, NG_DNS_REC_HEAD);
  ASSERT_TRUE(decodeRecord(r.data(), r.size(), ev));
  EXPECT_TRUE(ev.flags & NG_F_PARSE_ERR);
  // A record cut before its sequence number: 0, not stale bytes.
  head.flags = NG_F_SYN | NG_F_TCP;
  std::memcpy(r.data(), &head, NG_DNS_REC_HEAD);
  ASSERT_TRUE(decodeRecord(r.data(), NG_DNS_REC_HEAD + 2, ev));
  EXPECT_EQ(ev.tcp_seq, 0u);
}

}  // namespace
}  // namespace nodegate::dns
