// The tc classifier's DNS parser, run in the real kernel with BPF_PROG_TEST_RUN on crafted frames.
// Each run's events are read back from the ring buffer and checked field by field.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dns_tracer.h"
#include "dns_wire.h"
#include "frames.h"

namespace nodegate::dns::test {
namespace {

constexpr int kTcActUnspec = -1;

class DnsParserTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    auto t = DnsTracer::open({.ring_bytes = 1u << 20, .trace_drops = false});
    if (t) {
      tracer_ = std::move(t.value()).release();
    } else {
      open_error_ = t.error().message;
    }
  }
  static void TearDownTestSuite() {
    delete tracer_;
    tracer_ = nullptr;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "BPF_PROG_TEST_RUN needs root (CAP_BPF + CAP_NET_ADMIN)";
    ASSERT_NE(tracer_, nullptr) << open_error_;
    drain();  // leftovers of an earlier test
  }

  static std::vector<ng_dns_event> drain() {
    std::vector<ng_dns_event> out;
    auto n = tracer_->consume([&](const ng_dns_event& ev) {
      if (ev.kind == NG_EV_PACKET) out.push_back(ev);
    });
    EXPECT_TRUE(n.ok()) << (n.ok() ? "" : n.error().message);
    return out;
  }

  // Runs the classifier once on frame; asserts it never changes the verdict; returns its events.
  // A test run is outside any tc hook: the direction is checked on real attachments
  // (DnsAttachTest), here every event says egress.
  static std::vector<ng_dns_event> run(const Bytes& frame) {
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
    int err = bpf_prog_test_run_opts(tracer_->tcProgFd(), &opts);
    EXPECT_EQ(err, 0) << "bpf_prog_test_run_opts: " << std::strerror(-err)
                      << " size=" << frame.size();
    EXPECT_EQ(static_cast<int>(opts.retval), kTcActUnspec) << "size=" << frame.size();
    return drain();
  }

  static ng_dns_event runOne(const Bytes& frame) {
    auto evs = run(frame);
    EXPECT_EQ(evs.size(), 1u);
    if (evs.empty()) return ng_dns_event{};
    return evs.front();
  }

  // The ring records of one run as the kernel wrote them (size and bytes), read with a consumer of
  // our own on the tracer's ring: the record sizes are not visible through DnsTracer.
  static std::vector<Bytes> runRaw(const Bytes& frame) {
    const int ring = ringFd();
    EXPECT_GE(ring, 0) << "no ring buffer map on the tc program";
    std::vector<Bytes> out;
    if (ring < 0) return out;
    ring_buffer* rb = ring_buffer__new(
        ring,
        [](void* ctx, void* data, size_t size) {
          const auto* p = static_cast<const uint8_t*>(data);
          static_cast<std::vector<Bytes>*>(ctx)->emplace_back(p, p + size);
          return 0;
        },
        &out, nullptr);
    EXPECT_NE(rb, nullptr);
    if (rb == nullptr) return out;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()), .repeat = 1);
    EXPECT_EQ(bpf_prog_test_run_opts(tracer_->tcProgFd(), &opts), 0);
    EXPECT_GE(ring_buffer__consume(rb), 0);
    ring_buffer__free(rb);
    return out;
  }

  static int ringFd() {
    static int fd = -1;
    if (fd >= 0) return fd;
    uint32_t ids[16] = {};
    bpf_prog_info info{};
    info.nr_map_ids = 16;
    info.map_ids = reinterpret_cast<uintptr_t>(ids);
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(tracer_->tcProgFd(), &info, &len) != 0) return -1;
    for (uint32_t i = 0; i < std::min<uint32_t>(info.nr_map_ids, 16); i++) {
      const int m = bpf_map_get_fd_by_id(ids[i]);
      if (m < 0) continue;
      bpf_map_info mi{};
      uint32_t mlen = sizeof mi;
      if (bpf_obj_get_info_by_fd(m, &mi, &mlen) == 0 && mi.type == BPF_MAP_TYPE_RINGBUF) {
        fd = m;
        return fd;
      }
      close(m);
    }
    return -1;
  }

  static inline DnsTracer* tracer_ = nullptr;
  static inline std::string open_error_;
};

// The agent formats both addresses of every event (IPv4 without inet_ntop()'s sprintf).
TEST(FormatAddress, Ipv4ExtremesAndIpv6) {
  ng_dns_event ev{};
  const uint8_t lo[4] = {0, 0, 0, 0}, hi[4] = {255, 255, 255, 255};
  std::memcpy(ev.saddr, lo, 4);
  std::memcpy(ev.daddr, hi, 4);
  EXPECT_EQ(formatAddress(ev, true), "0.0.0.0");
  EXPECT_EQ(formatAddress(ev, false), "255.255.255.255");
  const uint8_t mixed[4] = {10, 0, 102, 9};
  std::memcpy(ev.saddr, mixed, 4);
  EXPECT_EQ(formatAddress(ev, true), "10.0.102.9");
  ev.flags = NG_F_IPV6;
  const uint8_t v6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
  std::memcpy(ev.daddr, v6, 16);
  EXPECT_EQ(formatAddress(ev, false), "fd00::a");
}

