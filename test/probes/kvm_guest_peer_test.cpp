// The built-in test guest booted by QEMU under TCG (a software x86-64 nobody here wrote): its
// bytes, as a boot sector at 0000:7c00, must report stages 1 to 7 on port 0xe9 (QEMU's
// debugcon) — so a guest that stops earlier under some KVM stops because of that KVM, not
// because of the guest. Needs qemu-system-x86 (tools/install-deps.sh installs it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "kvm_guest.h"

extern char** environ;

namespace nodegate {
namespace {

namespace fs = std::filesystem;

std::string readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(KvmGuestQemu, ReachesLongModeUnderTcg) {
  const char* qemu = "/usr/bin/qemu-system-x86_64";
  ASSERT_TRUE(fs::exists(qemu)) << "install qemu-system-x86 (tools/install-deps.sh)";
  char tmpl[] = "/tmp/nodegate-guest-tcg-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, image = dir + "/boot.img", con = dir + "/debugcon";

  // A boot sector: the image, zero padding, the 0x55 0xaa signature at 510.
  auto guest = builtinGuest();
  ASSERT_LE(guest.size(), 510u);
  std::vector<char> sector(512, 0);
  std::copy(guest.begin(), guest.end(), sector.begin());
  sector[510] = 0x55;
  sector[511] = static_cast<char>(0xaa);
  std::ofstream(image, std::ios::binary).write(sector.data(), sector.size());

  const std::string drive = "file=" + image + ",format=raw,if=floppy";
  const std::string debugcon = "file:" + con;
  std::vector<std::string> args = {qemu,          "-accel",     "tcg",    "-display", "none",
                                   "-nodefaults", "-no-reboot", "-boot",  "a",        "-drive",
                                   drive,         "-debugcon",  debugcon, "-monitor", "none",
                                   "-serial",     "none"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, qemu, nullptr, nullptr, argv.data(), environ), 0);

  // The guest ends in hlt with interrupts off, so QEMU never exits by itself: wait for the
  // seventh byte (well under a second under TCG), then stop it.
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    seen = readAll(con);
    if (seen.size() >= static_cast<std::size_t>(kGuestStages)) break;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  seen = readAll(con);
  fs::remove_all(dir);
  EXPECT_EQ(seen, std::string("\x01\x02\x03\x04\x05\x06\x07"))
      << "stages seen under TCG: " << seen.size();
}

}  // namespace
}  // namespace nodegate
