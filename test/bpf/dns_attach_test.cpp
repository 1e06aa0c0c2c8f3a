// The tracer on real devices: two network namespaces joined by a veth pair, the classifier attached
// inside each through its netns file, real DNS queries sent with dig, and real kernel drops
// (no socket on port 53; an nftables drop rule) reported with their reason names from BTF.
#include <bpf/bpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dns_tracer.h"
#include "tc_filter.h"

namespace nodegate::dns::test {
namespace {

int sh(const std::string& cmd) {
  int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  return out;
}

// Two namespaces "a" (the client, 10.77.0.1) and "b" (the server side, 10.77.0.2), one veth pair.
// Names carry the pid so parallel test processes never collide; the destructor removes both
// namespaces, which takes the veth and any qdisc with it, whatever the test did.
class TwoNetns {
 public:
  TwoNetns() {
    const std::string id = std::to_string(getpid());
    a = "ngbpf" + id + "a";
    b = "ngbpf" + id + "b";
    dev_a = "ngb" + id + "a";
    dev_b = "ngb" + id + "b";
    ok = sh("ip netns add " + a) == 0 && sh("ip netns add " + b) == 0 &&
         sh("ip link add " + dev_a + " netns " + a + " type veth peer name " + dev_b + " netns " +
            b) == 0 &&
         sh("ip -n " + a + " addr add 10.77.0.1/30 dev " + dev_a) == 0 &&
         sh("ip -n " + b + " addr add 10.77.0.2/30 dev " + dev_b) == 0 &&
         sh("ip -n " + a + " link set " + dev_a + " up") == 0 &&
         sh("ip -n " + b + " link set " + dev_b + " up") == 0 &&
         sh("ip -n " + a + " link set lo up") == 0 && sh("ip -n " + b + " link set lo up") == 0;
    if (ok) {
      ifindex_a = std::atoi(
          capture("ip netns exec " + a + " cat /sys/class/net/" + dev_a + "/ifindex").c_str());
      ifindex_b = std::atoi(
          capture("ip netns exec " + b + " cat /sys/class/net/" + dev_b + "/ifindex").c_str());
      ok = ifindex_a > 0 && ifindex_b > 0;
    }
  }
  ~TwoNetns() { remove(); }
  void remove() {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
  }
  std::string path(const std::string& ns) const { return "/run/netns/" + ns; }
  // One query from a to b's port 53; dig's own exit status does not matter (nothing answers).
  void query(const std::string& name, const std::string& extra = "") const {
    sh("ip netns exec " + a + " dig +tries=1 +time=1 " + extra + " @10.77.0.2 " + name);
  }

  std::string a, b, dev_a, dev_b;
  int ifindex_a = 0, ifindex_b = 0;
  bool ok = false;
};

class DnsAttachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "attaching tc programs in namespaces needs root";
    ASSERT_EQ(sh("command -v dig"), 0) << "dig missing (package bind9-dnsutils)";
    net_ = std::make_unique<TwoNetns>();
    ASSERT_TRUE(net_->ok) << "failed to build the veth pair between two namespaces";
    auto t = DnsTracer::open({.ring_bytes = 1u << 20});
    ASSERT_TRUE(t.ok()) << t.error().message;
    tracer_ = std::move(t.value());
    auto ia = tracer_->netnsInode(net_->path(net_->a));
    auto ib = tracer_->netnsInode(net_->path(net_->b));
    ASSERT_TRUE(ia.ok() && ib.ok());
    ino_a_ = *ia;
    ino_b_ = *ib;
  }
  void TearDown() override {
    tracer_.reset();  // detaches before the namespaces go
    net_.reset();
  }