TEST_F(DnsParserTest, Ipv4UdpQuery) {
  DnsMsg q;
  auto frame = buildFrame({}, q.bytes());
  auto ev = runOne(frame);
  EXPECT_EQ(ev.kind, NG_EV_PACKET);
  EXPECT_EQ(ev.dir, NG_DIR_EGRESS);  // no hook: tc_at_ingress is clear
  EXPECT_EQ(ev.dns_id, 0x1234);
  EXPECT_EQ(ev.flags & (NG_F_QR | NG_F_TC | NG_F_TCP | NG_F_IPV6 | NG_F_PARSE_ERR |
                        NG_F_QNAME_TRUNC | NG_F_VLAN | NG_F_FRAG),
            0);
  EXPECT_EQ(ev.qtype, 1);
  EXPECT_STREQ(ev.qname, "www.example.com");
  EXPECT_EQ(ev.sport, 40000);
  EXPECT_EQ(ev.dport, 53);
  EXPECT_EQ(formatAddress(ev, true), "10.0.2.2");
  EXPECT_EQ(formatAddress(ev, false), "10.96.0.10");
  EXPECT_EQ(ev.pkt_len, frame.size() - 14);
  EXPECT_EQ(ev.ifindex, 1u);  // test runs use the netns's loopback device
  EXPECT_EQ(ev.netns_ino, tracer_->netnsInode("").valueOr(0));
  // Stamped by the loader for the devices it attached, which a test run's loopback is not.
  EXPECT_EQ(ev.netns_cookie, 0u);
  EXPECT_GT(ev.ts_ns, 0u);
}

TEST_F(DnsParserTest, Ipv4UdpResponseFlags) {
  DnsMsg r;
  r.id = 0xBEEF;
  r.flags = 0x8000 | 0x0400 | 0x0200 | 0x0080 | 3;  // QR AA TC RA NXDOMAIN
  r.name = wireName("nope.svc.cluster.local");
  r.qtype = 28;
  auto ev = runOne(buildFrame({.sport = 53, .dport = 40000}, r.bytes()));
  EXPECT_EQ(ev.dns_id, 0xBEEF);
  EXPECT_TRUE(ev.flags & NG_F_QR);
  EXPECT_TRUE(ev.flags & NG_F_TC);
  EXPECT_EQ(ev.rcode, 3);
  EXPECT_EQ(ev.qtype, 28);
  EXPECT_STREQ(ev.qname, "nope.svc.cluster.local");
  EXPECT_EQ(ev.sport, 53);
}

TEST_F(DnsParserTest, Ipv6UdpQuery) {
  DnsMsg q;
  q.qtype = 28;
  auto ev = runOne(buildFrame({.ipv6 = true}, q.bytes()));
  EXPECT_TRUE(ev.flags & NG_F_IPV6);
  EXPECT_EQ(formatAddress(ev, true), "fd10:0:2::2");
  EXPECT_EQ(formatAddress(ev, false), "fd10:0:2::a");
  EXPECT_STREQ(ev.qname, "www.example.com");
  EXPECT_EQ(ev.qtype, 28);
}

