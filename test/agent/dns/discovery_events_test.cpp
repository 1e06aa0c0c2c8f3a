// Event-driven hop discovery against the real kernel (root): the DNS service with the real BPF
// tracer, the agent's real rtnetlink source (agent/triggers/kernel_events.h) and the real proc
// connector, while launcher-like network namespaces come and go. The periodic rescan is set to an
// hour, so every attach and detach seen here was driven by an event.
//
// Discovery reads processes through a HostRoot whose proc/ lists this test's launcher processes
// only: per process a comm file saying virt-launcher, KubeVirt's cmdline, and ns/ linked to the
// real process's namespaces. The real process is named ngn-vl, not virt-launcher: other agents in
// the suite run with --dns-trace auto as root and look for virt-launcher host-wide; they would
// attach to (and on exit take the clsact qdisc off) this test's devices. The real comm path is the
// end-to-end test's (test/agent/dns/e2e_dns_path.sh).
// The ProcConnector cases check the kernel interface alone, including its silent refusal outside
// the initial pid namespace. NGN_DNS_STARTS (default 3) sets how many VM starts the latency tests
// measure (tools/bench/dns_discovery_latency.sh runs 20).
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "dns/dns_service.h"
#include "dns_tracer.h"
#include "triggers/kernel_events.h"
#include "triggers/netns_watch.h"
#include "triggers/proc_events.h"

namespace nodegate::dns {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

std::string output(const std::string& cmd) {
  std::string out;
  if (FILE* f = ::popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    ::pclose(f);
  }
  return out;
}

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Polls pred every millisecond; the elapsed milliseconds when it held, -1 on timeout.
template <class F>
double waitFor(F pred, std::chrono::milliseconds limit, Clock::time_point t0 = Clock::now()) {
  while (Clock::now() - t0 < limit) {
    if (pred()) return msSince(t0);
    std::this_thread::sleep_for(1ms);
  }
  return pred() ? msSince(t0) : -1;
}

std::string summary(std::vector<double> v) {
  if (v.empty()) return "n=0";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "n=%zu min=%.1f p50=%.1f p90=%.1f max=%.1f ms", v.size(),
                v.front(), at(0.5), at(0.9), v.back());
  return buf;
}

int starts() {
  const char* e = std::getenv("NGN_DNS_STARTS");
  int n = e ? std::atoi(e) : 3;
  return std::clamp(n, 1, 50);
}

class VmEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root for namespaces, veths, BPF and the proc connector";
    tag_ = "ngn" + std::to_string(::getpid() % 100000);
    char tmpl[] = "/tmp/ngn-dnsev.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    std::filesystem::create_directories(tmp_ + "/proc");
    // It takes its sleeping child along when stopped.
    std::ofstream(tmp_ + "/ngn-vl")
        << "#!/bin/sh\nexec 0<&- 1>/dev/null 2>&1\ntrap 'kill $!; exit 0' TERM INT\n"
           "while :; do sleep 3600 & wait $!; done\n";
    ::chmod((tmp_ + "/ngn-vl").c_str(), 0755);
    auto ev = KernelEvents::start(
        HostRoot("/"), [](std::uint32_t) {}, nullptr, productionSeams());
    ASSERT_TRUE(ev.ok()) << ev.error().message;
    events_ = std::move(ev).value();
    ASSERT_TRUE(events_->watchesLinks());
  }

  void TearDown() override {
    svc_.reset();
    for (auto& [vm, pid] : launchers_) stopLauncher(pid);
    for (const auto& ns : netns_) sh("ip netns del " + ns);
    for (const auto& l : host_links_) sh("ip link del " + l);
    events_.reset();
    if (!tmp_.empty()) std::filesystem::remove_all(tmp_);
  }

  std::unique_ptr<DnsService> startService(bool process_events) {
    auto tracer = DnsTracer::open({.ring_bytes = 1u << 20, .trace_drops = false});
    EXPECT_TRUE(tracer.ok()) << tracer.error().message;
    if (!tracer) return nullptr;
    DnsServiceConfig cfg;
    cfg.rescan = 1h;  // the periodic pass must not be what attaches anything here
    cfg.rescan_with_events = 1h;
    cfg.kernel_events = events_.get();
    cfg.process_events = process_events;
    registry_ = std::make_unique<prometheus::Registry>();
    auto svc = DnsService::start(HostRoot(tmp_), cfg, *registry_, std::move(tracer).value());
    EXPECT_TRUE(svc.ok()) << svc.error().message;
    if (!svc) return nullptr;
    auto st = svc.value()->discoveryStats();
    EXPECT_TRUE(st.link_events);
    EXPECT_EQ(st.periodic, std::chrono::milliseconds(1h));
    return std::move(svc).value();
  }

  std::string ns(int i) const { return tag_ + "l" + std::to_string(i); }
  std::string veth(int i) const { return tag_ + "v" + std::to_string(i); }
  static std::string vmi(int i) { return "ngnev/vm" + std::to_string(i); }

  // A launcher netns with k6t-eth0 and tap0 enslaved; the host veth only when asked.
  void makeNetns(int i, bool with_veth) {
    ASSERT_EQ(sh("ip netns add " + ns(i)), 0);
    netns_.push_back(ns(i));
    const std::string L = "ip -n " + ns(i) + " ";
    ASSERT_EQ(sh(L + "link add k6t-eth0 type bridge"), 0);
    ASSERT_EQ(sh(L + "tuntap add dev tap0 mode tap"), 0);
    ASSERT_EQ(sh(L + "link set tap0 master k6t-eth0"), 0);
    if (with_veth) addVeth(i);
  }
  void addVeth(int i) {
    host_links_.push_back(veth(i));
    ASSERT_EQ(sh("ip link add " + veth(i) + " type veth peer name eth0 netns " + ns(i)), 0);
  }

  // Starts the launcher of vm i in netns i. The process is visible to discovery (its entry in the
  // HostRoot's proc) before it execs, so the exec event finds it. Returns when exec is imminent.
  void startLauncher(int i) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    int nsfd = ::open(("/run/netns/" + ns(i)).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(nsfd, 0);
    const std::string script = tmp_ + "/ngn-vl", name = "vm" + std::to_string(i);
    const char* argv[] = {script.c_str(), "--name", name.c_str(), "--namespace", "ngnev", nullptr};
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      char c;
      if (::read(fds[0], &c, 1) != 1 || ::setns(nsfd, CLONE_NEWNET) != 0) ::_exit(127);
      ::execv(argv[0], const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::close(fds[0]);
    ::close(nsfd);
    launchers_[i] = pid;
    const std::string dir = tmp_ + "/proc/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/comm") << "virt-launcher\n";
    std::ofstream(dir + "/cmdline") << std::string("virt-launcher\0--name\0", 21) << name
                                    << std::string("\0--namespace\0ngnev\0", 19);
    ASSERT_EQ(::symlink(("/proc/" + std::to_string(pid) + "/ns").c_str(), (dir + "/ns").c_str()),
              0);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    ::close(fds[1]);
  }
  void stopLauncher(pid_t pid) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
  void stopLauncherOf(int i) {
    stopLauncher(launchers_.at(i));
    std::filesystem::remove_all(tmp_ + "/proc/" + std::to_string(launchers_.at(i)));
    launchers_.erase(i);
  }

  std::set<Hop> hopsOf(const std::string& v) const {
    std::set<Hop> out;
    for (const auto& d : svc_->hops())
      if (d.vmi == v) out.insert(d.hop);
    return out;
  }
  bool allFour(int i) const {
    return hopsOf(vmi(i)) == std::set<Hop>{Hop::Tap, Hop::Bridge, Hop::LauncherEth0, Hop::HostVeth};
  }

  // What a device carries of ours: a clsact qdisc (we created it on these fresh devices) and the
  // tracer's programs as bpftool lists them.
  static bool traced(const std::string& netns, const std::string& dev) {
    const std::string in = netns.empty() ? "" : "ip netns exec " + netns + " ";
    return output(in + "tc qdisc show dev " + dev).find("clsact") != std::string::npos ||
           output(in + "bpftool net show dev " + dev).find("ng_tc") != std::string::npos;
  }

  std::string tag_, tmp_;
  std::unique_ptr<KernelEvents> events_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<DnsService> svc_;
  std::map<int, pid_t> launchers_;
  std::vector<std::string> netns_, host_links_;
};