  // Events of our two namespaces only: kfree_skb sees the whole machine.
  std::vector<ng_dns_event> collect(
      const std::string& qname, size_t want,
      std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
    std::vector<ng_dns_event> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      auto n = tracer_->consume([&](const ng_dns_event& ev) {
        if ((ev.netns_ino == ino_a_ || ev.netns_ino == ino_b_) && qname == ev.qname)
          out.push_back(ev);
      });
      EXPECT_TRUE(n.ok());
      if (out.size() >= want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return out;
  }

  // Drops are followed while some device is attached; b's side stays unattached (no hop).
  void attachClient() {
    ASSERT_TRUE(
        tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  }

  // Starts the poll thread, counting into `seen` the events of the client's netns for `qname`.
  bool startCounting(const std::string& qname, std::atomic<int>& seen) {
    const uint64_t ino = ino_a_;
    return tracer_
        ->start([ino, qname, &seen](const ng_dns_event& ev) {
          if (ev.netns_ino == ino && qname == ev.qname) seen++;
        })
        .ok();
  }

  static const ng_dns_event* find(const std::vector<ng_dns_event>& evs, uint16_t kind, uint16_t dir,
                                  uint64_t ino) {
    for (const auto& ev : evs)
      if (ev.kind == kind && ev.dir == dir && ev.netns_ino == ino) return &ev;
    return nullptr;
  }

  std::unique_ptr<TwoNetns> net_;
  std::unique_ptr<DnsTracer> tracer_;
  uint64_t ino_a_ = 0, ino_b_ = 0;
};

TEST_F(DnsAttachTest, SeesQueryOnBothEndsAndTheNoSocketDrop) {
  auto at_a =
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a, .hop = 3});
  ASSERT_TRUE(at_a.ok()) << at_a.error().message;
  auto at_b =
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b, .hop = 4});
  ASSERT_TRUE(at_b.ok()) << at_b.error().message;
  EXPECT_EQ(at_a->netns_ino, ino_a_);
  EXPECT_TRUE(at_a->created_qdisc);
  EXPECT_NE(at_a->netns_cookie, 0u);
  EXPECT_NE(at_a->netns_cookie, at_b->netns_cookie);
  EXPECT_NE(
      capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " egress").find("ng_tc"),
      std::string::npos);
  // Attaching again is a no-op, not a second filter.
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a, .hop = 3})
          .ok());
  EXPECT_EQ(tracer_->attachments().size(), 2u);

  // Each end is the first device created in its netns, so both have the same ifindex there: only
  // the attachment id the program reads from the skb tells them apart (dns_event.h, round 6).
  EXPECT_EQ(net_->ifindex_a, net_->ifindex_b);
  ASSERT_TRUE(tracer_->dropsAvailable()) << "kfree_skb program did not attach";
  net_->query("probe.nodegate.test");
  auto evs = collect("probe.nodegate.test", 3);

  const ng_dns_event* out = find(evs, NG_EV_PACKET, NG_DIR_EGRESS, ino_a_);
  ASSERT_NE(out, nullptr) << "no egress event on the client's veth";
  EXPECT_EQ(out->ifindex, static_cast<uint32_t>(net_->ifindex_a));
  EXPECT_EQ(out->hop, 3);
  EXPECT_TRUE(out->flags & NG_F_HOP_SET);
  EXPECT_EQ(out->netns_cookie, at_a->netns_cookie);  // stamped by the loader
  EXPECT_EQ(out->dport, 53);
  EXPECT_EQ(formatAddress(*out, true), "10.77.0.1");
  EXPECT_EQ(formatAddress(*out, false), "10.77.0.2");
  EXPECT_EQ(out->qtype, 1);
  EXPECT_FALSE(out->flags & NG_F_QR);

  const ng_dns_event* in = find(evs, NG_EV_PACKET, NG_DIR_INGRESS, ino_b_);
  ASSERT_NE(in, nullptr) << "no ingress event on the server's veth";
  EXPECT_EQ(in->ifindex, static_cast<uint32_t>(net_->ifindex_b));
  EXPECT_EQ(in->hop, 4);
  EXPECT_EQ(in->netns_cookie, at_b->netns_cookie);
  EXPECT_EQ(in->dns_id, out->dns_id);
  EXPECT_GE(in->ts_ns, out->ts_ns);

  const ng_dns_event* drop = find(evs, NG_EV_DROP, NG_DIR_NONE, ino_b_);
  ASSERT_NE(drop, nullptr) << "no drop event for the query nobody listens to";
  EXPECT_EQ(tracer_->dropReasonName(drop->drop_reason), "NO_SOCKET");
  EXPECT_EQ(drop->ifindex, static_cast<uint32_t>(net_->ifindex_b));
  EXPECT_EQ(drop->hop, 4);
  // Read by the kernel from struct net: the same cookie the loader took with SO_NETNS_COOKIE.
  EXPECT_EQ(drop->netns_cookie, at_b->netns_cookie);
  EXPECT_EQ(drop->dns_id, out->dns_id);
  EXPECT_EQ(tracer_->stats().events_lost, 0u);
}

// A DNS-over-TCP server in b for one connection: reads the length-prefixed query and answers
// NOERROR with the question echoed. Real TCP segments carry their payload in page fragments, not
// in the skb's linear data, which BPF_PROG_TEST_RUN frames never do.
// With "split" it writes the answer's length prefix and the answer in two segments (TCP_NODELAY,
// a pause between the writes), as some servers and clients do.
constexpr const char* kTcpDnsServer = R"(import socket, struct, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 53))
s.listen(1)
open(sys.argv[1], "w").close()
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = struct.unpack("!H", c.recv(2, socket.MSG_WAITALL))[0]
q = c.recv(n, socket.MSG_WAITALL)
i = 12
while q[i]:
    i += q[i] + 1
r = q[:2] + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00" + q[12:i + 5]
if len(sys.argv) > 2 and sys.argv[2] == "split":
    c.sendall(struct.pack("!H", len(r)))
    time.sleep(0.05)
    c.sendall(r)
else:
    c.sendall(struct.pack("!H", len(r)) + r)
c.recv(1)
)";

// A DNS-over-TCP client that writes the length prefix in a segment of its own, then the query.
constexpr const char* kSplitTcpClient = R"(import socket, struct, sys, time
name = sys.argv[1]
q = struct.pack("!6H", 0x4242, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack("!2H", 1, 1)
c = socket.create_connection(("10.77.0.2", 53), timeout=5)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(struct.pack("!H", len(q)))
time.sleep(0.05)
c.sendall(q)
n = struct.unpack("!H", c.recv(2, socket.MSG_WAITALL))[0]
r = c.recv(n, socket.MSG_WAITALL)
print("rcode", r[3] & 15, "id", struct.unpack("!H", r[:2])[0])
c.close()
)";

// Runs kTcpDnsServer in the server namespace for one connection; removes its files and stops it
// (if still running) on destruction.
class TcpDnsServer {
 public:
  TcpDnsServer(const TwoNetns& net, const std::string& mode)
      : dir_("/tmp/ngbpf-tcp-" + std::to_string(getpid())) {
    if (sh("mkdir -p " + dir_) != 0) return;
    if (!write(dir_ + "/server.py", kTcpDnsServer) || !write(dir_ + "/client.py", kSplitTcpClient))
      return;
    // timeout bounds the server even if the test dies before the destructor runs.
    if (sh("ip netns exec " + net.b + " timeout 20 python3 " + dir_ + "/server.py " + dir_ +
           "/ready " + mode + " & echo $! > " + dir_ + "/pid") != 0)
      return;
    for (int i = 0; i < 100 && sh("test -e " + dir_ + "/ready") != 0; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ready = sh("test -e " + dir_ + "/ready") == 0;
  }
  ~TcpDnsServer() {
    sh("test -s " + dir_ + "/pid && kill $(cat " + dir_ + "/pid)");
    sh("rm -rf " + dir_);
  }
  std::string client() const { return dir_ + "/client.py"; }
  bool ready = false;

 private:
  static bool write(const std::string& path, const char* text) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return false;
    std::fputs(text, f);
    return std::fclose(f) == 0;
  }
  std::string dir_;
};