TEST_F(DnsParserTest, Ipv6ExtensionHeadersAreWalked) {
  // hop-by-hop (8 bytes) -> destination options (16 bytes) -> UDP
  Bytes ext = {60, 0, 1, 4,  0, 0, 0, 0,  // HBH: next=dest opts, len 0, PadN
               17, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  DnsMsg q;
  auto ev = runOne(buildFrame({.ipv6 = true, .ipv6_ext = ext, .ipv6_first_next = 0}, q.bytes()));
  EXPECT_STREQ(ev.qname, "www.example.com");
  EXPECT_EQ(ev.dport, 53);
}

TEST_F(DnsParserTest, Ipv6EspIsSkippedAndCounted) {
  Bytes esp = {0, 0, 0, 1, 0, 0, 0, 1};  // SPI, sequence: the rest is ciphertext
  DnsMsg q;
  auto before = tracer_->stats().ext_skipped;
  EXPECT_TRUE(
      run(buildFrame({.ipv6 = true, .ipv6_ext = esp, .ipv6_first_next = 50}, q.bytes())).empty());
  EXPECT_EQ(tracer_->stats().ext_skipped, before + 1);
}

TEST_F(DnsParserTest, Ipv6Fragments) {
  DnsMsg q;
  Bytes first = {17, 0, 0x00, 0x01, 0, 0, 0, 7};  // offset 0, M=1
  auto ev = runOne(buildFrame({.ipv6 = true, .ipv6_ext = first, .ipv6_first_next = 44}, q.bytes()));
  EXPECT_TRUE(ev.flags & NG_F_FRAG);
  EXPECT_STREQ(ev.qname, "www.example.com");

  Bytes later = {17, 0, 0x00, 0xB8, 0, 0, 0, 7};  // offset 23 (x8), M=0
  auto before = tracer_->stats().frags_skipped;
  EXPECT_TRUE(
      run(buildFrame({.ipv6 = true, .ipv6_ext = later, .ipv6_first_next = 44}, q.bytes())).empty());
  EXPECT_EQ(tracer_->stats().frags_skipped, before + 1);
}

TEST_F(DnsParserTest, Ipv4Fragments) {
  DnsMsg q;
  auto ev = runOne(buildFrame({.ipv4_frag = 0x2000}, q.bytes()));  // MF, offset 0
  EXPECT_TRUE(ev.flags & NG_F_FRAG);
  EXPECT_EQ(ev.dns_id, 0x1234);

  auto before = tracer_->stats().frags_skipped;
  // A later fragment: its first bytes are payload, which here happen to look like ports 53.
  EXPECT_TRUE(run(buildFrame({.ipv4_frag = 0x0010}, q.bytes())).empty());
  EXPECT_TRUE(run(buildFrame({.ipv4_frag = 0x2010}, q.bytes())).empty());
  EXPECT_EQ(tracer_->stats().frags_skipped, before + 2);
}

TEST_F(DnsParserTest, TcpWithLengthPrefix) {
  DnsMsg q;
  q.name = wireName("big.example.org");
  q.qtype = 16;
  auto ev = runOne(buildFrame({.tcp = true}, q.bytes()));
  EXPECT_TRUE(ev.flags & NG_F_TCP);
  EXPECT_STREQ(ev.qname, "big.example.org");
  EXPECT_EQ(ev.qtype, 16);
  EXPECT_EQ(ev.dns_id, 0x1234);

  // Pure ACKs and FINs carry no message: nothing to report, nothing counted as an error (the
  // handshake's SYN is reported as such: TcpConnectionOpeningAndRefusal).
  auto st = tracer_->stats();
  EXPECT_TRUE(run(buildFrame({.tcp = true, .tcp_flags = 0x10}, {})).empty());
  EXPECT_TRUE(run(buildFrame({.tcp = true, .tcp_flags = 0x11}, {})).empty());
  EXPECT_EQ(tracer_->stats().not_dns, st.not_dns);
  EXPECT_EQ(tracer_->stats().short_packets, st.short_packets);

  // Without the length prefix the first two DNS bytes are taken as the length and the header is
  // shifted: the question count no longer reads 1, so it is rejected, not misreported.
  EXPECT_TRUE(run(buildFrame({.tcp = true, .tcp_length_prefix = false}, q.bytes())).empty());
}

// A sender may write the 2-byte length prefix in a segment of its own and the message in the next
// (TCP_NODELAY and two writes). The bare prefix is counted, not reported; the segment that starts
// right after it is parsed as the message without a prefix.
TEST_F(DnsParserTest, TcpLengthPrefixInItsOwnSegment) {
  DnsMsg q;
  q.name = wireName("split.example.org");
  q.qtype = 28;
  const Bytes msg = q.bytes();
  const Bytes prefix = {0, static_cast<uint8_t>(msg.size())};
  // Ports of their own: the pending-prefix map outlives a test.
  const FrameSpec bare{.tcp = true, .sport = 41001, .tcp_length_prefix = false, .tcp_seq = 7000};
  FrameSpec rest = bare;
  rest.tcp_seq = 7002;

  auto before = tracer_->stats();
  EXPECT_TRUE(run(buildFrame(bare, prefix)).empty());
  EXPECT_EQ(tracer_->stats().tcp_prefix_segments, before.tcp_prefix_segments + 1);
  auto ev = runOne(buildFrame(rest, msg));
  EXPECT_TRUE(ev.flags & NG_F_TCP);
  EXPECT_FALSE(ev.flags & NG_F_PARSE_ERR);
  EXPECT_STREQ(ev.qname, "split.example.org");
  EXPECT_EQ(ev.qtype, 28);
  EXPECT_EQ(ev.dns_id, 0x1234);
  EXPECT_EQ(ev.sport, 41001);
  EXPECT_EQ(tracer_->stats().not_dns, before.not_dns);

  // The pending prefix was used up: the same segment again (a retransmission) is not a message.
  EXPECT_TRUE(run(buildFrame(rest, msg)).empty());
  EXPECT_EQ(tracer_->stats().not_dns, before.not_dns + 1);

  // A segment that does not start where the prefix ended is not taken for its message.
  EXPECT_TRUE(run(buildFrame(bare, prefix)).empty());
  FrameSpec elsewhere = rest;
  elsewhere.tcp_seq = 9000;
  EXPECT_TRUE(run(buildFrame(elsewhere, msg)).empty());
  // Nor is a segment of another flow (other source port) at the right sequence number.
  FrameSpec other = rest;
  other.sport = 41002;
  EXPECT_TRUE(run(buildFrame(other, msg)).empty());
  // The right one still is.
  EXPECT_STREQ(runOne(buildFrame(rest, msg)).qname, "split.example.org");

  // A response split the same way (server side: source port 53).
  DnsMsg r = q;
  r.flags = 0x8180;
  const Bytes rmsg = r.bytes();
  const FrameSpec rbare{
      .tcp = true, .sport = 53, .dport = 41001, .tcp_length_prefix = false, .tcp_seq = 123456};
  FrameSpec rrest = rbare;
  rrest.tcp_seq = 123458;
  EXPECT_TRUE(run(buildFrame(rbare, {0, static_cast<uint8_t>(rmsg.size())})).empty());
  auto rev = runOne(buildFrame(rrest, rmsg));
  EXPECT_TRUE(rev.flags & NG_F_QR);
  EXPECT_STREQ(rev.qname, "split.example.org");
}

TEST_F(DnsParserTest, TruncatedAtEveryLength) {
  DnsMsg q;
  const size_t name_len = q.name.size();
  struct Case {
    FrameSpec spec;
    size_t dns_start;  // offset of the DNS header in the frame
  };
  // BPF_PROG_TEST_RUN refuses IPv4/IPv6 frames shorter than the IP header (it pulls it first), so
  // untagged frames start there; a VLAN-tagged frame is not pulled and is cut from 14 bytes on.
  const Case cases[] = {
      {{}, 14 + 20 + 8},
      {{.ipv6 = true}, 14 + 40 + 8},
      {{.tcp = true}, 14 + 20 + 20 + 2},
      {{.vlan_tpids = {0x8100}}, 14 + 4 + 20 + 8},
      {{.ipv6 = true, .tcp = true, .vlan_tpids = {0x8100}}, 14 + 4 + 40 + 20 + 2},
  };
  for (const auto& c : cases) {
    const Bytes full = buildFrame(c.spec, q.bytes());
    const size_t hdr_end = c.dns_start + 12;
    const size_t qtype_end = hdr_end + name_len + 2;
    const size_t l2 = 14 + 4 * c.spec.vlan_tpids.size();
    const size_t first = c.spec.vlan_tpids.empty() ? l2 + (c.spec.ipv6 ? 40 : 20) : 14;
    for (size_t len = first; len <= full.size(); len++) {
      SCOPED_TRACE("ipv6=" + std::to_string(c.spec.ipv6) + " tcp=" + std::to_string(c.spec.tcp) +
                   " vlan=" + std::to_string(c.spec.vlan_tpids.size()) +
                   " len=" + std::to_string(len));
      Bytes cut(full.begin(), full.begin() + static_cast<long>(len));
      auto evs = run(cut);
      if (len < hdr_end) {
        EXPECT_TRUE(evs.empty());
        continue;
      }
      ASSERT_EQ(evs.size(), 1u);
      EXPECT_EQ(evs[0].dns_id, 0x1234);
      EXPECT_EQ(evs[0].pkt_len, len - l2);
      if (len < qtype_end) {
        EXPECT_TRUE(evs[0].flags & NG_F_PARSE_ERR);
        EXPECT_EQ(evs[0].qtype, 0);
      } else {
        EXPECT_FALSE(evs[0].flags & NG_F_PARSE_ERR);
        EXPECT_STREQ(evs[0].qname, "www.example.com");
        EXPECT_EQ(evs[0].qtype, 1);
      }
    }
  }
}

TEST_F(DnsParserTest, CompressionPointersAndLoopsAreRejected) {
  const Bytes names[] = {
      {0xC0, 0x0C},                    // pointer to itself (offset 12 = the name)
      {3, 'w', 'w', 'w', 0xC0, 0x0C},  // label, then a pointer back to the start: a loop
      {3, 'w', 'w', 'w', 0xC0, 0x20},  // forward pointer into the answer section
      {0x40, 'x', 0},                  // reserved label type 01
  };
  for (const auto& name : names) {
    DnsMsg q;
    q.name = name;
    auto ev = runOne(buildFrame({}, q.bytes()));
    EXPECT_TRUE(ev.flags & NG_F_PARSE_ERR);
    EXPECT_STREQ(ev.qname, "");
    EXPECT_EQ(ev.dns_id, 0x1234);  // the header is still reported: it matters for correlation
  }
}

// The kernel captures the first NG_DNS_QNAME_MAX bytes of the question raw; the loader decodes
// them (bpf/dns_wire.h). A question longer than that is reported truncated: the captured prefix of
// the name, qtype 0 (unknown), NG_F_QNAME_TRUNC, the same on every hop.
TEST_F(DnsParserTest, OversizeNames) {
  // Labels of 63, 63, 63, 61: 255 wire bytes (the RFC 1035 maximum), 253 dotted characters.
  std::string l63(63, 'a');
  DnsMsg q;
  q.name = wireName(l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b'));
  ASSERT_EQ(q.name.size(), 255u);
  q.qtype = 33;
  const std::string dotted = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  for (bool tcp : {false, true}) {
    SCOPED_TRACE(tcp ? "tcp" : "udp");
    auto ev = runOne(buildFrame({.tcp = tcp}, q.bytes()));
    EXPECT_TRUE(ev.flags & NG_F_QNAME_TRUNC);
    EXPECT_FALSE(ev.flags & NG_F_PARSE_ERR);
    EXPECT_EQ(ev.qtype, 0);  // past the capture
    EXPECT_EQ(std::string(ev.qname), dotted.substr(0, NG_DNS_QNAME_MAX - 1));
    EXPECT_EQ(ev.qrest, 255 + 4);
  }

  // The longest name whose qtype is captured: 124 dotted characters (wire 126 + qtype).
  const std::string l60(60, 'c');
  DnsMsg fit;
  fit.name = wireName(l60 + "." + l60 + "." + "dd");
  fit.qtype = 16;
  ASSERT_EQ(fit.name.size(), 126u);
  auto ev2 = runOne(buildFrame({}, fit.bytes()));
  EXPECT_EQ(ev2.flags & (NG_F_QNAME_TRUNC | NG_F_PARSE_ERR), 0);
  EXPECT_EQ(std::string(ev2.qname), l60 + "." + l60 + ".dd");
  EXPECT_EQ(ev2.qtype, 16);

  // One character more: the whole name is there, its qtype is not.
  DnsMsg one_more = fit;
  one_more.name = wireName(l60 + "." + l60 + "." + "ddd");
  auto ev3 = runOne(buildFrame({.ipv6 = true}, one_more.bytes()));
  EXPECT_TRUE(ev3.flags & NG_F_QNAME_TRUNC);
  EXPECT_FALSE(ev3.flags & NG_F_PARSE_ERR);
  EXPECT_EQ(std::string(ev3.qname), l60 + "." + l60 + ".ddd");
  EXPECT_EQ(ev3.qtype, 0);

  // Query and response of the same long question decode alike (the correlation key matches),
  // though the response carries more bytes after its question.
  DnsMsg r = q;
  r.flags = 0x8180;
  Bytes rbytes = r.bytes();
  rbytes.insert(rbytes.end(), 64, 0xEE);  // stand-in for the answer section
  auto rev = runOne(buildFrame({.sport = 53, .dport = 40000}, rbytes));
  EXPECT_STREQ(rev.qname, dotted.substr(0, NG_DNS_QNAME_MAX - 1).c_str());
  EXPECT_EQ(rev.qtype, 0);
  EXPECT_TRUE(rev.flags & NG_F_QNAME_TRUNC);

  // A bad label inside the capture is still an error, however long the message.
  DnsMsg bad = q;
  bad.name[64] = 0x41;  // second length byte: reserved label type 01
  auto ev4 = runOne(buildFrame({}, bad.bytes()));
  EXPECT_TRUE(ev4.flags & NG_F_PARSE_ERR);
  EXPECT_STREQ(ev4.qname, "");
}

// The record is sized by the question: the fixed part plus room for NG_DNS_REC_Q1, Q2 or Q3 bytes,
// the smallest that holds every byte the loader's decoder reads (name, its zero byte and qtype; up
// to a bad byte; or to the end of the message). Whatever the size, the event decodes exactly as a
// 128-byte capture of the message would.
TEST_F(DnsParserTest, RecordSizeFollowsTheQuestion) {
  constexpr size_t q1 = NG_DNS_REC_Q1, q2 = NG_DNS_REC_Q2, q3 = NG_DNS_REC_Q3;
  // A dotted name of n characters in labels of at most 50: n + 2 wire bytes, n + 4 read.
  auto dotted = [](size_t n) {
    std::string out;
    while (out.size() < n) {
      if (!out.empty()) out += '.';
      out += std::string(std::min<size_t>(50, n - out.size()),
                         static_cast<char>('a' + out.size() % 26));
    }
    return out;
  };
  const std::string l63(63, 'a');
  // More labels than the kernel hops over: the largest record, unless the message ends within the
  // smallest (the query).
  std::string labels17;
  for (int i = 0; i < 17; i++) labels17 += i ? ".a" : "a";
  Bytes pointer(1, 19);  // a 19-byte label, then a compression pointer: an error at byte 20
  pointer.insert(pointer.end(), 19, 'p');
  pointer.insert(pointer.end(), {0xC0, 0x0C});
  struct Case {
    std::string what;
    Bytes name;
    size_t room_query;     // the message ends with the question
    size_t room_response;  // 200 more bytes follow it (answers)
  };
  const Case cases[] = {
      {"short name", wireName("a.bc"), q1, q1},
      {"root", wireName(""), q1, q1},
      {"36 chars: reads 40, Q1 exactly", wireName(dotted(36)), q1, q1},
      {"37 chars: one byte over Q1", wireName(dotted(37)), q2, q2},
      {"100 chars: reads 104, Q2 exactly", wireName(dotted(100)), q2, q2},
      {"101 chars: one byte over Q2", wireName(dotted(101)), q3, q3},
      {"124 chars: the longest whose qtype is captured", wireName(dotted(124)), q3, q3},
      {"125 chars: qtype past the capture", wireName(dotted(125)), q3, q3},
      {"255-byte name", wireName(l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b')), q3, q3},
      {"17 labels", wireName(labels17), q1, q3},
      {"pointer at byte 20", pointer, q1, q1},
  };
  for (const auto& c : cases) {
    DnsMsg q;
    q.name = c.name;
    q.qtype = 28;
    const Bytes msg = q.bytes();
    Bytes resp_msg = msg;
    resp_msg[2] |= 0x80;
    resp_msg.insert(resp_msg.end(), 200, 0xEE);
    struct Variant {
      std::string what;
      FrameSpec spec;
      const Bytes* msg;
      size_t room;
    };
    const Variant variants[] = {
        {"udp4 query", {}, &msg, c.room_query},
        {"udp6 query", {.ipv6 = true}, &msg, c.room_query},
        {"tcp4 query", {.tcp = true}, &msg, c.room_query},
        {"udp4 response", {.sport = 53, .dport = 40000}, &resp_msg, c.room_response},
    };
    for (const auto& v : variants) {
      SCOPED_TRACE(c.what + ", " + v.what);
      auto recs = runRaw(buildFrame(v.spec, *v.msg));
      ASSERT_EQ(recs.size(), 1u);
      EXPECT_EQ(recs[0].size(), NG_DNS_REC_HEAD + v.room);
      ng_dns_event ev;
      ASSERT_TRUE(decodeRecord(recs[0].data(), recs[0].size(), ev));
      const size_t rest = v.msg->size() - 12;
      const auto want = decodeQuestion(v.msg->data() + 12, std::min<size_t>(rest, 128), rest);
      EXPECT_STREQ(ev.qname, want.qname);
      EXPECT_EQ(ev.qtype, want.qtype);
      EXPECT_EQ(ev.flags & (NG_F_PARSE_ERR | NG_F_QNAME_TRUNC), want.flags);
      EXPECT_EQ(ev.qrest, rest);
      EXPECT_EQ(ev.dns_id, 0x1234);
    }
  }
}

// A question whose bytes end before its labels say (the frame was cut, the headers still claim the
// whole message): the event is malformed, as before. What ends within the smallest record takes
// it; a longer name cut by the end of the data takes the largest (the kernel does not know where it
// would have ended); one whose zero byte is there but not its qtype is sized by the name.
TEST_F(DnsParserTest, QuestionEndsBeforeItsClaimedLength) {
  DnsMsg q;
  q.name = wireName(std::string(49, 'x') + "." + std::string(50, 'y'));  // zero byte at 101
  const Bytes full = buildFrame({}, q.bytes());
  const size_t dns_start = 14 + 20 + 8;
  const std::pair<size_t, size_t> cases[] = {{3, NG_DNS_REC_Q1},   {40, NG_DNS_REC_Q1},
                                             {41, NG_DNS_REC_Q3},  {101, NG_DNS_REC_Q3},
                                             {102, NG_DNS_REC_Q2}, {103, NG_DNS_REC_Q2}};
  for (auto [have, room] : cases) {
    SCOPED_TRACE("question bytes in the frame: " + std::to_string(have));
    Bytes cut(full.begin(), full.begin() + static_cast<long>(dns_start + 12 + have));
    auto recs = runRaw(cut);
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_EQ(recs[0].size(), NG_DNS_REC_HEAD + room);
    ng_dns_event ev;
    ASSERT_TRUE(decodeRecord(recs[0].data(), recs[0].size(), ev));
    EXPECT_EQ(ev.flags & (NG_F_PARSE_ERR | NG_F_QNAME_TRUNC), NG_F_PARSE_ERR);
    EXPECT_STREQ(ev.qname, "");
    EXPECT_EQ(ev.qrest, have);
  }
  // A label that claims more bytes than the message has left.
  DnsMsg lying;
  lying.name = {20, 'a', 'b', 'c'};
  Bytes m = lying.bytes();
  m.resize(12 + 4);  // no zero byte, no qtype: the message ends inside the label
  auto ev = runOne(buildFrame({}, m));
  EXPECT_TRUE(ev.flags & NG_F_PARSE_ERR);
  EXPECT_EQ(ev.qrest, 4);
}

TEST_F(DnsParserTest, RootName) {
  DnsMsg q;
  q.name = wireName("");
  q.qtype = 2;  // ". NS", the priming query
  auto ev = runOne(buildFrame({}, q.bytes()));
  EXPECT_FALSE(ev.flags & NG_F_PARSE_ERR);
  EXPECT_STREQ(ev.qname, "");
  EXPECT_EQ(ev.qtype, 2);
}

TEST_F(DnsParserTest, NonDnsOnPort53) {
  const std::string http = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  auto before = tracer_->stats();
  EXPECT_TRUE(run(buildFrame({}, Bytes(http.begin(), http.end()))).empty());
  EXPECT_TRUE(
      run(buildFrame({.tcp = true, .tcp_length_prefix = false}, Bytes(http.begin(), http.end())))
          .empty());
  EXPECT_EQ(tracer_->stats().not_dns, before.not_dns + 2);

  EXPECT_TRUE(run(buildFrame({}, Bytes{1, 2, 3, 4, 5})).empty());
  EXPECT_EQ(tracer_->stats().short_packets, before.short_packets + 1);

  DnsMsg q;
  q.qdcount = 0;
  EXPECT_TRUE(run(buildFrame({}, q.bytes())).empty());
  q.qdcount = 1;
  q.flags = 0x7800;  // opcode 15: unassigned
  EXPECT_TRUE(run(buildFrame({}, q.bytes())).empty());
}

TEST_F(DnsParserTest, OtherPortsAndProtocolsAreIgnored) {
  DnsMsg q;
  EXPECT_TRUE(run(buildFrame({.sport = 40000, .dport = 5353}, q.bytes())).empty());
  Bytes arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 2, 0x08, 0x06};
  arp.resize(60, 0);
  EXPECT_TRUE(run(arp).empty());
}

TEST_F(DnsParserTest, VlanTags) {
  DnsMsg q;
  auto ev = runOne(buildFrame({.vlan_tpids = {0x8100}}, q.bytes()));
  EXPECT_TRUE(ev.flags & NG_F_VLAN);
  EXPECT_STREQ(ev.qname, "www.example.com");
  EXPECT_EQ(ev.pkt_len, 20 + 8 + q.bytes().size());

  auto ev2 = runOne(buildFrame({.ipv6 = true, .vlan_tpids = {0x88A8, 0x8100}}, q.bytes()));
  EXPECT_TRUE(ev2.flags & NG_F_VLAN);
  EXPECT_TRUE(ev2.flags & NG_F_IPV6);
  EXPECT_STREQ(ev2.qname, "www.example.com");

  // Three tags is more than we follow: skipped rather than misparsed.
  EXPECT_TRUE(run(buildFrame({.vlan_tpids = {0x88A8, 0x8100, 0x8100}}, q.bytes())).empty());
}

TEST_F(DnsParserTest, HopComesFromTheDeviceMap) {
  auto ino = tracer_->netnsInode("");
  ASSERT_TRUE(ino.ok());
  DnsMsg q;
  auto ev = runOne(buildFrame({}, q.bytes()));
  EXPECT_FALSE(ev.flags & NG_F_HOP_SET);
  ASSERT_TRUE(tracer_->setHop(*ino, 1, 7).ok());
  ev = runOne(buildFrame({}, q.bytes()));
  EXPECT_TRUE(ev.flags & NG_F_HOP_SET);
  EXPECT_EQ(ev.hop, 7);
  // Same ifindex in another netns (inode) is another device.
  ASSERT_TRUE(tracer_->setHop(*ino + 1, 1, 9).ok());
  ev = runOne(buildFrame({}, q.bytes()));
  EXPECT_EQ(ev.hop, 7);
}

TEST_F(DnsParserTest, RingSizeIsValidated) {
  auto bad = DnsTracer::open({.ring_bytes = 3000});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("power of two"), std::string::npos);
}

}  // namespace
}  // namespace nodegate::dns::test

