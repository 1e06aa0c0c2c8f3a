// Production DeviceIo: plain syscalls, errno kept in the Error.
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

// The signal that ends a KVM_RUN at its deadline. It stays blocked in the calling thread except
// inside KVM_RUN (KVM_SET_SIGNAL_MASK unblocks it for the guest's run only), it comes from a
// timer aimed at that one thread, and it is taken off the pending set before the thread's mask
// is restored: no handler, nothing process-wide, and a timer that fires before KVM_RUN starts
// is not lost (the pending signal makes KVM_RUN return at once).
int deadlineSignal() {
  return SIGRTMIN + 5;
}

// struct kvm_signal_mask as the kernel lays it out: a length, then the kernel's 64-bit sigset
// (glibc's sigset_t is larger, with the kernel's bits first). Not <linux/kvm.h>'s own type or
// request: its __DECLARE_FLEX_ARRAY gives the struct 8 bytes in C++ where C has 4, so the
// header's KVM_SET_SIGNAL_MASK carries the wrong size and the kernel answers EINVAL (measured
// here with the Debian 12 headers).
constexpr std::uint32_t kKernelSigsetBytes = 8;
struct KvmSignalMask {
  std::uint32_t len;
  std::uint8_t sigset[kKernelSigsetBytes];
};
constexpr unsigned long kKvmSetSignalMask = _IOW(KVMIO, 0x8b, std::uint32_t);

Result<int> runUntil(int vcpu, std::chrono::steady_clock::time_point deadline) {
  const int sig = deadlineSignal();
  sigset_t only, old;
  sigemptyset(&only);
  sigaddset(&only, sig);
  if (int e = pthread_sigmask(SIG_BLOCK, &only, &old)) return errnoError(e, "block signal");
  sigset_t in_guest = old;
  sigdelset(&in_guest, sig);
  KvmSignalMask mask{kKernelSigsetBytes, {}};
  std::memcpy(mask.sigset, &in_guest, kKernelSigsetBytes);

  Result<int> out = Error{};
  timer_t timer{};
  sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = sig;
  sev._sigev_un._tid = ::gettid();  // sigev_notify_thread_id; glibc 2.36 lacks the macro
  const auto since = deadline.time_since_epoch();  // steady_clock is CLOCK_MONOTONIC
  itimerspec at{};
  at.it_value.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(since).count();
  at.it_value.tv_nsec = (since - std::chrono::seconds(at.it_value.tv_sec)).count();
  if (::ioctl(vcpu, kKvmSetSignalMask, &mask) != 0) {
    out = errnoError(errno, "set the vcpu's signal mask");
  } else if (::timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) {
    out = errnoError(errno, "create the guest's deadline timer");
  } else {
    if (::timer_settime(timer, TIMER_ABSTIME, &at, nullptr) != 0) {
      out = errnoError(errno, "arm the guest's deadline timer");
    } else {
      int rc = ::ioctl(vcpu, KVM_RUN, nullptr);
      int err = errno;
      if (rc >= 0)
        out = rc;
      else if (err == EINTR && std::chrono::steady_clock::now() >= deadline)
        out = Error{ETIMEDOUT, "failed to run the guest: its deadline passed"};
      else
        out = errnoError(err, "run the vcpu (KVM_RUN)");
    }
    ::timer_delete(timer);  // disarmed: no signal after this point
  }
  const timespec zero{};
  while (::sigtimedwait(&only, nullptr, &zero) == sig) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return out;
}

class SysDeviceIo final : public DeviceIo {
 public:
  Result<struct stat> statPath(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errnoError(errno, "stat " + path);
    return st;
  }
  Result<int> open(const std::string& path, int flags) override {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return errnoError(errno, "open " + path);
    return fd;
  }
  Result<int> ioctl(int fd, unsigned long request, void* arg) override {
    int rc = ::ioctl(fd, request, arg);
    if (rc < 0) return errnoError(errno, "ioctl " + std::to_string(request));
    return rc;
  }
  void close(int fd) override { ::close(fd); }
  Result<std::size_t> pread(int fd, void* buf, std::size_t len, std::uint64_t offset) override {
    ssize_t n;
    do n = ::pread(fd, buf, len, static_cast<off_t>(offset));
    while (n < 0 && errno == EINTR);
    if (n < 0) return errnoError(errno, "read " + std::to_string(len) + " bytes of the device");
    return static_cast<std::size_t>(n);
  }
  Result<void*> map(int fd, std::size_t len) override {
    void* p = fd < 0 ? ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                     : ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return errnoError(errno, "map " + std::to_string(len) + " bytes");
    return p;
  }
  void unmap(void* addr, std::size_t len) override { ::munmap(addr, len); }
  Result<int> runVcpu(int vcpu_fd, std::chrono::steady_clock::time_point deadline) override {
    if (std::chrono::steady_clock::now() >= deadline)
      return Error{ETIMEDOUT, "failed to run the guest: its deadline passed"};
    return runUntil(vcpu_fd, deadline);
  }
};

}  // namespace

std::shared_ptr<DeviceIo> makeSysDeviceIo() {
  return std::make_shared<SysDeviceIo>();
}

}  // namespace nodegate