// The four message-carrying sightings of one TCP exchange (query out of a, into b; response out
// of b, into a), each checked to be a whole, parsed DNS message.
void expectTcpExchange(const std::vector<ng_dns_event>& evs, uint64_t ino_a, uint64_t ino_b) {
  auto one = [&](uint16_t dir_, uint64_t ino, bool response) -> const ng_dns_event* {
    for (const auto& ev : evs)
      if (ev.kind == NG_EV_PACKET && ev.dir == dir_ && ev.netns_ino == ino &&
          ((ev.flags & NG_F_QR) != 0) == response)
        return &ev;
    return nullptr;
  };
  const ng_dns_event* q_out = one(NG_DIR_EGRESS, ino_a, false);
  const ng_dns_event* q_in = one(NG_DIR_INGRESS, ino_b, false);
  const ng_dns_event* r_out = one(NG_DIR_EGRESS, ino_b, true);
  const ng_dns_event* r_in = one(NG_DIR_INGRESS, ino_a, true);
  ASSERT_NE(q_out, nullptr) << "no TCP query event on the client's egress";
  ASSERT_NE(q_in, nullptr) << "no TCP query event on the server's ingress";
  ASSERT_NE(r_out, nullptr) << "no TCP response event on the server's egress";
  ASSERT_NE(r_in, nullptr) << "no TCP response event on the client's ingress";
  for (const ng_dns_event* ev : {q_out, q_in, r_out, r_in}) {
    EXPECT_TRUE(ev->flags & NG_F_TCP);
    EXPECT_FALSE(ev->flags & NG_F_PARSE_ERR);
    EXPECT_EQ(ev->dns_id, q_out->dns_id);
    EXPECT_EQ(ev->qtype, 1);
  }
  EXPECT_EQ(q_out->dport, 53);
  EXPECT_EQ(r_in->sport, 53);
  EXPECT_EQ(formatAddress(*q_out, true), "10.77.0.1");
  EXPECT_EQ(r_in->rcode, 0);
  // Only the two segments carrying a message per direction: SYN, ACK, FIN and bare length
  // prefixes are skipped.
  EXPECT_EQ(evs.size(), 4u);
}

TEST_F(DnsAttachTest, SeesQueryAndResponseOverRealTcp) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b}).ok());
  ASSERT_EQ(sh("command -v python3"), 0) << "python3 missing";
  TcpDnsServer server(*net_, "whole");
  ASSERT_TRUE(server.ready) << "the TCP DNS server did not start";

  const std::string dig = capture("ip netns exec " + net_->a +
                                  " dig +tcp +tries=1 +time=3 @10.77.0.2 tcp.nodegate.test");
  ASSERT_NE(dig.find("status: NOERROR"), std::string::npos) << dig;
  auto evs = collect("tcp.nodegate.test", 4);
  expectTcpExchange(evs, ino_a_, ino_b_);
  EXPECT_EQ(tracer_->stats().events_lost, 0u);
}

// Real sockets writing the 2-byte length prefix and the message as separate segments, both ways.
TEST_F(DnsAttachTest, TcpLengthPrefixInItsOwnSegment) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b}).ok());
  ASSERT_EQ(sh("command -v python3"), 0) << "python3 missing";
  TcpDnsServer server(*net_, "split");
  ASSERT_TRUE(server.ready) << "the TCP DNS server did not start";
  const auto before = tracer_->stats();

  const std::string out = capture("ip netns exec " + net_->a + " timeout 10 python3 " +
                                  server.client() + " split.nodegate.test");
  ASSERT_NE(out.find("rcode 0 id 16962"), std::string::npos) << out;
  auto evs = collect("split.nodegate.test", 4);
  expectTcpExchange(evs, ino_a_, ino_b_);
  // The bare prefixes: query out of a and into b, response out of b and into a.
  EXPECT_EQ(tracer_->stats().tcp_prefix_segments - before.tcp_prefix_segments, 4u);
  EXPECT_EQ(tracer_->stats().events_lost, 0u);
}

