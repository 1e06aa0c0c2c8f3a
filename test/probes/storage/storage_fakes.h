// Fakes for the storage probes' seams: an Exec that replays a canned lvm run and counts calls,
// a DeviceIo whose BLKROGET answer is set per path.
#pragma once

#include <linux/fs.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "nodegate/seams.h"

namespace nodegate::testing {

inline std::string readFixture(const std::string& rel) {
  std::ifstream in(std::string(NODEGATE_FIXTURES) + "/lvm/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FakeExec final : public Exec {
 public:
  ExecResult next;
  int calls = 0;
  std::vector<std::string> last_argv;
  std::chrono::milliseconds last_timeout{0};

  Result<ExecResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::size_t) override {
    ++calls;
    last_argv = argv;
    last_timeout = timeout;
    return next;
  }
  void reply(std::string out, int code = 0, std::string err = {}) {
    next = ExecResult{};
    next.out = std::move(out);
    next.exit_code = code;
    next.err = std::move(err);
  }
};

class FakeDeviceIo final : public DeviceIo {
 public:
  std::map<std::string, int> read_only;  // path -> BLKROGET answer; absent path: ENOENT
  std::map<int, std::string> open_fds;
  int next_fd = 100;

  Result<struct stat> statPath(const std::string& path) override {
    if (!read_only.count(path)) return errnoError(ENOENT, "stat " + path);
    struct stat st {};
    st.st_mode = S_IFBLK | 0660;
    return st;
  }
  Result<int> open(const std::string& path, int) override {
    if (!read_only.count(path)) return errnoError(ENOENT, "open " + path);
    open_fds[next_fd] = path;
    return next_fd++;
  }
  Result<int> ioctl(int fd, unsigned long request, void* arg) override {
    if (request != BLKROGET || !open_fds.count(fd)) return errnoError(ENOTTY, "ioctl");
    *static_cast<int*>(arg) = read_only[open_fds[fd]];
    return 0;
  }
  void close(int fd) override { open_fds.erase(fd); }
};

}  // namespace nodegate::testing
