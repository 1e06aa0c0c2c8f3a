#include "nodegate/host_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace nodegate {

namespace {

const char* fileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a plain file";
}

}  // namespace

Error errnoError(int err, std::string what) {
  return Error{err, "failed to " + what + ": " + std::strerror(err)};
}

HostRoot::HostRoot(std::string root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
  procfs_ = join(root_, "proc");
  sysfs_ = join(root_, "sys");
  devfs_ = join(root_, "dev");
  rootfs_ = root_;
}

std::string HostRoot::join(const std::string& base, std::string_view rel) {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  if (rel.empty()) return base;
  std::string out = base;
  if (out.empty() || out.back() != '/') out += '/';
  out.append(rel);
  return out;
}

Result<std::string> readFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer appears, and a captured host
  // tree or a config path may hold one; only regular files are read (procfs and sysfs files
  // are regular), so a FIFO, socket or device is an error at once instead of a hang.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errnoError(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoError(err, "stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{EINVAL, "failed to read " + path + ": not a regular file (" +
                             fileTypeName(st.st_mode) + ")"};
  }
  // Read straight into the string, 4 KiB at a time: an 8 KiB buffer on the stack made this the
  // deepest frame of every probe thread and HTTP worker, and the stack pages it touched stayed
  // resident in each of them (~0.2 MiB over the agent's threads).
  constexpr std::size_t kChunk = 4096;
  std::string out;
  for (;;) {
    const std::size_t used = out.size();
    out.resize(used + kChunk);
    ssize_t n = ::read(fd, out.data() + used, kChunk);
    out.resize(used + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return errnoError(err, "read " + path);
    }
    if (n == 0) break;
    if (out.size() > max_bytes) {
      ::close(fd);
      return Error{EFBIG, "failed to read " + path + ": larger than " + std::to_string(max_bytes) +
                              " bytes"};
    }
  }
  ::close(fd);
  return out;
}

Result<void> sysfsReadable(const HostRoot& host) {
  const std::string dir = host.sys("kernel");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return errnoError(errno, "read sysfs at " + host.sys() + " (" + dir + ")");
  bool any = false;
  for (dirent* e; !any && (e = ::readdir(d));)
    any = std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
  ::closedir(d);
  if (!any)
    return Error{ENOENT, "failed to read sysfs at " + host.sys() + ": " + dir + " is empty"};
  return {};
}

Result<std::string> readValue(const std::string& path) {
  auto r = readFile(path, 64u << 10);
  if (!r) return r.error();
  std::string s = std::move(r).value();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

}  // namespace nodegate