// A TCP segment dropped with its payload in page fragments (what a TCP socket sends) cannot be read
// by kfree_skb: it is counted, not silently lost and not misreported.
TEST_F(DnsAttachTest, DroppedPagedTcpSegmentIsCounted) {
  ASSERT_TRUE(tracer_->dropsAvailable());
  ASSERT_EQ(sh("command -v python3"), 0) << "python3 missing";
  TcpDnsServer server(*net_, "whole");
  ASSERT_TRUE(server.ready) << "the TCP DNS server did not start";
  // Handshake passes (no payload), then every segment with a payload for port 53 is dropped.
  const std::string nft = "ip netns exec " + net_->b + " nft ";
  ASSERT_EQ(sh(nft + "add table inet ngbpf"), 0);
  ASSERT_EQ(sh(nft + "'add chain inet ngbpf input { type filter hook input priority 0; }'"), 0);
  // (SYN: 60 bytes of IP with options, pure ACKs 52; a query segment is longer.)
  ASSERT_EQ(sh(nft + "add rule inet ngbpf input tcp dport 53 ip length gt 64 drop"), 0);
  attachClient();
  const auto before = tracer_->stats();
  sh("ip netns exec " + net_->a + " dig +tcp +tries=1 +time=1 @10.77.0.2 paged.nodegate.test");
  uint64_t paged = 0;
  for (int i = 0; i < 100 && paged == 0; i++) {
    (void)tracer_->consume([](const ng_dns_event&) {});
    paged = tracer_->stats().paged_skipped - before.paged_skipped;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(paged, 1u) << "the dropped query segment was not counted as paged";
}

TEST_F(DnsAttachTest, NetfilterDropIsReportedByName) {
  ASSERT_TRUE(tracer_->dropsAvailable());
  const std::string nft = "ip netns exec " + net_->b + " nft ";
  ASSERT_EQ(sh(nft + "add table inet ngbpf"), 0);
  ASSERT_EQ(sh(nft + "'add chain inet ngbpf input { type filter hook input priority 0; }'"), 0);
  ASSERT_EQ(sh(nft + "add rule inet ngbpf input udp dport 53 drop"), 0);
  attachClient();
  net_->query("dropped.nodegate.test");
  auto evs = collect("dropped.nodegate.test", 1);
  const ng_dns_event* drop = find(evs, NG_EV_DROP, NG_DIR_NONE, ino_b_);
  ASSERT_NE(drop, nullptr);
  EXPECT_EQ(tracer_->dropReasonName(drop->drop_reason), "NETFILTER_DROP");
  EXPECT_EQ(drop->hop, 0);  // device not attached: no hop configured
  EXPECT_FALSE(drop->flags & NG_F_HOP_SET);
}

TEST_F(DnsAttachTest, RawTracepointFallbackReportsDrops) {
  // The program the loader falls back to when the kernel refuses tp_btf: same parser, every skb
  // read through bpf_probe_read_kernel().
  tracer_.reset();
  auto t = DnsTracer::open({.ring_bytes = 1u << 20, .drops_via_raw_tp = true});
  ASSERT_TRUE(t.ok()) << t.error().message;
  tracer_ = std::move(t.value());
  ASSERT_TRUE(tracer_->dropsAvailable());
  attachClient();
  net_->query("rawtp.nodegate.test");
  auto evs = collect("rawtp.nodegate.test", 1);
  const ng_dns_event* drop = find(evs, NG_EV_DROP, NG_DIR_NONE, ino_b_);
  ASSERT_NE(drop, nullptr);
  EXPECT_EQ(tracer_->dropReasonName(drop->drop_reason), "NO_SOCKET");
  EXPECT_EQ(drop->ifindex, static_cast<uint32_t>(net_->ifindex_b));
  EXPECT_EQ(drop->dport, 53);
  EXPECT_EQ(formatAddress(*drop, true), "10.77.0.1");
}

// A UDP DNS responder for one netns: answers every query NOERROR with its question echoed.
constexpr const char* kUdpDnsServer = R"(import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 53))
open(sys.argv[2], "w").close()
while True:
    q, peer = s.recvfrom(4096)
    i = 12
    while q[i]:
        i += q[i] + 1
    s.sendto(q[:2] + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00" + q[12:i + 5], peer)
)";

// One program serves both hooks and reads the direction from the kernel (tc_at_ingress). The
// KubeVirt shapes: a frame bridged in through a port (tap0), delivered up to the bridge device
// (k6t-eth0), routed and forwarded out another device (eth0); the reply back the same way. Here
// b becomes that router: a's veth end is a port of a bridge holding 10.77.0.2, and a third
// namespace c (10.77.1.2, a DNS responder) sits behind a second veth pair.
TEST_F(DnsAttachTest, DirectionOfBridgedAndForwardedPackets) {
  const std::string id = std::to_string(getpid());
  const std::string c = "ngbpf" + id + "c", br = "ngbr" + id, x = "ngb" + id + "x",
                    y = "ngb" + id + "y", dir = "/tmp/ngbpf-fwd-" + id;
  struct Cleanup {
    std::string ns, dir;
    ~Cleanup() {
      sh("ip netns pids " + ns + " | xargs -r kill");
      sh("ip netns del " + ns);
      sh("rm -rf " + dir);
    }
  } cleanup{c, dir};
  const std::string b = "ip -n " + net_->b + " ";
  ASSERT_EQ(sh("mkdir -p " + dir), 0);
  ASSERT_EQ(sh("ip netns add " + c), 0);
  ASSERT_EQ(sh(b + "link add " + br + " type bridge"), 0);
  ASSERT_EQ(sh(b + "addr del 10.77.0.2/30 dev " + net_->dev_b), 0);
  ASSERT_EQ(sh(b + "link set " + net_->dev_b + " master " + br), 0);
  ASSERT_EQ(sh(b + "addr add 10.77.0.2/30 dev " + br), 0);
  ASSERT_EQ(sh(b + "link set " + br + " up"), 0);
  ASSERT_EQ(
      sh("ip link add " + x + " netns " + net_->b + " type veth peer name " + y + " netns " + c),
      0);
  ASSERT_EQ(sh(b + "addr add 10.77.1.1/30 dev " + x), 0);
  ASSERT_EQ(sh(b + "link set " + x + " up"), 0);
  ASSERT_EQ(sh("ip -n " + c + " addr add 10.77.1.2/30 dev " + y), 0);
  ASSERT_EQ(sh("ip -n " + c + " link set " + y + " up"), 0);
  ASSERT_EQ(sh("ip -n " + c + " link set lo up"), 0);
  ASSERT_EQ(sh("ip netns exec " + net_->b + " sysctl -qw net.ipv4.ip_forward=1"), 0);
  ASSERT_EQ(sh("ip -n " + net_->a + " route add 10.77.1.0/30 via 10.77.0.2"), 0);
  ASSERT_EQ(sh("ip -n " + c + " route add 10.77.0.0/30 via 10.77.1.1"), 0);
  {
    FILE* f = std::fopen((dir + "/udp.py").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(kUdpDnsServer, f);
    std::fclose(f);
  }
  ASSERT_EQ(sh("ip netns exec " + c + " timeout 20 python3 " + dir + "/udp.py 10.77.1.2 " + dir +
               "/ready &"),
            0);
  for (int i = 0; i < 100 && sh("test -e " + dir + "/ready") != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(sh("test -e " + dir + "/ready"), 0) << "the responder in " << c << " did not start";

  auto ifindex = [&](const std::string& dev) {
    return std::atoi(
        capture("ip netns exec " + net_->b + " cat /sys/class/net/" + dev + "/ifindex").c_str());
  };
  const int port = net_->ifindex_b, bridge = ifindex(br), out = ifindex(x);
  ASSERT_GT(bridge, 0);
  ASSERT_GT(out, 0);
  for (int dev : {port, bridge, out})
    ASSERT_TRUE(tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = dev}).ok());

  sh("ip netns exec " + net_->a + " dig +tries=1 +time=2 @10.77.1.2 fwd.nodegate.test");
  auto evs = collect("fwd.nodegate.test", 6);
  auto seen = [&](int dev, bool response) -> const ng_dns_event* {
    for (const auto& ev : evs)
      if (ev.kind == NG_EV_PACKET && ev.netns_ino == ino_b_ &&
          ev.ifindex == static_cast<uint32_t>(dev) && ((ev.flags & NG_F_QR) != 0) == response)
        return &ev;
    return nullptr;
  };
  struct Want {
    const char* what;
    int dev;
    bool response;
    uint16_t dir;
  } const wants[] = {
      {"query bridged in through the port", port, false, NG_DIR_INGRESS},
      {"query delivered up to the bridge", bridge, false, NG_DIR_INGRESS},
      {"query forwarded out", out, false, NG_DIR_EGRESS},
      {"response coming back in", out, true, NG_DIR_INGRESS},
      {"response routed to the bridge", bridge, true, NG_DIR_EGRESS},
      {"response bridged out through the port", port, true, NG_DIR_EGRESS},
  };
  for (const auto& w : wants) {
    const ng_dns_event* ev = seen(w.dev, w.response);
    ASSERT_NE(ev, nullptr) << "no event: " << w.what;
    EXPECT_EQ(ev->dir, w.dir) << w.what;
    EXPECT_EQ(ev->qtype, 1) << w.what;
  }
}

// The attachment id is the filters' classid ("flowid :N" in tc's listing): the same on both hooks
// of a device, another on the next device.
TEST_F(DnsAttachTest, EachAttachmentsFiltersCarryItsId) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b}).ok());
  auto flowid = [&](const std::string& ns, const std::string& dev, const char* dir) {
    const std::string out = capture("tc -n " + ns + " filter show dev " + dev + " " + dir);
    const auto at = out.find("flowid ");
    return at == std::string::npos ? std::string("(none)")
                                   : out.substr(at + 7, out.find(' ', at + 7) - at - 7);
  };
  const std::string a_in = flowid(net_->a, net_->dev_a, "ingress");
  EXPECT_NE(a_in, "(none)");
  EXPECT_EQ(flowid(net_->a, net_->dev_a, "egress"), a_in);
  EXPECT_NE(flowid(net_->b, net_->dev_b, "ingress"), a_in);
}