// The brief's order of a VM start: the launcher netns and its links first, the host-side veth last.
// With process events off, the host-side RTM_NEWLINK alone must bring all four hops in.
TEST_F(VmEvents, HostVethEventAttachesAVmWithinOneSecond) {
  svc_ = startService(false);
  ASSERT_TRUE(svc_);
  std::vector<double> lat;
  for (int i = 0; i < starts(); ++i) {
    makeNetns(i, false);
    startLauncher(i);
    // The launcher has exec'd, and the last pass (the previous VM's) is older than the minimum
    // gap between passes, so what is measured is this VM's own event path.
    std::this_thread::sleep_for(300ms);
    auto t0 = Clock::now();
    addVeth(i);
    double ms = waitFor([&] { return allFour(i); }, 3s, t0);
    ASSERT_GE(ms, 0) << "vm" << i << " not attached within 3 s";
    EXPECT_LT(ms, 1000) << "vm" << i;
    lat.push_back(ms);
  }
  std::printf("[latency] host veth created -> 4 hops attached (link event): %s\n",
              summary(lat).c_str());
  // Every pass but start()'s own was asked for by an event: the periodic one never ran.
  auto st = svc_->discoveryStats();
  EXPECT_EQ(st.rescans, st.event_rescans + 1);
  ASSERT_TRUE(traced("", veth(0)));
  ASSERT_TRUE(traced(ns(0), "tap0"));
  // On exit nothing stays behind on any device of any VM.
  svc_.reset();
  for (int i = 0; i < starts(); ++i) {
    EXPECT_FALSE(traced("", veth(i))) << veth(i);
    for (const char* d : {"tap0", "k6t-eth0", "eth0"})
      EXPECT_FALSE(traced(ns(i), d)) << ns(i) << " " << d;
  }
}

