// The agent's user-space cost per tracer event, in-process (issue 20, docs/benchmarks/density.md
// "Agent CPU per event"): ring records as the BPF side writes them (bpf/dns_event.h) through
// decodeRecord() (bpf/dns_wire.h), observationOf() (agent/dns/observation.h), the owner lookup,
// the correlation engine (observe, expire every 100 ms of event time) and the accounting (metrics
// per VMI, the window), as DnsService's poll thread and tick() run them.
//
// The input is the density harness's node: VMIS guests, each query seen at the 6 hops of the
// masquerade path both ways (12 events), addresses as each hop sees them (guest 10.0.2.2 and the
// ClusterIP inside the launcher, the pod address after masquerade, the CoreDNS endpoint after the
// service DNAT), the launcher hops and the host veth owned by the VMI, the server side by none.
// Names, ids, ports and qtypes vary per query; 70 % of the answers carry records, 20 % are
// NXDOMAIN (search-list expansions), 10 % NODATA (AAAA). QUERIES_IN_FLIGHT queries interleave.
//
// Not covered: the tracer's own table lookups before delivery (DnsTracer::Impl::onSample: the
// attachment id and hop maps under a mutex) and libbpf's ring walk; Attachments::owner() is
// replaced by the same lookup (a map by netns inode and ifindex, the owner copied out) because
// Attachments needs a loaded tracer.
//
// Usage: dns_userspace_cost [QUERIES] [WARMUP_QUERIES]
// Prints events, queries and, per verdict, the traces accounted, and the heap the pipeline holds
// (glibc's mallinfo2: allocated, not what the process maps; the bench's own records excluded) at
// the end and at its largest just before a tick, where a tick's finished queries wait for the
// accounting; with 60 000 queries or more every VMI's window is full (512 queries each). Exits 1
// when the traces are not what the input asked for (every query correlated into one trace with
// its expected verdict). Under
// `valgrind --tool=callgrind --collect-atstart=no` only the measured loop is counted
// (CALLGRIND_START/STOP_INSTRUMENTATION): instructions per query = Ir / QUERIES.
#include <malloc.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/registry.h>

#include "dns/accounting.h"
#include "dns/correlator.h"
#include "dns/observation.h"
#include "dns_event.h"
#include "dns_wire.h"

