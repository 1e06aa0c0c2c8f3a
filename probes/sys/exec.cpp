// Production Exec: fork/execvp with both pipes polled and one deadline for the whole run.
//
// The child leads a process group of its own. The group is SIGKILLed at the deadline, when the
// output limit is hit, and also right after the child exits (whatever it left running in its
// group, a backgrounded shell child, would otherwise outlive the run). The deadline holds even
// when the child closes its stdout and stderr and goes on running: the wait is on the process
// (a pidfd), not on the pipes. PR_SET_PDEATHSIG kills the child if this process dies without
// cleaning up (kill -9), and shutdown() kills every group still running when the agent stops.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

using Clock = std::chrono::steady_clock;

// How long a killed child may take to die before the wait for it is handed to a thread of its
// own: SIGKILL does not end a process blocked in the kernel (D state, a hung device) until the
// kernel call returns, and the caller's deadline has already passed.
constexpr std::chrono::milliseconds kReapGrace{1000};
// Without a pidfd (kernels before 5.3, or seccomp refusing it) the exit is polled at this tick.
constexpr int kPollTickMs = 20;

int pidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// True once pid has exited; the child is left unreaped so its pid (and process group id) cannot
// be reused while the group is still killed by number.
bool hasExited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

// Waits until pid exits or the deadline passes; pidfd may be -1.
bool waitExit(pid_t pid, int pidfd, Clock::time_point deadline) {
  for (;;) {
    if (hasExited(pid)) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{pidfd, POLLIN, 0};
    if (pidfd >= 0)
      ::poll(&p, 1, static_cast<int>(left));
    else
      ::poll(nullptr, 0, static_cast<int>(std::min<long long>(left, kPollTickMs)));
  }
}

void closeAll(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
}

// The output of one run: both pipes, bounded.
class Output {
 public:
  Output(int out, int err, std::size_t max, ExecResult* res)
      : fds_{{out, POLLIN, 0}, {err, POLLIN, 0}},
        sinks_{&res->out, &res->err},
        max_(max),
        res_(res) {}
  ~Output() { closeAll({fds_[0].fd, fds_[1].fd}); }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  bool open() const { return fds_[0].fd >= 0 || fds_[1].fd >= 0; }
  pollfd* fds() { return fds_; }
  // Reads what poll reported (or, with drain, everything there is); false once over the limit.
  bool read(bool drain) {
    for (int i = 0; i < 2; ++i) {
      while (fds_[i].fd >= 0 && (drain || (fds_[i].revents & (POLLIN | POLLHUP | POLLERR)))) {
        char buf[16384];
        const ssize_t got = ::read(fds_[i].fd, buf, sizeof buf);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (got <= 0) {
          ::close(fds_[i].fd);
          fds_[i].fd = -1;
          break;
        }
        std::string& sink = *sinks_[i];
        if (sink.size() + static_cast<std::size_t>(got) > max_) {
          res_->truncated = true;
          sink.append(buf, max_ - std::min(max_, sink.size()));
          return false;
        }
        sink.append(buf, static_cast<std::size_t>(got));
        if (!drain) break;
      }
    }
    return true;
  }

 private:
  pollfd fds_[2];
  std::string* sinks_[2];
  std::size_t max_;
  ExecResult* res_;
};

class SysExec final : public Exec {
 public:
  Result<ExecResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::size_t max_output) override {
    if (argv.empty()) return Error{EINVAL, "failed to run command: empty argv"};
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return errnoError(errno, "create pipe");
    if (::pipe2(err, O_CLOEXEC) != 0) {
      int e = errno;
      closeAll({out[0], out[1]});
      return errnoError(e, "create pipe");
    }
    // Only our ends are non-blocking (draining after the exit); the child writes blocking.
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    auto pid = spawn(argv, out[1], err[1]);
    closeAll({out[1], err[1]});
    if (!pid) {
      closeAll({out[0], err[0]});
      return pid.error();
    }
    const int pidfd = pidfdOpen(*pid);
    ExecResult res;
    {
      Output output(out[0], err[0], max_output, &res);
      collect(*pid, pidfd, output, Clock::now() + timeout, &res);
      // The leader is not reaped yet, so the group id is still its own: kill what is left of it
      // (everything, at a deadline or over the limit; strays, after a normal exit). Before the
      // pipes close, so a writer dies of the kill, not of SIGPIPE.
      ::kill(-*pid, SIGKILL);
    }
    reap(*pid, pidfd, &res);
    closeAll({pidfd});
    return res;
  }

  void shutdown() override {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (pid_t pid : live_) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);  // in case the child had not made its group yet
    }
  }

 private:
  Result<pid_t> spawn(const std::vector<std::string>& argv, int out_w, int err_w) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::lock_guard lock(mu_);  // shutdown() sees every child that exists
    if (stopped_) return Error{ECANCELED, "failed to run " + argv[0] + ": shutting down"};
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return errnoError(errno, "fork for " + argv[0]);
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocks SIGTERM in every thread
      ::signal(SIGPIPE, SIG_DFL);                  // and ignores SIGPIPE; exec keeps both
      ::dup2(out_w, 1);
      ::dup2(err_w, 2);
      ::close(0);  // no stdin: a command that prompts reads EOF instead of hanging
      ::execvp(args[0], args.data());
      const char* msg = std::strerror(errno);
      (void)!::write(2, msg, std::strlen(msg));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from here, so the group exists before anyone kills it
    live_.insert(pid);
    return pid;
  }

  // Reads the pipes until the child exits, the deadline passes or the output is over the limit.
  static void collect(pid_t pid, int pidfd, Output& output, Clock::time_point deadline,
                      ExecResult* res) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        res->timed_out = true;
        return;
      }
      if (!output.open()) {
        // Both pipes closed: only the process is left to wait for, still under the deadline.
        if (waitExit(pid, pidfd, deadline)) return;
        continue;
      }
      pollfd fds[3] = {output.fds()[0], output.fds()[1], {pidfd, POLLIN, 0}};
      const int wait_ms =
          static_cast<int>(pidfd >= 0 ? left : std::min<long long>(left, kPollTickMs));
      const int n = ::poll(fds, 3, wait_ms);
      if (n < 0 && errno != EINTR) {
        res->timed_out = !waitExit(pid, pidfd, deadline);
        return;
      }
      output.fds()[0].revents = fds[0].revents;
      output.fds()[1].revents = fds[1].revents;
      if ((fds[2].revents & POLLIN) || (pidfd < 0 && hasExited(pid))) {
        // The child is gone: take what it wrote; a stray still holding the pipes is not waited
        // for.
        output.read(true);
        return;
      }
      if (n > 0 && !output.read(false)) return;  // over the limit
    }
  }

  void reap(pid_t pid, int pidfd, ExecResult* res) {
    int status = 0;
    if (waitExit(pid, pidfd, Clock::now() + kReapGrace)) {
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (WIFEXITED(status)) {
        res->exit_code = WEXITSTATUS(status);
      } else {
        res->exit_code = -1;
        res->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      }
    } else {
      // Killed but stuck in the kernel: reap it whenever it dies, without holding the caller.
      std::thread([pid] {
        int st = 0;
        while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
      }).detach();
      res->exit_code = -1;
      res->signal = SIGKILL;
      res->timed_out = true;
    }
    std::lock_guard lock(mu_);
    live_.erase(pid);
  }

  std::mutex mu_;
  std::set<pid_t> live_;
  bool stopped_ = false;
};

}  // namespace

std::shared_ptr<Exec> makeSysExec() {
  return std::make_shared<SysExec>();
}

}  // namespace nodegate