namespace nodegate::dns::test {
namespace {

// --- what is not a DNS message but says why a query failed (issue 19) ---------------------------

TEST_F(DnsParserTest, ResponsesWithoutAnswerRecordsAreFlagged) {
  DnsMsg r;
  r.flags = 0x8180;  // QR RD RA, NOERROR
  auto nodata = runOne(buildFrame({.sport = 53, .dport = 40000}, r.bytes()));
  EXPECT_TRUE(nodata.flags & NG_F_NOANS);
  EXPECT_EQ(nodata.rcode, 0);
  r.ancount = 1;
  auto data = runOne(buildFrame({.sport = 53, .dport = 40000}, r.bytes()));
  EXPECT_FALSE(data.flags & NG_F_NOANS);
  DnsMsg q;  // a query has no answers either, but it is not a response
  EXPECT_FALSE(runOne(buildFrame({}, q.bytes())).flags & NG_F_NOANS);
}

TEST_F(DnsParserTest, IcmpPortUnreachableQuotingAQuery) {
  DnsMsg q;
  q.id = 0x7777;
  const Bytes quote = l3Of(buildFrame({}, q.bytes()));
  auto ev = runOne(buildIcmp({.from = {10, 244, 0, 3}}, quote));
  EXPECT_EQ(ev.flags & (NG_F_ICMP | NG_F_QR | NG_F_TCP | NG_F_PARSE_ERR | NG_F_IPV6), NG_F_ICMP);
  EXPECT_EQ(ev.rcode, 3);  // the ICMP code
  EXPECT_EQ(ev.dns_id, 0x7777);
  EXPECT_STREQ(ev.qname, "www.example.com");
  EXPECT_EQ(ev.qtype, 1);
  EXPECT_EQ(formatAddress(ev, true), "10.244.0.3");   // who sent the ICMP
  EXPECT_EQ(formatAddress(ev, false), "10.96.0.10");  // where the query was going
  EXPECT_EQ(ev.sport, 40000);
  EXPECT_EQ(ev.dport, 53);

  // Host unreachable (a router that cannot deliver), and ICMPv6 port unreachable.
  EXPECT_EQ(runOne(buildIcmp({.code = 1}, quote)).rcode, 1);
  const Bytes quote6 = l3Of(buildFrame({.ipv6 = true}, q.bytes()));
  auto ev6 = runOne(buildIcmp({.ipv6 = true, .code = 4, .from = Bytes(kDst6, kDst6 + 16)}, quote6));
  EXPECT_EQ(ev6.flags & (NG_F_ICMP | NG_F_IPV6), NG_F_ICMP | NG_F_IPV6);
  EXPECT_EQ(ev6.rcode, 4);
  EXPECT_STREQ(ev6.qname, "www.example.com");
  EXPECT_EQ(formatAddress(ev6, false), "fd10:0:2::a");
}

TEST_F(DnsParserTest, IcmpQuotingOnlyTheUdpHeaderIsReportedWithoutDnsFields) {
  // RFC 792 promises the IP header and 8 bytes: ports, no DNS header.
  DnsMsg q;
  Bytes quote = l3Of(buildFrame({.sport = 41234}, q.bytes()));
  quote.resize(20 + 8);
  auto ev = runOne(buildIcmp({}, quote));
  EXPECT_EQ(ev.flags & (NG_F_ICMP | NG_F_PARSE_ERR), NG_F_ICMP);
  EXPECT_EQ(ev.qrest, 0);
  EXPECT_STREQ(ev.qname, "");
  EXPECT_EQ(ev.sport, 41234);
  EXPECT_EQ(ev.dport, 53);
  EXPECT_EQ(ev.tcp_seq, 0u);
}

TEST_F(DnsParserTest, IcmpQuotingATcpSynCarriesItsSequenceNumber) {
  const Bytes quote = l3Of(buildFrame({.tcp = true, .tcp_flags = 0x02, .tcp_seq = 0xA1B2C3D4}, {}));
  auto ev = runOne(buildIcmp({.code = 13}, quote));  // administratively prohibited
  EXPECT_EQ(ev.flags & (NG_F_ICMP | NG_F_TCP | NG_F_SYN), NG_F_ICMP | NG_F_TCP);
  EXPECT_EQ(ev.tcp_seq, 0xA1B2C3D4u);
  EXPECT_EQ(ev.rcode, 13);
}

// Every cut of an ICMP error quoting a query, and quotes that lie: the program returns
// TC_ACT_UNSPEC every time (run() checks it), reports nothing it cannot read, and reads DNS fields
// only from a whole quoted header.
TEST_F(DnsParserTest, HostileAndTruncatedIcmpErrors) {
  DnsMsg q;
  const Bytes quote = l3Of(buildFrame({}, q.bytes()));
  for (bool v6 : {false, true}) {
    const Bytes full = v6 ? buildIcmp({.ipv6 = true, .from = Bytes(kDst6, kDst6 + 16)},
                                      l3Of(buildFrame({.ipv6 = true}, q.bytes())))
                          : buildIcmp({}, quote);
    const size_t ip = v6 ? 40 : 20;
    const size_t ports_end = 14 + ip + 8 + ip + 8;  // outer IP, ICMP, quoted IP, quoted UDP
    for (size_t len = 14 + ip; len <= full.size(); len++) {
      SCOPED_TRACE("v6=" + std::to_string(v6) + " len=" + std::to_string(len));
      auto evs = run(Bytes(full.begin(), full.begin() + static_cast<long>(len)));
      if (len < ports_end) {
        EXPECT_TRUE(evs.empty());
        continue;
      }
      EXPECT_EQ(evs.size(), 1u);
      if (evs.size() != 1) continue;
      EXPECT_TRUE(evs[0].flags & NG_F_ICMP);
      EXPECT_EQ(evs[0].dport, 53);
      if (len < ports_end + 12) {
        EXPECT_EQ(evs[0].qrest, 0);
        EXPECT_FALSE(evs[0].flags & NG_F_PARSE_ERR);
      } else {
        EXPECT_EQ(evs[0].dns_id, 0x1234);
      }
    }
  }
  auto mutate = [&](size_t at, uint8_t v) {  // at: offset in the quote
    Bytes b = quote;
    b[at] = v;
    return buildIcmp({}, b);
  };
  EXPECT_TRUE(run(mutate(0, 0x44)).empty());  // quoted IHL 4: below the minimum
  EXPECT_TRUE(run(mutate(0, 0x4F)).empty());  // IHL 15: ports beyond the quote
  EXPECT_TRUE(run(mutate(0, 0x65)).empty());  // version 6 in an ICMPv4 quote
  EXPECT_TRUE(run(mutate(9, 1)).empty());     // quoted protocol ICMP
  EXPECT_TRUE(run(mutate(6, 0x01)).empty());  // a later fragment quoted (offset 8)
  EXPECT_TRUE(run(mutate(23, 54)).empty());   // quoted destination port 54
  // A quoted UDP length below its own header, or far beyond the quote: bounded, no DNS fields
  // for the first, the real bytes for the second.
  Bytes shortlen = quote;
  shortlen[24] = 0;
  shortlen[25] = 4;
  auto evs = run(buildIcmp({}, shortlen));
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].qrest, 0);
  Bytes longlen = quote;
  longlen[24] = 0xFF;
  longlen[25] = 0xFF;
  evs = run(buildIcmp({}, longlen));
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_STREQ(evs[0].qname, "www.example.com");
  EXPECT_EQ(evs[0].qrest, q.bytes().size() - 12);
  // Other ICMP messages quoting a DNS query are not destination unreachable: ignored.
  EXPECT_TRUE(run(buildIcmp({.type = 11}, quote)).empty());  // time exceeded
  EXPECT_TRUE(run(buildIcmp({.type = 0}, quote)).empty());   // echo reply
  const Bytes from6(kDst6, kDst6 + 16);
  EXPECT_TRUE(run(buildIcmp({.ipv6 = true, .type = 3, .from = from6},  // ICMPv6 time exceeded
                            l3Of(buildFrame({.ipv6 = true}, q.bytes()))))
                  .empty());
  // An IPv4 quote in an ICMPv6 error: its version does not match.
  EXPECT_TRUE(run(buildIcmp({.ipv6 = true, .from = from6}, quote)).empty());
}