// An event still in the ring when its filter is detached names no device: its attachment id is
// not handed to the next attachment, so it cannot be taken for that one's.
TEST_F(DnsAttachTest, EventOfADetachedFilterNamesNoDevice) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a, .hop = 3})
          .ok());
  net_->query("late.nodegate.test");
  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b, .hop = 4})
          .ok());
  int late = 0;
  auto n = tracer_->consume([&](const ng_dns_event& ev) {
    if (ev.kind != NG_EV_PACKET || std::string(ev.qname) != "late.nodegate.test") return;
    late++;
    EXPECT_EQ(ev.netns_ino, 0u);
    EXPECT_EQ(ev.netns_cookie, 0u);
    EXPECT_FALSE(ev.flags & NG_F_HOP_SET);
  });
  ASSERT_TRUE(n.ok());
  EXPECT_GE(late, 1) << "the query's egress event on a was not in the ring";
}

// The netlink request itself: a device without clsact has no hook to add to, and the error says
// what was tried and what the kernel answered.
TEST_F(DnsAttachTest, FilterWithoutClsactIsAClearError) {
  Result<TcFilter> r = Error{0, "not run"};
  std::thread([&] {
    const int fd = ::open(net_->path(net_->a).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return;
    ::close(fd);
    r = addClsBpfFilter(net_->ifindex_a, true, tracer_->tcProgFd(), 7, "ng_tc");
  }).join();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().code, 0);
  EXPECT_EQ(
      r.error().message.rfind(
          "failed to add tc filter on ifindex " + std::to_string(net_->ifindex_a) + " ingress", 0),
      0u)
      << r.error().message;
  EXPECT_EQ(
      capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " ingress").find("ng_tc"),
      std::string::npos);
}

TEST_F(DnsAttachTest, DetachRemovesOnlyWhatWeCreated) {
  // b already has clsact (someone else's): it must survive our detach.
  ASSERT_EQ(sh("tc -n " + net_->b + " qdisc add dev " + net_->dev_b + " clsact"), 0);
  auto at_a = tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a});
  auto at_b = tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b});
  ASSERT_TRUE(at_a.ok() && at_b.ok());
  EXPECT_TRUE(at_a->created_qdisc);
  EXPECT_FALSE(at_b->created_qdisc);

  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
  ASSERT_TRUE(tracer_->detach(ino_b_, net_->ifindex_b).ok());
  EXPECT_EQ(capture("tc -n " + net_->a + " qdisc show dev " + net_->dev_a).find("clsact"),
            std::string::npos);
  EXPECT_NE(capture("tc -n " + net_->b + " qdisc show dev " + net_->dev_b).find("clsact"),
            std::string::npos);
  for (const char* dir : {"ingress", "egress"})
    EXPECT_EQ(
        capture("tc -n " + net_->b + " filter show dev " + net_->dev_b + " " + dir).find("ng_tc"),
        std::string::npos);
  EXPECT_TRUE(tracer_->attachments().empty());
  EXPECT_FALSE(tracer_->detach(ino_a_, net_->ifindex_a).ok());  // not attached any more
}

// How many of our filters a hook holds: tc shows one line per filter, with the filter's name
// ("flowid :1 ng_tc direct-action ... name ng_tc tag ...", the program's name again).
int ngFilters(const std::string& ns, const std::string& dev, const char* dir) {
  const std::string out = capture("tc -n " + ns + " filter show dev " + dev + " " + dir);
  int n = 0;
  std::size_t start = 0;
  for (std::size_t end; (end = out.find('\n', start)) != std::string::npos; start = end + 1)
    if (out.substr(start, end - start).find(" ng_tc ") != std::string::npos) n++;
  return n;
}

