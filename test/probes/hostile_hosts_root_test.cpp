// EACCES (#22 item 5): the captured host tree with every file and directory below proc/ and
// sys/ made unreadable, probed by an unprivileged uid (root reads through permissions). Every
// probe that reads the tree is then not PASS and publishes no label for what it did not read.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "hostile_hosts.h"

namespace nodegate {
namespace {

namespace fs = std::filesystem;

TEST(HostileHostsRoot, PermissionDeniedIsNeverPass) {
  ASSERT_EQ(::geteuid(), 0u) << "this test drops to uid 65534 and needs root to do it";
  HostileTree t("eacces");
  std::vector<fs::path> paths;
  for (const char* part : {"proc", "sys"})
    for (auto& e : fs::recursive_directory_iterator(t.root / part)) paths.push_back(e.path());
  // Deepest first, so that a directory is closed after what is inside it.
  for (auto it = paths.rbegin(); it != paths.rend(); ++it)
    if (!fs::is_symlink(*it)) ::chmod(it->c_str(), 0);
  fs::permissions(t.root, fs::perms::all);  // the root itself stays readable

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    std::string out;
    for (const auto& [check, r] : t.run())
      out += check + " " + std::string(toString(r.status)) + " " + std::to_string(r.labels.size()) +
             " " + r.reason + "\n";
    if (::write(fds[1], out.data(), out.size()) != static_cast<ssize_t>(out.size())) ::_exit(4);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << status;

  std::istringstream in(text);
  std::string check, st, reason;
  int labels = 0, seen = 0;
  while (in >> check >> st >> labels >> reason) {
    ++seen;
    SCOPED_TRACE(check + " " + st + " " + reason);
    if (check == "local-pv") {
      EXPECT_EQ(reason, "NoLocalVolumes");  // the root is readable and holds no kubelet dir
      continue;
    }
    if (check == "kvm-device" || check == "vhost-net" || check == "tun") continue;  // seam
    EXPECT_NE(st, "PASS");
    if (st == "UNKNOWN") {
      EXPECT_EQ(labels, 0);
    }
  }
  EXPECT_GE(seen, 9) << text;
}

}  // namespace
}  // namespace nodegate
