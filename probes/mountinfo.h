// The mountinfo parser (proc(5)) shared by every probe that asks what is mounted where: cgroups
// (which hierarchies, v1 or v2) and local-pv (is a volume mounted, read-only?).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nodegate {

// One mount from a mountinfo file. Paths are unescaped (\040 -> ' ').
struct MountEntry {
  std::string mount_point, root, fstype, source;
  std::string options, super_options;
  bool read_only = false;  // "ro" in the per-mount or the superblock options
};

// Parses mountinfo text; malformed lines are skipped.
std::vector<MountEntry> parseMountInfo(std::string_view text);

// Whether a comma-separated option list ("rw,relatime,cpu,cpuacct") holds exactly `opt`.
bool hasMountOption(std::string_view options, std::string_view opt);

}  // namespace nodegate