TEST_F(DnsParserTest, TcpConnectionOpeningAndRefusal) {
  auto syn = runOne(buildFrame({.tcp = true, .tcp_flags = 0x02, .tcp_seq = 1000}, {}));
  EXPECT_EQ(syn.flags & (NG_F_SYN | NG_F_RST | NG_F_ACK | NG_F_TCP | NG_F_PARSE_ERR),
            NG_F_SYN | NG_F_TCP);
  EXPECT_EQ(syn.tcp_seq, 1000u);
  EXPECT_EQ(syn.dport, 53);
  EXPECT_STREQ(syn.qname, "");
  auto synack = runOne(buildFrame(
      {.tcp = true, .sport = 53, .dport = 40000, .tcp_flags = 0x12, .tcp_seq = 9, .tcp_ack = 1001},
      {}));
  EXPECT_EQ(synack.flags & (NG_F_SYN | NG_F_ACK), NG_F_SYN | NG_F_ACK);
  EXPECT_EQ(synack.tcp_seq, 1001u);
  auto rst = runOne(buildFrame(
      {.tcp = true, .sport = 53, .dport = 40000, .tcp_flags = 0x14, .tcp_ack = 1001}, {}));
  EXPECT_EQ(rst.flags & (NG_F_SYN | NG_F_RST | NG_F_ACK), NG_F_RST | NG_F_ACK);
  EXPECT_EQ(rst.tcp_seq, 1001u);
  auto rst6 = runOne(buildFrame(
      {.ipv6 = true, .tcp = true, .sport = 53, .dport = 40000, .tcp_flags = 0x04, .tcp_seq = 5},
      {}));
  EXPECT_EQ(rst6.flags & (NG_F_RST | NG_F_ACK | NG_F_IPV6), NG_F_RST | NG_F_IPV6);
  EXPECT_EQ(rst6.tcp_seq, 5u);
  // Not reported: a client's RST, a SYN+ACK from the client's side, a SYN from port 53, SYN+RST.
  EXPECT_TRUE(run(buildFrame({.tcp = true, .tcp_flags = 0x04}, {})).empty());
  EXPECT_TRUE(run(buildFrame({.tcp = true, .tcp_flags = 0x12}, {})).empty());
  EXPECT_TRUE(
      run(buildFrame({.tcp = true, .sport = 53, .dport = 40000, .tcp_flags = 0x02}, {})).empty());
  EXPECT_TRUE(
      run(buildFrame({.tcp = true, .sport = 53, .dport = 40000, .tcp_flags = 0x06}, {})).empty());
}

}  // namespace
}  // namespace nodegate::dns::test
