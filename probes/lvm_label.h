// Does any block device carry an LVM2 physical-volume label? lvm itself finds PVs by reading
// the first four 512-byte sectors of every device and looking for a label header in one of them
// (lib/label/label.c: "LABELONE", then the labeller type "LVM2 001" at byte 24). A host where no
// device carries one can have no volume group, so the lvm probe need not run `lvm fullreport`
// (~46 ms of exec and lvm start-up per run) to learn that.
//
// The scan answers "no label anywhere" only when it could read every device with a size; a
// device it cannot list, open or read leaves the answer open and the caller runs lvm. The one
// exception is a device whose open fails with EPERM: the device cgroup refuses it to this
// process and so to the lvm it would start (lvm skips such a device without a word), so
// running lvm could not find a VG on it either. Such devices are listed (denied), and the lvm
// probe is UNKNOWN for them whatever else it finds: a refused disk is never "no volume groups".
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodegate/host_root.h"
#include "nodegate/seams.h"

namespace nodegate {

inline constexpr std::size_t kLvmSectorSize = 512;
inline constexpr std::size_t kLvmLabelSectors = 4;
inline constexpr std::size_t kLvmLabelScanBytes = kLvmSectorSize * kLvmLabelSectors;

// The sector (0..3) of the first LVM2 label header in head (a device's first bytes), or nullopt.
// A sector counts when its first 32 bytes (the label header) are present: a short read of a tiny
// device is judged on what it holds. The header's CRC is not checked: a label lvm would reject
// only makes the caller run lvm, which is always correct.
std::optional<std::size_t> findLvm2Label(std::string_view head);

struct LvmLabelScan {
  std::size_t scanned = 0;  // devices whose first sectors were read
  std::size_t empty = 0;    // devices of size 0 (no medium, unused loop), not read
  // "vda1 (sector 1)": the first device found with a label; the devices after it are only
  // opened (lvm runs anyway), to learn which ones the device cgroup refuses.
  std::vector<std::string> labelled;
  std::vector<std::string> denied;  // open refused with EPERM (device cgroup), see the .cpp
  std::string error;                // why the answer is open; empty when every device was read
  // True only when every device with a size was read and none carries a label.
  bool noLabels() const { return error.empty() && labelled.empty(); }
};

// <sysfs>/class/block/* (partitions included), each read through io at <devfs>/<name> opened
// O_RDONLY|O_NONBLOCK (read-only: closing it sends no udev change event). The node must be the
// device sysfs names (same major:minor), or the scan would judge some other device.
LvmLabelScan scanLvmLabels(const HostRoot& host, DeviceIo& io);

}  // namespace nodegate