// Two agents on one device (a DaemonSet rolling update with surge, or a restart overlapping the
// old pod's shutdown): the one that created clsact exits first, and the other keeps its filters
// and its events. Deleting the qdisc would have taken the other agent's filters with it.
TEST_F(DnsAttachTest, FirstAgentsExitLeavesTheSecondsFilters) {
  auto second = DnsTracer::open({.ring_bytes = 1u << 20});
  ASSERT_TRUE(second.ok()) << second.error().message;
  auto at1 = tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a});
  ASSERT_TRUE(at1.ok()) << at1.error().message;
  EXPECT_TRUE(at1->created_qdisc);
  auto at2 =
      (*second)->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a, .hop = 5});
  ASSERT_TRUE(at2.ok()) << at2.error().message;
  EXPECT_FALSE(at2->created_qdisc);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 2);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 2);

  tracer_.reset();  // the first agent exits
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 1);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 1);
  EXPECT_NE(capture("tc -n " + net_->a + " qdisc show dev " + net_->dev_a).find("clsact"),
            std::string::npos);

  net_->query("second.nodegate.test");
  bool seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    auto n = (*second)->consume([&](const ng_dns_event& ev) {
      if (ev.kind == NG_EV_PACKET && ev.dir == NG_DIR_EGRESS && ev.netns_ino == ino_a_ &&
          std::string(ev.qname) == "second.nodegate.test") {
        seen = true;
        EXPECT_EQ(ev.hop, 5);
      }
    });
    ASSERT_TRUE(n.ok());
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "the second agent saw no egress event after the first one exited";

  // The second agent did not create the qdisc: it takes its own filters and leaves clsact.
  second->reset();
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 0);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 0);
}

// Someone else's filter, added after ours on the clsact qdisc we created, survives our detach, and
// so does the qdisc it needs.
TEST_F(DnsAttachTest, ForeignFilterOnOurQdiscSurvivesDetach) {
  auto at = tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a});
  ASSERT_TRUE(at.ok()) << at.error().message;
  ASSERT_TRUE(at->created_qdisc);
  ASSERT_EQ(sh("tc -n " + net_->a + " filter add dev " + net_->dev_a +
               " ingress prio 1 protocol all u32 match u32 0 0"),
            0);
  ASSERT_EQ(sh("tc -n " + net_->a + " filter add dev " + net_->dev_a +
               " egress prio 7 protocol ip u32 match ip dport 53 0xffff"),
            0);
  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 0);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 0);
  EXPECT_NE(capture("tc -n " + net_->a + " qdisc show dev " + net_->dev_a).find("clsact"),
            std::string::npos);
  EXPECT_NE(
      capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " ingress").find("u32"),
      std::string::npos);
  EXPECT_NE(capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " egress").find("u32"),
            std::string::npos);
}

// Handle and priority alone do not make a filter ours: after someone deleted the qdisc under us
// (an older nodegate did on exit), the next agent's filters on a fresh clsact get the same handle
// and priority the kernel gave ours. Our detach must leave them.
TEST_F(DnsAttachTest, DetachLeavesAnotherAgentsFilterAtOurHandleAndPriority) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  const std::string before =
      capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " ingress");
  ASSERT_EQ(sh("tc -n " + net_->a + " qdisc del dev " + net_->dev_a + " clsact"), 0);
  auto second = DnsTracer::open({.ring_bytes = 1u << 20});
  ASSERT_TRUE(second.ok()) << second.error().message;
  auto at2 = (*second)->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a});
  ASSERT_TRUE(at2.ok()) << at2.error().message;
  const std::string after =
      capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " ingress");
  // Same priority and handle as ours had: the point of the test.
  auto prefAndHandle = [](const std::string& out) {
    const auto pref = out.find("pref ");
    const auto handle = out.find("handle ");
    return pref == std::string::npos || handle == std::string::npos
               ? std::string("(none)")
               : out.substr(pref, out.find(' ', pref + 5) - pref) + " " +
                     out.substr(handle, out.find(' ', handle + 7) - handle);
  };
  ASSERT_EQ(prefAndHandle(after), prefAndHandle(before)) << before << after;

  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 1);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 1);
  second->reset();
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 0);
  EXPECT_EQ(capture("tc -n " + net_->a + " qdisc show dev " + net_->dev_a).find("clsact"),
            std::string::npos);  // the second agent created this one
}

// An agent killed with SIGKILL cannot detach: its filters stay, running its program into a ring
// nobody reads. The next agent on that device removes them (no live process holds that program)
// instead of stacking a pair more per restart.
TEST_F(DnsAttachTest, KilledAgentsFiltersAreReplacedNotStacked) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // The parent has no threads running here (the tracer is not started), so the child may use
  // libbpf and threads after fork().
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto t = DnsTracer::open({.ring_bytes = 1u << 20, .trace_drops = false});
    const bool ok =
        t.ok() &&
        (*t)->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok();
    const char c = ok ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  const bool child_ok = ::read(ready[0], &c, 1) == 1 && c == '1';
  ::close(ready[0]);
  struct Reaper {
    pid_t pid;
    void kill() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = 0;
    }
    ~Reaper() { kill(); }
  } first{child};
  ASSERT_TRUE(child_ok) << "the first agent failed to attach";

  // While that agent lives, its filters are not stale: ours go next to them.
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 2);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 2);
  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());

  first.kill();
  ASSERT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 1) << "the killed agent's filter is gone";
  ASSERT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 1);

  // The agent started after the kill (tracer_ read who holds which program a moment ago, and
  // reads it again only kHeldProgramsTtl later).
  auto next = DnsTracer::open({.ring_bytes = 1u << 20, .trace_drops = false});
  ASSERT_TRUE(next.ok()) << next.error().message;
  auto at = (*next)->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a});
  ASSERT_TRUE(at.ok()) << at.error().message;
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  ASSERT_EQ(bpf_obj_get_info_by_fd((*next)->tcProgFd(), &info, &len), 0);
  for (const char* dir : {"ingress", "egress"}) {
    EXPECT_EQ(ngFilters(net_->a, net_->dev_a, dir), 1) << dir;
    EXPECT_NE(capture("tc -n " + net_->a + " filter show dev " + net_->dev_a + " " + dir)
                  .find(" id " + std::to_string(info.id) + " "),
              std::string::npos)
        << dir << ": the filter left is not ours";
  }
  ASSERT_TRUE((*next)->detach(ino_a_, net_->ifindex_a).ok());
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "ingress"), 0);
  EXPECT_EQ(ngFilters(net_->a, net_->dev_a, "egress"), 0);
}

