#include "mountinfo.h"

#include "text.h"

namespace nodegate {
namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo octal.
std::string unescapeMount(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

bool hasMountOption(std::string_view options, std::string_view opt) {
  while (!options.empty()) {
    auto comma = options.find(',');
    if (options.substr(0, comma) == opt) return true;
    if (comma == std::string_view::npos) break;
    options.remove_prefix(comma + 1);
  }
  return false;
}

std::vector<MountEntry> parseMountInfo(std::string_view text) {
  std::vector<MountEntry> out;
  forEachLine(text, [&](std::string_view line) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    std::vector<std::string_view> f;
    forEachWord(line, [&](std::string_view w) { f.push_back(w); });
    std::size_t sep = 0;
    for (std::size_t i = 6; i < f.size(); ++i)
      if (f[i] == "-") {
        sep = i;
        break;
      }
    if (sep == 0 || f.size() < sep + 3) return;
    MountEntry m;
    m.root = unescapeMount(f[3]);
    m.mount_point = unescapeMount(f[4]);
    m.options = std::string(f[5]);
    m.fstype = std::string(f[sep + 1]);
    m.source = unescapeMount(f[sep + 2]);
    m.super_options = sep + 3 < f.size() ? std::string(f[sep + 3]) : std::string();
    // The superblock's "ro" matters as much as the mount's: ext4 errors=remount-ro flips only
    // the superblock, and every mount of it turns read-only at once.
    m.read_only = hasMountOption(m.options, "ro") || hasMountOption(m.super_options, "ro");
    out.push_back(std::move(m));
  });
  return out;
}

}  // namespace nodegate
