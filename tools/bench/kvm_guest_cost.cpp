// What kvm-device's test guest costs, on the real /dev/kvm (root): in one run, interleaved so
// that both see the same machine state,
//   ioctls  - what kvm-device did before the guest: open, KVM_GET_API_VERSION, the capability
//             checks, KVM_CREATE_VM, close;
//   probe   - observeKvmDevice() as the probe runs it now (the same, plus the guest);
// and the guest's run on its own (runGuest on a fresh VM). Prints medians and p90 in
// microseconds of wall time and of the thread's CPU time (user + kernel, the guest's own run
// included: it is accounted to the thread in KVM_RUN), and the ratio probe/ioctls. CPU time is
// what a loaded machine cannot inflate; wall time is what `nodegate check` waits.
// docs/benchmarks/check.md records a run.
//   build/test/probes/kvm_guest_cost [ROUNDS]   (default 300)
#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "kvm_device.h"
#include "kvm_guest.h"
#include "nodegate/host_root.h"
#include "nodegate/seams.h"

namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double threadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// One measured call: wall and CPU microseconds.
template <typename Fn>
std::pair<double, double> measure(Fn&& fn) {
  const double c0 = threadCpuMicros();
  const auto t0 = Clock::now();
  fn();
  const auto t1 = Clock::now();
  return {micros(t1 - t0), threadCpuMicros() - c0};
}

struct Stats {
  double median, p90;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() * 9 / 10]};
}

// The collector's steps up to KVM_CREATE_VM, as plain syscalls.
bool ioctlsOnly() {
  int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) return false;
  bool ok = ::ioctl(kvm, KVM_GET_API_VERSION, 0) == 12;
  for (const auto& cap : nodegate::kvmRequiredCapabilities("x86"))
    ok = ok && ::ioctl(kvm, KVM_CHECK_EXTENSION, cap.number) > 0;
  ::ioctl(kvm, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
  int vm = ::ioctl(kvm, KVM_CREATE_VM, 0);
  ok = ok && vm >= 0;
  if (vm >= 0) ::close(vm);
  ::close(kvm);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 300;
  auto seams = nodegate::productionSeams();
  nodegate::HostRoot host("/");
  std::vector<double> wall[3], cpu[3];  // ioctls, probe, guest
  int exits = 0;
  std::string stage;
  for (int i = 0; i < rounds; ++i) {
    bool ok = true;
    auto [w0, c0] = measure([&] { ok = ioctlsOnly(); });
    if (!ok) {
      std::fprintf(stderr,
                   "kvm_guest_cost: /dev/kvm does not answer (run as root on a KVM host)\n");
      return 2;
    }
    nodegate::KvmObservation o;
    auto [w1, c1] = measure([&] { o = nodegate::observeKvmDevice(*seams.device, host); });
    if (!o.guest) {
      std::fprintf(stderr, "kvm_guest_cost: no guest ran (%s)\n", o.node.error.message.c_str());
      return 2;
    }
    // The guest alone, on a VM made and destroyed outside the timing.
    int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    int vm = ::ioctl(kvm, KVM_CREATE_VM, 0);
    nodegate::GuestRun g;
    auto [w2, c2] = measure([&] { g = nodegate::runGuest(*seams.device, kvm, vm); });
    ::close(vm);
    ::close(kvm);
    wall[0].push_back(w0), cpu[0].push_back(c0);
    wall[1].push_back(w1), cpu[1].push_back(c1);
    wall[2].push_back(w2), cpu[2].push_back(c2);
    exits = g.exits;
    stage = std::string(nodegate::guestStageName(g.reached));
  }
  std::printf("rounds %d; guest: %d exits, last stage %s\n", rounds, exits, stage.c_str());
  const char* names[] = {"ioctls (before the guest)", "probe (reads, ioctls, guest)",
                         "guest alone (runGuest)"};
  for (int k = 0; k < 3; ++k) {
    auto w = stats(wall[k]), c = stats(cpu[k]);
    std::printf("%-30s wall median %8.1f us p90 %8.1f | cpu median %8.1f us p90 %8.1f\n", names[k],
                w.median, w.p90, c.median, c.p90);
  }
  std::printf("ratio probe/ioctls (median): wall %.2f, cpu %.2f\n",
              stats(wall[1]).median / stats(wall[0]).median,
              stats(cpu[1]).median / stats(cpu[0]).median);
  return 0;
}
