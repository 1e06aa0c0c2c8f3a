// Test harness: a real dbus-daemon on a private unix socket in a fresh temp dir, and the test
// service (test_service.cpp) on it. Every process started here is killed and reaped by the
// destructors, also when an assertion fails half-way.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

extern char** environ;

namespace nodegate::testing {

// A child process whose stdout is read until a line that says it is ready.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { stop(); }

  // Starts argv and returns the first line of its stdout (empty on timeout or early exit).
  std::string start(const std::vector<std::string>& argv,
                    std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    stop();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("failed to create pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      pid_ = -1;
      throw std::runtime_error("failed to spawn " + argv[0]);
    }
    out_fd_ = fds[0];
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char c;
      if (::read(out_fd_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return {};
  }

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);  // a stopped child cannot act on SIGTERM
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
      pid_ = -1;
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
  }

  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
};

inline std::string testServiceBinary() {
  return NODEGATE_DBUS_TEST_SERVICE;
}

// A temp dir with a dbus-daemon listening on <dir>/bus; restartable on the same socket path.
class TestBus {
 public:
  TestBus() {
    char tmpl[] = "/tmp/nodegate-dbus-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("failed to create temp dir");
    dir_ = tmpl;
    start();
  }
  ~TestBus() {
    service_.stop();
    daemon_.stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void start() {
    std::filesystem::remove(socket());
    address_ = daemon_.start(
        {"/usr/bin/dbus-daemon", "--config-file=" + std::string(NODEGATE_DBUS_TEST_CONFIG),
         "--address=unix:path=" + socket(), "--nofork", "--nopidfile", "--print-address"});
    if (address_.empty()) throw std::runtime_error("dbus-daemon did not start");
  }
  void stop() {
    service_.stop();
    daemon_.stop();
  }
  // SIGSTOP: the socket stays, nobody answers (a wedged bus).
  void freeze() { daemon_.signal(SIGSTOP); }
  void thaw() { daemon_.signal(SIGCONT); }

  // Starts (or restarts) the test service with extra arguments; true once it owns its names.
  bool startService(std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {testServiceBinary(), "--address", address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return service_.start(argv) == "ready";
  }
  void stopService() { service_.stop(); }

  std::string socket() const { return dir_ + "/bus"; }
  std::string address() const { return "unix:path=" + socket(); }
  const std::string& dir() const { return dir_; }

  // Calls a method of the test service's control interface.
  template <typename... Args>
  void control(const std::string& method, Args&&... args) {
    auto conn = sdbus::createSessionBusConnectionWithAddress(address());
    auto proxy = sdbus::createProxy(*conn, "io.nodegate.Test", "/io/nodegate/Test");
    proxy->callMethod(method)
        .onInterface("io.nodegate.Test")
        .withTimeout(std::chrono::seconds(10))
        .withArguments(std::forward<Args>(args)...);
  }

 private:
  std::string dir_;
  std::string address_;
  Child daemon_;
  Child service_;
};

}  // namespace nodegate::testing
