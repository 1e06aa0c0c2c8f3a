// The production Exec seam on real processes (/bin/sh): exit codes and signals as they are, one
// deadline for the whole run even after the command closed its pipes, bounded output, no
// process of the command's group left behind, and shutdown() for the agent's stop.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "nodegate/seams.h"

namespace nodegate {

std::shared_ptr<Exec> makeSysExec();  // probes/sys/exec.cpp

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Result<ExecResult> sh(Exec& exec, const std::string& script, std::chrono::milliseconds timeout,
                      std::size_t max_output = 1 << 20) {
  return exec.run({"/bin/sh", "-c", script}, timeout, max_output);
}

// A pid written by the script to a file, once it is there.
pid_t pidFrom(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

bool alive(pid_t pid) {
  // A zombie still answers kill(0): look at the state in /proc instead.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

std::string tmpFile(const char* name) {
  return "/tmp/nodegate-exec-test-" + std::to_string(::getpid()) + "-" + name;
}

TEST(SysExec, ExitCodesSignalsAndOutput) {
  auto exec = makeSysExec();
  auto ok = sh(*exec, "echo out; echo err >&2; exit 5", 5s);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->exit_code, 5);
  EXPECT_EQ(ok->signal, 0);
  EXPECT_EQ(ok->out, "out\n");
  EXPECT_EQ(ok->err, "err\n");
  EXPECT_FALSE(ok->timed_out);

  auto segv = sh(*exec, "echo '{}'; kill -SEGV $$", 5s);
  ASSERT_TRUE(segv.ok());
  EXPECT_EQ(segv->exit_code, -1);
  EXPECT_EQ(segv->signal, SIGSEGV);
  EXPECT_EQ(segv->out, "{}\n");

  auto missing = exec->run({"/nonexistent/nodegate-no-such-program"}, 5s);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 127);
}

TEST(SysExec, DeadlineHoldsAfterTheCommandClosesItsPipes) {
  auto exec = makeSysExec();
  const std::string pidfile = tmpFile("detached");
  const auto t0 = Clock::now();
  auto r = sh(*exec, "exec >&- 2>&-; sleep 600 & echo $! >" + pidfile + "; sleep 600", 300ms);
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_LT(took, 2s);
  const pid_t child = pidFrom(pidfile);
  ASSERT_GT(child, 0);
  // The group's SIGKILL is sent before run() returns; a loaded machine may take a moment to
  // deliver it to a process that is not ours to reap.
  for (int i = 0; i < 100 && alive(child); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(child)) << "the command's background child outlived the deadline";
  ::unlink(pidfile.c_str());
}

TEST(SysExec, NoStrayOfTheGroupOutlivesANormalExit) {
  // The command exits at once but leaves a child behind in its group, holding no pipe.
  auto exec = makeSysExec();
  const std::string pidfile = tmpFile("stray");
  auto r = sh(*exec, "sleep 600 >/dev/null 2>&1 & echo $! >" + pidfile + "; echo done", 5s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out, "done\n");
  EXPECT_FALSE(r->timed_out);
  const pid_t stray = pidFrom(pidfile);
  ASSERT_GT(stray, 0);
  for (int i = 0; i < 100 && alive(stray); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(stray));
  ::unlink(pidfile.c_str());
}

TEST(SysExec, AStrayHoldingThePipesDoesNotHoldTheRun) {
  // The command exits, its background child keeps stdout open: the run ends with the command.
  auto exec = makeSysExec();
  const auto t0 = Clock::now();
  auto r = sh(*exec, "sleep 600 & echo report", 10s);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->out, "report\n");
  EXPECT_FALSE(r->timed_out);
}

TEST(SysExec, OutputOverTheLimitIsCutAndKilled) {
  auto exec = makeSysExec();
  auto r = sh(*exec, "yes nodegate", 10s, 64 * 1024);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->out.size(), 64u * 1024);
  EXPECT_EQ(r->signal, SIGKILL);
}

TEST(SysExec, ShutdownKillsRunningCommandsAndRefusesNewOnes) {
  auto exec = makeSysExec();
  Result<ExecResult> r = Error{};
  const auto t0 = Clock::now();
  std::thread waiter([&] { r = sh(*exec, "sleep 600", 60s); });
  std::this_thread::sleep_for(200ms);
  exec->shutdown();
  waiter.join();
  EXPECT_LT(Clock::now() - t0, 5s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->signal, SIGKILL);
  auto after = sh(*exec, "true", 1s);
  EXPECT_FALSE(after.ok());
}

}  // namespace
}  // namespace nodegate