// A launcher starting in a netns whose links are all there: the exec event brings it in; its exit
// takes every hop away, clean, and the netns is not kept alive by us once it is deleted.
TEST_F(VmEvents, LauncherExecAttachesAndExitDetachesCleanly) {
  svc_ = startService(true);
  ASSERT_TRUE(svc_);
  auto st = svc_->discoveryStats();
  if (!st.process_events)
    GTEST_SKIP() << "proc connector unusable here (" << st.process_events_off
                 << "); the agent falls back to periodic rescans";
  std::vector<double> attach, detach, gone;
  for (int i = 0; i < starts(); ++i) {
    makeNetns(i, true);
    // Let the veth's own events and their pass go by (debounce + the gap after the last pass),
    // so the exec is what brings the VM in.
    std::this_thread::sleep_for(400ms);
    ASSERT_TRUE(hopsOf(vmi(i)).empty());
    auto t0 = Clock::now();
    startLauncher(i);
    double ms = waitFor([&] { return allFour(i); }, 3s, t0);
    ASSERT_GE(ms, 0) << "vm" << i << " not attached within 3 s of its launcher's exec";
    EXPECT_LT(ms, 1000);
    attach.push_back(ms);
    ASSERT_TRUE(traced("", veth(i)));
    ASSERT_TRUE(traced(ns(i), "k6t-eth0"));

    // VM stop: the launcher exits, the netns (a bind mount, like a pod sandbox's) stays.
    std::this_thread::sleep_for(300ms);  // past the minimum gap after the attaching pass
    auto t1 = Clock::now();
    stopLauncherOf(i);
    ms = waitFor([&] { return hopsOf(vmi(i)).empty(); }, 3s, t1);
    ASSERT_GE(ms, 0) << "vm" << i << " not detached within 3 s of its launcher's exit";
    EXPECT_LT(ms, 1000);
    detach.push_back(ms);
    EXPECT_FALSE(traced("", veth(i)));
    for (const char* d : {"tap0", "k6t-eth0", "eth0"}) EXPECT_FALSE(traced(ns(i), d)) << d;

    // Netns deletion: with its last user gone it dies, and its veth with it. Had we kept an fd
    // of it, the host-side veth would stay.
    auto t2 = Clock::now();
    ASSERT_EQ(sh("ip netns del " + ns(i)), 0);
    netns_.erase(std::find(netns_.begin(), netns_.end(), ns(i)));
    ms = waitFor([&] { return ::if_nametoindex(veth(i).c_str()) == 0; }, 3s, t2);
    ASSERT_GE(ms, 0) << "host veth of a deleted netns still there: the netns is pinned";
    gone.push_back(ms);
  }
  std::printf("[latency] launcher exec -> 4 hops attached (process event): %s\n",
              summary(attach).c_str());
  std::printf("[latency] launcher exit -> all hops detached (process event): %s\n",
              summary(detach).c_str());
  std::printf("[latency] netns deleted -> host veth gone: %s\n", summary(gone).c_str());
}

// The host-side veth is deleted while the launcher runs: eth0 and the host veth go, the bridge and
// the tap stay traced.
TEST_F(VmEvents, DeletingTheHostVethDetachesItsHops) {
  makeNetns(0, true);
  startLauncher(0);
  svc_ = startService(true);
  ASSERT_TRUE(svc_);
  ASSERT_GE(waitFor([&] { return allFour(0); }, 3s), 0);  // the first pass, or the exec event
  auto t0 = Clock::now();
  ASSERT_EQ(sh("ip link del " + veth(0)), 0);
  double ms = waitFor(
      [&] {
        return hopsOf(vmi(0)) == std::set<Hop>{Hop::Tap, Hop::Bridge};
      },
      3s, t0);
  ASSERT_GE(ms, 0) << "eth0 and the host veth still listed 3 s after the veth was deleted";
  EXPECT_LT(ms, 1000);
  std::printf("[latency] host veth deleted -> its hops detached (link event): %.1f ms\n", ms);
  EXPECT_TRUE(traced(ns(0), "tap0"));
  svc_.reset();
  EXPECT_FALSE(traced(ns(0), "tap0"));
  EXPECT_FALSE(traced(ns(0), "k6t-eth0"));
}

// KubeVirt's real order: the CNI's veth is there when the launcher starts, and virt-handler adds
// k6t-eth0 and tap0 inside the launcher's netns afterwards, where no host-side event tells of
// them. The per-netns link watch must bring them in.
TEST_F(VmEvents, BridgeAndTapAddedInsideALauncherNetnsAreFollowed) {
  ASSERT_EQ(sh("ip netns add " + ns(0)), 0);
  netns_.push_back(ns(0));
  addVeth(0);
  startLauncher(0);
  svc_ = startService(true);
  ASSERT_TRUE(svc_);
  ASSERT_GE(waitFor(
                [&] {
                  return hopsOf(vmi(0)) == std::set<Hop>{Hop::LauncherEth0, Hop::HostVeth};
                },
                3s),
            0);
  std::this_thread::sleep_for(300ms);
  auto t0 = Clock::now();
  const std::string L = "ip -n " + ns(0) + " ";
  ASSERT_EQ(sh(L + "link add k6t-eth0 type bridge"), 0);
  ASSERT_EQ(sh(L + "tuntap add dev tap0 mode tap"), 0);
  ASSERT_EQ(sh(L + "link set tap0 master k6t-eth0"), 0);
  double ms = waitFor([&] { return allFour(0); }, 3s, t0);
  ASSERT_GE(ms, 0) << "bridge and tap made inside the launcher netns not attached within 3 s";
  EXPECT_LT(ms, 1000);
  std::printf("[latency] k6t-eth0 + tap0 created in the launcher netns -> attached: %.1f ms\n", ms);
  auto st = svc_->discoveryStats();
  EXPECT_EQ(st.rescans, st.event_rescans + 1);
}

