// Production Exec: fork/execvp with both pipes polled, a deadline, and bounded output. The child
// gets its own process group so a timeout kills whatever it spawned (nsenter -> lvm) too.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

class SysExec final : public Exec {
 public:
  Result<ExecResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::size_t max_output) override {
    if (argv.empty()) return Error{EINVAL, "failed to run command: empty argv"};
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return errnoError(errno, "create pipe");
    if (::pipe2(err, O_CLOEXEC) != 0) {
      int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      return errnoError(e, "create pipe");
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      return errnoError(e, "fork for " + argv[0]);
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::close(0);  // no stdin: a command that prompts reads EOF instead of hanging
      ::execvp(args[0], args.data());
      const char* msg = std::strerror(errno);
      (void)!::write(2, msg, std::strlen(msg));
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ExecResult res;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&res.out, &res.err};
    int open_fds = 2;
    while (open_fds > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        res.timed_out = true;
        break;
      }
      int n = ::poll(fds, 2, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[16384];
        ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
        if (got <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
          continue;
        }
        if (sinks[i]->size() + static_cast<std::size_t>(got) > max_output) {
          res.truncated = true;
          sinks[i]->append(buf, max_output - std::min(max_output, sinks[i]->size()));
        } else {
          sinks[i]->append(buf, static_cast<std::size_t>(got));
        }
      }
      if (res.truncated) break;
    }
    for (auto& f : fds)
      if (f.fd >= 0) ::close(f.fd);
    if (res.timed_out || res.truncated) ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return res;
  }
};

}  // namespace

std::shared_ptr<Exec> makeSysExec() {
  return std::make_shared<SysExec>();
}

}  // namespace nodegate