// The listing detach relies on: every filter of a hook, ours told apart by name and program id.
TEST_F(DnsAttachTest, ListFiltersNamesOursAndOthers) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_EQ(sh("tc -n " + net_->a + " filter add dev " + net_->dev_a +
               " ingress prio 1 protocol all u32 match u32 0 0"),
            0);
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  ASSERT_EQ(bpf_obj_get_info_by_fd(tracer_->tcProgFd(), &info, &len), 0);
  Result<std::vector<TcFilterEntry>> in = Error{0, "not run"}, out = Error{0, "not run"},
                                     none = Error{0, "not run"};
  std::thread([&] {
    const int fd = ::open(net_->path(net_->a).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return;
    ::close(fd);
    in = listFilters(net_->ifindex_a, true);
    out = listFilters(net_->ifindex_a, false);
    none = listFilters(9999, true);  // no such device: nothing listed, not an error
  }).join();
  ASSERT_TRUE(in.ok()) << in.error().message;
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->empty());
  auto count = [&](const std::vector<TcFilterEntry>& list, const std::string& kind, bool ours) {
    int n = 0;
    for (const auto& e : list)
      if (e.handle != 0 && e.kind == kind &&
          (!ours || (e.bpf_name == "ng_tc" && e.prog_id == info.id && e.priority != 0)))
        n++;
    return n;
  };
  EXPECT_EQ(count(*in, "bpf", true), 1);
  EXPECT_GE(count(*in, "u32", false), 1);  // u32 lists its hash table and its key
  EXPECT_EQ(count(*out, "bpf", true), 1);
  EXPECT_EQ(count(*out, "u32", false), 0);
}

TEST_F(DnsAttachTest, TracerExitLeavesNothingBehind) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_TRUE(tracer_->start([](const ng_dns_event&) {}).ok());
  tracer_.reset();
  EXPECT_EQ(capture("tc -n " + net_->a + " qdisc show dev " + net_->dev_a).find("clsact"),
            std::string::npos);
}

TEST_F(DnsAttachTest, VanishedNamespaceDetachesCleanly) {
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  net_->remove();
  EXPECT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
}

TEST_F(DnsAttachTest, BadTargetsAreClearErrors) {
  auto no_dev = tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = 9999});
  ASSERT_FALSE(no_dev.ok());
  EXPECT_EQ(no_dev.error().message.rfind("failed to ", 0), 0u) << no_dev.error().message;
  auto no_ns = tracer_->attach({.netns_path = "/run/netns/ngbpf-does-not-exist", .ifindex = 1});
  ASSERT_FALSE(no_ns.ok());
  EXPECT_NE(no_ns.error().message.find("ngbpf-does-not-exist"), std::string::npos);
  EXPECT_FALSE(tracer_->attach({.ifindex = 0}).ok());
  EXPECT_TRUE(tracer_->attachments().empty());
}