// Twenty links appear in the host netns at once (one `ip -batch`): the debounce folds them into
// very few passes, where one pass per event would be twenty.
TEST_F(VmEvents, ABurstOfTwentyLinkEventsIsDebounced) {
  svc_ = startService(false);
  ASSERT_TRUE(svc_);
  std::this_thread::sleep_for(400ms);  // quiet
  std::string add, del;
  for (int i = 0; i < 10; ++i) {
    const std::string a = tag_ + "b" + std::to_string(i), b = tag_ + "c" + std::to_string(i);
    host_links_.push_back(a);
    add += "link add " + a + " type veth peer name " + b + "\n";
    del += "link del " + a + "\n";
  }
  std::ofstream(tmp_ + "/add") << add;
  std::ofstream(tmp_ + "/del") << del;
  for (const char* phase : {"add", "del"}) {
    auto before = svc_->discoveryStats().event_rescans;
    ASSERT_EQ(sh("ip -batch " + tmp_ + "/" + phase), 0);
    std::this_thread::sleep_for(800ms);
    auto passes = svc_->discoveryStats().event_rescans - before;
    std::printf("[debounce] 20 link events (%s) -> %llu rescans\n", phase,
                static_cast<unsigned long long>(passes));
    EXPECT_GE(passes, 1u) << "the burst was not heard at all";
    // One for the burst; the rest is room for other tests' links on this host at the same time.
    EXPECT_LE(passes, 3u);
  }
  host_links_.clear();
}