namespace {

using namespace nodegate::dns;

constexpr int kVmis = 100;
constexpr int kInFlight = 8;                    // queries interleaved
constexpr std::uint64_t kEventGapNs = 3'333;    // 300k events/s
constexpr std::uint64_t kTickNs = 100'000'000;  // DnsService's tick: expire + account
constexpr std::uint8_t kA = 1, kAAAA = 28;

struct Record {
  std::vector<std::uint8_t> bytes;  // as on the ring: the fixed head, then the raw question
  std::uint32_t netns_ino = 0;      // what the tracer's tables stamp before delivery
  std::uint8_t hop = 0;
};

void putAddr(std::uint8_t* dst, std::uint32_t a) {
  dst[0] = static_cast<std::uint8_t>(a >> 24);
  dst[1] = static_cast<std::uint8_t>(a >> 16);
  dst[2] = static_cast<std::uint8_t>(a >> 8);
  dst[3] = static_cast<std::uint8_t>(a);
}

constexpr std::uint32_t ip(unsigned a, unsigned b, unsigned c, unsigned d) {
  return (a << 24) | (b << 16) | (c << 8) | d;
}

// Wire-format question: labels, root, qtype, qclass IN.
std::vector<std::uint8_t> wireQuestion(const std::string& name, std::uint16_t qtype) {
  std::vector<std::uint8_t> q;
  std::size_t start = 0;
  while (start <= name.size()) {
    auto dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<std::uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + static_cast<long>(start),
             name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  q.push_back(0);
  q.push_back(static_cast<std::uint8_t>(qtype >> 8));
  q.push_back(static_cast<std::uint8_t>(qtype));
  q.push_back(0);
  q.push_back(1);
  return q;
}

struct Query {
  int vmi = 0;
  std::string name;
  std::uint16_t qtype = kA, id = 0, sport = 0;
  std::uint8_t rcode = 0;
  bool no_answers = false;
  Verdict expected = Verdict::Answered;
};

// The ring record of one sighting. Record sizes as the BPF side picks them: the smallest of the
// three that holds the captured question.
Record record(const Query& q, std::uint64_t ts, Hop hop, bool egress, bool response,
              std::uint32_t saddr, std::uint32_t daddr, std::uint16_t sport, std::uint16_t dport,
              std::uint32_t netns_ino, std::uint32_t ifindex, std::uint16_t attachment) {
  const auto question = wireQuestion(q.name, q.qtype);
  const std::size_t answers = response && !q.no_answers && q.rcode == 0 ? 16 : 0;
  const std::size_t qrest = question.size() + answers;
  const std::size_t captured = std::min<std::size_t>(qrest, NG_DNS_QNAME_MAX);
  std::size_t room = NG_DNS_REC_Q1;
  if (captured > NG_DNS_REC_Q1) room = NG_DNS_REC_Q2;
  if (captured > NG_DNS_REC_Q2) room = NG_DNS_REC_Q3;
  Record r;
  r.bytes.assign(NG_DNS_REC_HEAD + room, 0xA5);  // stale bytes where the program writes none
  ng_dns_event head{};
  head.ts_ns = ts;
  head.netns_cookie = attachment;  // tc events carry the attachment id here
  head.netns_ino = 0;
  head.ifindex = ifindex;
  head.kind = NG_EV_PACKET;
  head.dir = egress ? NG_DIR_EGRESS : NG_DIR_INGRESS;
  putAddr(head.saddr, saddr);
  putAddr(head.daddr, daddr);
  head.sport = sport;
  head.dport = dport;
  head.dns_id = q.id;
  head.flags = static_cast<std::uint16_t>((response ? NG_F_QR : 0) |
                                          (response && answers == 0 ? NG_F_NOANS : 0));
  head.rcode = response ? q.rcode : 0;
  head.pkt_len = static_cast<std::uint16_t>(28 + 12 + qrest);
  head.qrest = static_cast<std::uint16_t>(qrest);
  std::memcpy(r.bytes.data(), &head, NG_DNS_REC_HEAD);
  std::memcpy(r.bytes.data() + NG_DNS_REC_HEAD, question.data(), std::min(captured, room));
  r.netns_ino = netns_ino;
  r.hop = static_cast<std::uint8_t>(hop);
  return r;
}

std::uint32_t launcherIno(int vmi) {
  return 4026540000u + static_cast<std::uint32_t>(vmi);
}
constexpr std::uint32_t kHostIno = 4026531840u, kServerIno = 4026539999u;

// The 12 events of one query, in the order the hops see them.
std::vector<Record> sightings(const Query& q, std::uint64_t t0) {
  const std::uint32_t guest = ip(10, 0, 2, 2), cluster_ip = ip(10, 96, 0, 10),
                      pod = ip(10, 244, 1, static_cast<unsigned>(q.vmi + 2)),
                      server = ip(10, 244, 0, 5);
  const std::uint32_t li = launcherIno(q.vmi);
  const auto att = [&](Hop h) {
    return static_cast<std::uint16_t>(1 + q.vmi * 4 + static_cast<int>(h) % 4);
  };
  std::uint64_t t = t0;
  std::vector<Record> out;
  auto add = [&](Hop h, std::uint32_t ino, bool egress, bool resp, std::uint32_t s, std::uint32_t d,
                 std::uint16_t sp, std::uint16_t dp) {
    // One host veth per VMI in the host netns: told apart by ifindex.
    const std::uint32_t ifindex = h == Hop::HostVeth ? 1000 + static_cast<std::uint32_t>(q.vmi)
                                                     : 2 + static_cast<std::uint32_t>(h);
    out.push_back(
        record(q, t, h, egress, resp, s, d, sp, dp, ino, ifindex,
               h >= Hop::HostOut ? static_cast<std::uint16_t>(900 + static_cast<int>(h)) : att(h)));
    t += 2'000;
  };
  // masquerade keeps the guest's port here (no clash inside one launcher)
  add(Hop::Tap, li, false, false, guest, cluster_ip, q.sport, 53);
  add(Hop::Bridge, li, false, false, guest, cluster_ip, q.sport, 53);
  add(Hop::LauncherEth0, li, true, false, pod, cluster_ip, q.sport, 53);
  add(Hop::HostVeth, kHostIno, false, false, pod, cluster_ip, q.sport, 53);
  add(Hop::HostOut, kHostIno, true, false, pod, server, q.sport, 53);
  add(Hop::Server, kServerIno, false, false, pod, server, q.sport, 53);
  t += 30'000;  // the server's time
  add(Hop::Server, kServerIno, true, true, server, pod, 53, q.sport);
  add(Hop::HostOut, kHostIno, false, true, server, pod, 53, q.sport);
  add(Hop::HostVeth, kHostIno, true, true, cluster_ip, pod, 53, q.sport);
  add(Hop::LauncherEth0, li, false, true, cluster_ip, pod, 53, q.sport);
  add(Hop::Bridge, li, true, true, cluster_ip, guest, 53, q.sport);
  add(Hop::Tap, li, true, true, cluster_ip, guest, 53, q.sport);
  return out;
}

std::string vmiName(int v) {
  return "tenant-" + std::to_string(v % 10) + "/vm-" + std::to_string(v);
}

std::vector<Query> makeQueries(std::size_t n, std::mt19937& rng) {
  std::vector<Query> qs(n);
  for (std::size_t i = 0; i < n; ++i) {
    Query& q = qs[i];
    q.vmi = static_cast<int>(rng() % kVmis);
    q.id = static_cast<std::uint16_t>(rng());
    q.sport = static_cast<std::uint16_t>(32768 + rng() % 28000);
    const unsigned kind = rng() % 10;
    const unsigned svc = rng() % 500;
    if (kind < 2) {  // a search-list expansion the cluster does not have
      q.name = "api.example-" + std::to_string(svc) + ".com.tenant-" + std::to_string(q.vmi % 10) +
               ".svc.cluster.local";
      q.rcode = 3;
      q.expected = Verdict::NotFound;
    } else if (kind < 3) {  // AAAA of an IPv4-only name
      q.name = "backend-" + std::to_string(svc) + ".tenant-" + std::to_string(q.vmi % 10) +
               ".svc.cluster.local";
      q.qtype = kAAAA;
      q.no_answers = true;
      q.expected = Verdict::NotFound;
    } else if (kind < 6) {
      q.name = "backend-" + std::to_string(svc) + ".tenant-" + std::to_string(q.vmi % 10) +
               ".svc.cluster.local";
    } else {
      q.name = "api.example-" + std::to_string(svc) + ".com";
    }
  }
  return qs;
}

// Records of all queries, kInFlight of them interleaved event by event.
std::vector<Record> makeRecords(const std::vector<Query>& qs, std::uint64_t& ts) {
  std::vector<Record> out;
  out.reserve(qs.size() * 12);
  for (std::size_t base = 0; base < qs.size(); base += kInFlight) {
    std::vector<std::vector<Record>> group;
    for (std::size_t i = base; i < std::min(qs.size(), base + kInFlight); ++i)
      group.push_back(sightings(qs[i], ts + (i - base) * kEventGapNs));
    for (std::size_t e = 0; e < 12; ++e)
      for (auto& g : group) {
        auto r = std::move(g[e]);
        // Delivery order stands for arrival time: restamp evenly.
        ng_dns_event head;
        std::memcpy(&head, r.bytes.data(), NG_DNS_REC_HEAD);
        head.ts_ns = ts;
        ts += kEventGapNs;
        std::memcpy(r.bytes.data(), &head, NG_DNS_REC_HEAD);
        out.push_back(std::move(r));
      }
  }
  return out;
}

std::size_t heapInUse() {
  return ::mallinfo2().uordblks;
}

struct Owner {
  std::string vmi;
  Hop hop;
};

struct Pipeline {
  prometheus::Registry registry;
  Accounting accounting{registry, {}};
  Correlator engine;
  std::map<std::pair<std::uint32_t, int>, Owner> owners;  // stands in for Attachments::owner()
  std::uint64_t next_tick = 0;

  Pipeline() {
    std::set<std::string> present{""};
    for (int v = 0; v < kVmis; ++v) {
      present.insert(vmiName(v));
      for (Hop h : {Hop::Tap, Hop::Bridge, Hop::LauncherEth0})
        owners[{launcherIno(v), 2 + static_cast<int>(h)}] = {vmiName(v), h};
    }
    for (int v = 0; v < kVmis; ++v) owners[{kHostIno, 1000 + v}] = {vmiName(v), Hop::HostVeth};
    owners[{kHostIno, 2 + static_cast<int>(Hop::HostOut)}] = {"", Hop::HostOut};
    owners[{kServerIno, 2 + static_cast<int>(Hop::Server)}] = {"", Hop::Server};
    accounting.present(present);
  }

  std::optional<Owner> owner(std::uint32_t ino, int ifindex) const {
    auto it = owners.find({ino, ifindex});
    if (it == owners.end()) return std::nullopt;
    return it->second;
  }

  std::size_t heap_peak_at_tick = 0;  // bytes in use just before a tick, the largest seen

  void tick(std::uint64_t now) {
    heap_peak_at_tick = std::max(heap_peak_at_tick, heapInUse());
    accounting.account(engine.expire(now), engine.stats());
  }

  // One record as DnsTracer::Impl::onSample and DnsService::Impl::onEvent take it.
  void event(const Record& r) {
    ng_dns_event ev;
    if (!decodeRecord(r.bytes.data(), r.bytes.size(), ev)) std::abort();
    ev.netns_ino = r.netns_ino;
    ev.netns_cookie = 0;
    ev.hop = r.hop;
    ev.flags |= NG_F_HOP_SET;
    if ((ev.flags & NG_F_PARSE_ERR) && !(ev.flags & NG_F_ICMP)) return;
    Observation o = observationOf(ev);
    if (auto w = owner(ev.netns_ino, static_cast<int>(ev.ifindex))) {
      o.vmi = std::move(w->vmi);
      if (o.hop == Hop::Unknown) o.hop = w->hop;
    } else if (!o.drop) {
      return;
    }
    engine.observe(o);
    if (o.ts_ns >= next_tick) {
      tick(o.ts_ns);
      next_tick = o.ts_ns + kTickNs;
    }
  }
};

__attribute__((noinline)) void run(Pipeline& p, const std::vector<Record>& recs) {
  for (const auto& r : recs) p.event(r);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const std::size_t warm = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 5000;
  std::mt19937 rng(20);
  const auto warm_q = makeQueries(warm, rng);
  const auto qs = makeQueries(n, rng);
  std::uint64_t ts = 1'000'000'000;
  auto warm_r = makeRecords(warm_q, ts);
  auto recs = makeRecords(qs, ts);
  const std::size_t heap_inputs = heapInUse();  // the records: the bench's, not the agent's
  Pipeline p;
  run(p, warm_r);
  p.tick(ts);  // the warm-up's traces accounted: the measured part starts empty

  std::map<Verdict, std::size_t> expected;
  for (const auto& q : qs) ++expected[q.expected];

  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
  const auto t0 = std::chrono::steady_clock::now();
  run(p, recs);
  p.tick(ts);
  const auto t1 = std::chrono::steady_clock::now();
  CALLGRIND_STOP_INSTRUMENTATION;

  // Every query one trace with the verdict its answer asked for: the series say so.
  for (const auto& q : warm_q) ++expected[q.expected];
  std::map<std::string, double> got;
  for (const auto& fam : p.registry.Collect()) {
    if (fam.name != "nodegate_dns_queries_total") continue;
    for (const auto& m : fam.metric)
      for (const auto& l : m.label)
        if (l.name == "result") got[l.value] += m.counter.value;
  }
  bool ok = got.size() == expected.size();
  for (const auto& [v, count] : expected) {
    const std::string name(verdictName(v));
    std::printf("%s expected %zu got %.0f\n", name.c_str(), count, got[name]);
    ok = ok && got[name] == static_cast<double>(count);
  }
  const auto& st = p.engine.stats();
  std::printf("observations %llu orphan_responses %llu in_flight %zu\n",
              static_cast<unsigned long long>(st.observations),
              static_cast<unsigned long long>(st.orphan_responses), p.engine.inFlight());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  std::printf("events %zu queries %zu wall_ns_per_event %.1f wall_ns_per_query %.1f\n", recs.size(),
              n, static_cast<double>(ns) / static_cast<double>(recs.size()),
              static_cast<double>(ns) / static_cast<double>(n));
  std::printf("agent_heap_bytes %zu agent_heap_peak_at_tick_bytes %zu\n", heapInUse() - heap_inputs,
              p.heap_peak_at_tick - heap_inputs);
  if (!ok) std::fprintf(stderr, "the traces are not the queries sent\n");
  return ok ? 0 : 1;
}