TEST_F(DnsAttachTest, PollThreadDeliversEvents) {
  attachClient();
  std::atomic<int> seen{0};
  ASSERT_TRUE(startCounting("poll.nodegate.test", seen));
  EXPECT_FALSE(tracer_->consume([](const ng_dns_event&) {}).ok());  // one consumer at a time
  net_->query("poll.nodegate.test");
  for (int i = 0; i < 100 && seen.load() == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  tracer_->stop();
  EXPECT_GE(seen.load(), 1);
  EXPECT_GE(tracer_->stats().events, 1u);
}

// Context switches of this process's thread named `comm` so far (-1: no such thread).
long threadSwitches(const std::string& comm) {
  for (int attempt = 0; attempt < 50; attempt++) {
    if (auto* dir = ::opendir("/proc/self/task")) {
      long found = -1;
      while (const dirent* t = ::readdir(dir)) {
        if (t->d_name[0] == '.') continue;
        const std::string task = std::string("/proc/self/task/") + t->d_name;
        std::string name;
        std::getline(std::ifstream(task + "/comm"), name);
        if (name != comm) continue;
        found = 0;
        std::ifstream status(task + "/status");
        for (std::string line; std::getline(status, line);)
          for (const char* key : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"})
            if (line.rfind(key, 0) == 0)
              found += std::strtol(line.c_str() + std::strlen(key), nullptr, 10);
      }
      ::closedir(dir);
      if (found >= 0) return found;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not named yet
  }
  return -1;
}

// With a device attached and no DNS, the poll thread drains the ring every idle_poll_interval, not
// every poll_interval: at 10 ms an idle agent woke 100 times a second (docs/benchmarks/density.md).
// A query after the quiet spell is still delivered, within a second.
TEST_F(DnsAttachTest, IdlePollThreadWakesRarelyAndStillDelivers) {
  attachClient();
  std::atomic<int> seen{0};
  ASSERT_TRUE(startCounting("idle.nodegate.test", seen));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the quiet second
  const long before = threadSwitches("ng-dns-poll");
  ASSERT_GE(before, 0) << "no thread named ng-dns-poll";
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long idle = threadSwitches("ng-dns-poll") - before;
  // 2 s at 200 ms is ~10 wakeups; at the 10 ms busy interval it would be ~200.
  EXPECT_LE(idle, 40) << "the idle poll thread switched " << idle << " times in 2 s";
  const auto sent = std::chrono::steady_clock::now();
  std::thread dig([this] { net_->query("idle.nodegate.test"); });  // waits for an answer
  while (seen.load() == 0 && std::chrono::steady_clock::now() - sent < std::chrono::seconds(3))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto waited = std::chrono::steady_clock::now() - sent;
  dig.join();
  tracer_->stop();
  EXPECT_GE(seen.load(), 1);
  // dig's query is on the wire within a few ms of the call; the idle interval is 200 ms.
  EXPECT_LT(waited, std::chrono::milliseconds(1000));
}

// The program wakes the poll thread when the ring is half full, so a burst is drained long before
// the poll interval; below half, events wait for the next poll. Ring of one page, poll every 5 s:
// 4 queries (8 events of 128 B, a quarter of the ring) are not delivered at once, 12 more pass
// half and are.
TEST_F(DnsAttachTest, HalfFullRingWakesThePollThread) {
  tracer_.reset();
  auto t = DnsTracer::open({.ring_bytes = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)),
                            .poll_interval = std::chrono::seconds(5),
                            .trace_drops = false});
  ASSERT_TRUE(t.ok()) << t.error().message;
  tracer_ = std::move(t.value());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->a), .ifindex = net_->ifindex_a}).ok());
  ASSERT_TRUE(
      tracer_->attach({.netns_path = net_->path(net_->b), .ifindex = net_->ifindex_b}).ok());
  // The poll thread inherits this mask. Unblocked there, the SIGCHLD of each sh() below (blocked
  // in this thread by system()) would interrupt its epoll_wait, and the EINTR drains the ring.
  sigset_t chld, old_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, &old_mask);
  std::atomic<int> seen{0};
  const bool started = tracer_->start([&](const ng_dns_event&) { seen++; }).ok();
  const auto t0 = std::chrono::steady_clock::now();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ASSERT_TRUE(started);
  // Concurrent digs: nothing answers, so each one waits its second out. The queries are dropped
  // without a word: a closed port would send ICMP port unreachables, which are events as well.
  ASSERT_EQ(sh("ip netns exec " + net_->b +
               " nft 'add table inet ng; add chain inet ng in { type filter hook input priority 0; "
               "}; add rule inet ng in udp dport 53 drop'"),
            0);
  auto burst = [&](const std::string& prefix, int n) {
    sh("ip netns exec " + net_->a + " sh -c 'for i in $(seq " + std::to_string(n) +
       "); do dig +tries=1 +time=1 @10.77.0.2 " + prefix +
       "$i.nodegate.test >/dev/null & done; wait'");
  };
  burst("quarter", 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(seen.load(), 0) << "events delivered before the ring was half full";
  ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4))
      << "too slow to tell a wakeup from the 5 s poll";
  burst("half", 12);
  for (int i = 0; i < 100 && seen.load() == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int delivered = seen.load();
  const auto waited = std::chrono::steady_clock::now() - t0;
  tracer_->stop();
  EXPECT_GE(delivered, 16) << "no forced wakeup: events wait for the poll";
  EXPECT_LT(waited, std::chrono::milliseconds(4500)) << "too slow to tell a wakeup from the poll";
  EXPECT_EQ(tracer_->stats().events_lost, 0u);
}

}  // namespace
}  // namespace nodegate::dns::test

namespace nodegate::dns::test {
namespace {

// Bytes of BPF maps mmapped into this process: the skeleton's global-data maps (a page or so)
// and, while mapped, the ring (its data pages twice over).
std::size_t bpfMappedBytes() {
  std::size_t total = 0;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::strstr(line, "anon_inode:bpf-map") != nullptr &&
        std::sscanf(line, "%lx-%lx", &lo, &hi) == 2)
      total += hi - lo;
  }
  std::fclose(f);
  return total;
}

template <typename Pred>
bool waitFor(Pred pred) {
  for (int i = 0; i < 150 && !pred(); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return pred();
}

// A node with no VM: nothing attached, so no drop is followed, the ring is not mapped and the
// poll thread sleeps. The first attach turns all of it on, the last detach off again.
TEST_F(DnsAttachTest, TracesOnlyWhileADeviceIsAttached) {
  constexpr std::size_t kRing = 1u << 20;  // as opened by the fixture
  std::atomic<int> drops{0}, packets{0};
  const uint64_t ino_a = ino_a_, ino_b = ino_b_;
  ASSERT_TRUE(tracer_
                  ->start([&](const ng_dns_event& ev) {
                    if (ev.kind == NG_EV_DROP && ev.netns_ino == ino_b) drops++;
                    if (ev.kind == NG_EV_PACKET && ev.netns_ino == ino_a) packets++;
                  })
                  .ok());
  // Nothing answers on b: every query ends in a NO_SOCKET drop there.
  net_->query("idle.nodegate.test");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(drops.load(), 0) << "a drop was reported with nothing attached";
  EXPECT_LT(bpfMappedBytes(), kRing) << "the ring is mapped with nothing attached";

  attachClient();
  EXPECT_TRUE(waitFor([&] { return bpfMappedBytes() >= 2 * kRing; })) << bpfMappedBytes();
  net_->query("busy.nodegate.test");
  EXPECT_TRUE(waitFor([&] { return drops.load() >= 1 && packets.load() >= 1; }))
      << drops.load() << " drops, " << packets.load() << " packets";

  ASSERT_TRUE(tracer_->detach(ino_a_, net_->ifindex_a).ok());
  EXPECT_TRUE(waitFor([&] { return bpfMappedBytes() < kRing; })) << bpfMappedBytes();
  const int after = drops.load();
  net_->query("idle-again.nodegate.test");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(drops.load(), after) << "a drop was reported after the last detach";
  tracer_->stop();
  EXPECT_EQ(tracer_->stats().events_lost, 0u);
}

}  // namespace
}  // namespace nodegate::dns::test
