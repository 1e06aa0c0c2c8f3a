#include "lvm_label.h"

#include <fcntl.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "text.h"

namespace nodegate {
namespace {

// struct label_header in lvm2's lib/label/label.h: id[8], sector_xl, crc_xl, offset_xl, type[8].
constexpr std::string_view kLabelId = "LABELONE";
constexpr std::string_view kLvm2Type = "LVM2 001";
constexpr std::size_t kTypeOffset = 24;
constexpr std::size_t kHeaderSize = kTypeOffset + kLvm2Type.size();

}  // namespace

std::optional<std::size_t> findLvm2Label(std::string_view head) {
  for (std::size_t sector = 0; sector < kLvmLabelSectors; ++sector) {
    const std::size_t at = sector * kLvmSectorSize;
    if (head.size() < at + kHeaderSize) break;
    const std::string_view hdr = head.substr(at, kHeaderSize);
    if (hdr.substr(0, kLabelId.size()) == kLabelId &&
        hdr.substr(kTypeOffset, kLvm2Type.size()) == kLvm2Type)
      return sector;
  }
  return std::nullopt;
}

LvmLabelScan scanLvmLabels(const HostRoot& host, DeviceIo& io) {
  namespace fs = std::filesystem;
  LvmLabelScan scan;
  const std::string dir = host.sys("class/block");
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) {
    scan.error = "failed to list " + dir + ": " + ec.message();
    return scan;
  }
  if (names.empty()) {
    // Every Linux host has some block device (a ram or loop device at least); an empty list
    // means this is not the host's sysfs, not that the host has no disks.
    scan.error = "failed to list " + dir + ": no block devices";
    return scan;
  }
  std::sort(names.begin(), names.end());

  for (const auto& name : names) {
    const std::string sys = dir + "/" + name;
    auto size = readValue(sys + "/size");
    if (!size) {
      scan.error = size.error().message;
      return scan;
    }
    if (trim(*size) == "0") {
      ++scan.empty;
      continue;
    }
    // The kernel writes '/' in device names as '!' in sysfs (cciss!c0d0 is /dev/cciss/c0d0).
    std::string node_name = name;
    std::replace(node_name.begin(), node_name.end(), '!', '/');
    const std::string node = host.dev(node_name);
    auto devno = readValue(sys + "/dev");
    auto st = io.statPath(node);
    if (!devno || !st) {
      scan.error = !devno ? devno.error().message : st.error().message;
      return scan;
    }
    const std::string want =
        std::to_string(major(st->st_rdev)) + ":" + std::to_string(minor(st->st_rdev));
    if (!S_ISBLK(st->st_mode) || trim(*devno) != want) {
      scan.error = "failed to scan " + node + ": not the block device " +
                   std::string(trim(*devno)) + " that " + sys + " describes";
      return scan;
    }
    auto fd = io.open(node, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd && !scan.labelled.empty()) {
      // lvm runs anyway: the rest are only opened, to learn which ones the cgroup refuses.
      io.close(*fd);
      continue;
    }
    if (!fd && fd.error().code == EPERM) {
      // EPERM on a block device is the device cgroup (or its BPF program) refusing it, not file
      // permissions (EACCES). lvm runs as our child in our cgroup and is refused the same way,
      // so it would skip this device silently (lvm -vvvv: "Failed to open device path ... (1)").
      scan.denied.push_back(name);
      continue;
    }
    if (!fd) {
      scan.error = fd.error().message;
      return scan;
    }
    std::string head(kLvmLabelScanBytes, '\0');
    auto got = io.pread(*fd, head.data(), head.size(), 0);
    io.close(*fd);
    if (!got) {
      scan.error = got.error().message + " (" + node + ")";
      return scan;
    }
    head.resize(*got);
    ++scan.scanned;
    if (auto sector = findLvm2Label(head))
      scan.labelled.push_back(name + " (sector " + std::to_string(*sector) + ")");
  }
  return scan;
}

}  // namespace nodegate