// The per-netns watch names the netns a link changed in (a pass re-lists that one alone), and
// leaves out a bridge's reports on its ports: with STP off a port still sends one when its
// forward-delay timer expires after it came up (15 s by default, 1.5 s here), which told the
// agent to re-read every launcher netns 15 s after its VM started. A socket of the test's own in
// the netns proves that report was sent.
TEST(NetnsLinkWatch, NamesTheNetnsAndIgnoresABridgesPortReports) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a netns";
  const std::string ns = "ngnw" + std::to_string(::getpid() % 100000);
  ASSERT_EQ(sh("ip netns add " + ns), 0);
  struct Cleanup {
    std::string ns;
    ~Cleanup() { sh("ip netns del " + ns); }
  } cleanup{ns};
  int nsfd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(nsfd, 0);
  int own = -1;
  std::thread([&] {
    if (::setns(nsfd, CLONE_NEWNET) != 0) return;
    own = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = RTMGRP_LINK;
    if (own >= 0 && ::bind(own, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(own);
      own = -1;
    }
  }).join();
  ASSERT_GE(own, 0);
  std::mutex mu;
  std::vector<std::pair<Clock::time_point, std::uint64_t>> heard;
  auto watch = NetnsLinkWatch::start([&](std::uint64_t key) {
    std::lock_guard lk(mu);
    heard.emplace_back(Clock::now(), key);
  });
  ASSERT_TRUE(watch.ok()) << watch.error().message;
  ASSERT_TRUE(watch.value()->add(77, nsfd).ok());
  ::close(nsfd);
  const std::string L = "ip -n " + ns + " ";
  ASSERT_EQ(sh(L + "link add br0 type bridge forward_delay 150"), 0);
  ASSERT_EQ(sh(L + "link add d0 type veth peer name d1"), 0);
  ASSERT_EQ(sh(L + "link set d1 up"), 0);
  ASSERT_EQ(sh(L + "link set d0 master br0"), 0);
  ASSERT_EQ(sh(L + "link set br0 up"), 0);
  ASSERT_EQ(sh(L + "link set d0 up"), 0);
  auto up = Clock::now();
  ASSERT_GE(waitFor(
                [&] {
                  std::lock_guard lk(mu);
                  return !heard.empty();
                },
                2s),
            0)
      << "no link event heard from the watched netns";
  {
    std::lock_guard lk(mu);
    for (const auto& [t, key] : heard) EXPECT_EQ(key, 77u);
  }
  // The port's forward-delay report, as the kernel sends it to every listener.
  auto bridgeReports = [&] {
    int n_reports = 0;
    alignas(nlmsghdr) char buf[8192];
    ssize_t n;
    while ((n = ::recv(own, buf, sizeof buf, MSG_DONTWAIT)) > 0)
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
           h = NLMSG_NEXT(h, n))
        n_reports += h->nlmsg_type == RTM_NEWLINK &&
                     static_cast<const ifinfomsg*>(NLMSG_DATA(h))->ifi_family == AF_BRIDGE;
    return n_reports;
  };
  std::this_thread::sleep_for(300ms);
  bridgeReports();  // those of the enslaving and the port coming up
  auto quiet = Clock::now();
  ASSERT_LT(quiet - up, 1200ms) << "too slow to tell the delayed report from the first ones";
  ASSERT_GE(waitFor([&] { return bridgeReports() > 0; }, 3s), 0)
      << "the bridge sent no port report after its forward delay";
  std::this_thread::sleep_for(100ms);  // the watch's thread has read it too
  std::lock_guard lk(mu);
  for (const auto& [t, key] : heard)
    EXPECT_LT(t, quiet) << "a pass was asked for by the bridge's port report";
  ::close(own);
}

// The proc connector itself: exec and exit of a process it did not start.
TEST(ProcConnector, ReportsExecAndExitOfAProcess) {
  if (::geteuid() != 0) GTEST_SKIP() << "the proc connector needs CAP_NET_ADMIN";
  std::mutex mu;
  std::vector<ProcessEvent> seen;
  auto pe = ProcessEvents::start([&](const ProcessEvent& ev) {
    std::lock_guard lk(mu);
    seen.push_back(ev);
  });
  ASSERT_TRUE(pe.ok()) << pe.error().message;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/true", "true", nullptr);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  auto has = [&](ProcessEvent::Kind k) {
    std::lock_guard lk(mu);
    return std::any_of(seen.begin(), seen.end(),
                       [&](const ProcessEvent& e) { return e.kind == k && e.pid == pid; });
  };
  EXPECT_GE(
      waitFor([&] { return has(ProcessEvent::Kind::Exec) && has(ProcessEvent::Kind::Exit); }, 2s),
      0);
}

// Outside the initial pid namespace the kernel ignores the subscription without an error; start()
// must notice (no acknowledgement) and say why, so the agent falls back to periodic rescans.
TEST(ProcConnector, OutsideTheInitialPidNamespaceItSaysWhy) {
  if (::geteuid() != 0) GTEST_SKIP() << "creating a pid namespace needs root";
  pid_t outer = ::fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(2);
    pid_t inner = ::fork();  // the first child is pid 1 of the new namespace
    if (inner == 0) {
      auto pe = ProcessEvents::start([](const ProcessEvent&) {}, 300ms);
      ::_exit(!pe.ok() && pe.error().message.find("no acknowledgement") != std::string::npos ? 0
                                                                                             : 1);
    }
    int st = 0;
    ::waitpid(inner, &st, 0);
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 3);
  }
  int status = 0;
  ::waitpid(outer, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: subscribed from a child pid namespace, 2: unshare failed";
}

}  // namespace
}  // namespace nodegate::dns
