// Benchmark driver for tools/bench/bpf-cost.sh (not a test). Two modes:
//   bpf_dns_bench test-run              per-packet cost of the classifier on crafted frames
//                                       (BPF_PROG_TEST_RUN, ~1e6 repetitions each, drained every
//                                       quarter ring)
//   bpf_dns_bench trace [--ring BYTES] NETNS_PATH:IFINDEX...
//                                       attach, poll like the agent does, and print one JSON
//                                       snapshot line (program run_time_ns/run_cnt, events,
//                                       losses) on every SIGUSR1 and at SIGTERM/SIGINT.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dns_tracer.h"
#include "frames.h"

using namespace nodegate::dns;

namespace {

std::atomic<bool> g_snap{false};
std::atomic<bool> g_quit{false};

struct ProgCost {
  uint64_t run_ns = 0, run_cnt = 0;
};

ProgCost cost(int fd) {
  ProgCost c;
  if (fd < 0) return c;
  bpf_prog_info info;
  std::memset(&info, 0, sizeof info);
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
    c.run_ns = info.run_time_ns;
    c.run_cnt = info.run_cnt;
  }
  return c;
}

int testRun() {
  auto t = DnsTracer::open({.trace_drops = false});
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  using test::buildFrame;
  test::DnsMsg q;
  const std::string http = "GET / HTTP/1.1\r\n\r\n";
  struct Case {
    const char* name;
    test::Bytes frame;
  } cases[] = {
      {"dns_udp4_query", buildFrame({}, q.bytes())},
      {"dns_udp6_query", buildFrame({.ipv6 = true}, q.bytes())},
      {"dns_tcp4_query", buildFrame({.tcp = true}, q.bytes())},
      {"non_dns_udp4", buildFrame({.dport = 9999}, test::Bytes(http.begin(), http.end()))},
      {"non_dns_tcp4",
       buildFrame({.tcp = true, .dport = 443}, test::Bytes(http.begin(), http.end()))},
  };
  int fd = (*t)->tcProgFd();
  std::printf("{");
  bool first = true;
  for (auto& c : cases) {
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = c.frame.data(),
                .data_size_in = static_cast<uint32_t>(c.frame.size()), .repeat = 1000000);
    // Drain as we go so the ring never fills and every DNS run pays for a real reservation.
    // Batches of a quarter ring stay below the half-full mark where the program forces a wakeup
    // (an IPI per event from then on, which would be measured instead of the program). Counted
    // in the largest record (+ the ring's 8-byte header), whatever the frame's question needs.
    const uint32_t batch = static_cast<uint32_t>(TracerOptions{}.ring_bytes / 4 /
                                                 (NG_DNS_REC_HEAD + NG_DNS_REC_Q3 + 8));
    const int rounds = static_cast<int>(1000000 / batch);
    uint64_t total = 0;
    for (int r = 0; r < rounds; r++) {
      o.repeat = batch;
      if (bpf_prog_test_run_opts(fd, &o) != 0) return 1;
      total += o.duration;
      (void)(*t)->consume([](const ng_dns_event&) {});
    }
    std::printf("%s\"%s\":%.1f", first ? "" : ",", c.name, static_cast<double>(total) / rounds);
    first = false;
  }
  std::printf(",\"events_lost\":%llu}\n",
              static_cast<unsigned long long>((*t)->stats().events_lost));
  return 0;
}

int trace(int argc, char** argv) {
  TracerOptions opts;
  std::vector<AttachTarget> targets;
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--ring" && i + 1 < argc) {
      opts.ring_bytes = std::strtoull(argv[++i], nullptr, 0);
      continue;
    }
    auto colon = a.rfind(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "bad target %s (want NETNS_PATH:IFINDEX)\n", a.c_str());
      return 2;
    }
    targets.push_back({.netns_path = a.substr(0, colon),
                       .ifindex = std::atoi(a.c_str() + colon + 1),
                       .hop = static_cast<uint8_t>(targets.size() + 1)});
  }
  auto t = DnsTracer::open(opts);
  if (!t) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  DnsTracer& tr = **t;
  for (const auto& target : targets) {
    if (auto r = tr.attach(target); !r) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      return 1;
    }
  }
  std::atomic<uint64_t> dns_events{0};
  if (auto r = tr.start([&](const ng_dns_event&) { dns_events++; }); !r) return 1;
  std::signal(SIGUSR1, [](int) { g_snap = true; });
  std::signal(SIGTERM, [](int) { g_quit = true; });
  std::signal(SIGINT, [](int) { g_quit = true; });
  std::printf("{\"ready\":true}\n");
  std::fflush(stdout);
  auto snapshot = [&] {
    // One program serves both hooks now: its totals are reported as "ingress" and egress stays
    // 0, so bpf-cost.sh sums the same way for this and for older two-program builds.
    auto in = cost(tr.tcProgFd()), eg = ProgCost{}, dr = cost(tr.dropProgFd());
    auto st = tr.stats();
    std::printf(
        "{\"tc_ingress_ns\":%llu,\"tc_ingress_cnt\":%llu,\"tc_egress_ns\":%llu,\"tc_egress_cnt\":%"
        "llu,"
        "\"kfree_ns\":%llu,\"kfree_cnt\":%llu,\"events\":%llu,\"lost\":%llu}\n",
        (unsigned long long)in.run_ns, (unsigned long long)in.run_cnt,
        (unsigned long long)eg.run_ns, (unsigned long long)eg.run_cnt,
        (unsigned long long)dr.run_ns, (unsigned long long)dr.run_cnt,
        (unsigned long long)dns_events.load(), (unsigned long long)st.events_lost);
    std::fflush(stdout);
  };
  while (!g_quit) {
    if (g_snap.exchange(false)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the poller drain
      snapshot();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  snapshot();
  return 0;  // the destructor detaches everything
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "test-run") return testRun();
  if (argc >= 2 && std::string(argv[1]) == "trace") return trace(argc, argv);
  std::fprintf(stderr, "usage: %s test-run | trace [--ring BYTES] NETNS_PATH:IFINDEX...\n",
               argv[0]);
  return 2;
}
