// Production DeviceIo: plain syscalls, errno kept in the Error.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

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
};

}  // namespace

std::shared_ptr<DeviceIo> makeSysDeviceIo() {
  return std::make_shared<SysDeviceIo>();
}

}  // namespace nodegate
