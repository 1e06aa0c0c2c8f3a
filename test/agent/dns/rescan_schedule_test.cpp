// The debounce and safety-net cadence of hop discovery (agent/dns/rescan_schedule.h), on a clock
// the test moves by hand.
#include "dns/rescan_schedule.h"

#include <gtest/gtest.h>

namespace nodegate::dns {
namespace {

using namespace std::chrono_literals;
using Clock = RescanSchedule::Clock;

// Runs the schedule like the service's worker does, checking every millisecond, and returns how
// many passes ran in [t0, t0 + span) given events at the listed offsets.
int passes(RescanSchedule& s, Clock::time_point t0, std::vector<std::chrono::milliseconds> events,
           std::chrono::milliseconds span, int* by_event = nullptr) {
  int n = 0, ev = 0;
  std::size_t next = 0;
  for (auto t = 0ms; t < span; t += 1ms) {
    while (next < events.size() && events[next] <= t) {
      s.event(t0 + t);
      ++next;
    }
    if (s.due(t0 + t)) {
      ev += s.eventDue(t0 + t);
      s.begin(t0 + t);
      ++n;
    }
  }
  if (by_event) *by_event = ev;
  return n;
}

TEST(RescanSchedule, NothingHappensBeforeThePeriod) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0);
  EXPECT_FALSE(s.due(t0 + 29s));
  EXPECT_TRUE(s.due(t0 + 30s));
  EXPECT_FALSE(s.eventDue(t0 + 30s));  // periodic, not an event
  EXPECT_EQ(s.next(), t0 + 30s);
}

TEST(RescanSchedule, AnEventRunsAPassAfterTheDebounce) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0 - 10s);  // last pass long ago: no gap to wait for
  s.event(t0);
  EXPECT_FALSE(s.due(t0 + 49ms));
  EXPECT_TRUE(s.eventDue(t0 + 50ms));
  EXPECT_EQ(s.next(), t0 + 50ms);
  s.begin(t0 + 50ms);
  EXPECT_FALSE(s.due(t0 + 51ms));
  // The pass also restarts the safety net's period.
  EXPECT_EQ(s.next(), t0 + 50ms + 30s);
}

TEST(RescanSchedule, ABurstOfTwentyEventsIsOnePass) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0 - 10s);
  std::vector<std::chrono::milliseconds> burst;
  for (int i = 0; i < 20; ++i) burst.push_back(std::chrono::milliseconds(i * 2));
  int by_event = 0;
  EXPECT_EQ(passes(s, t0, burst, 2000ms, &by_event), 1);
  EXPECT_EQ(by_event, 1);
}

TEST(RescanSchedule, AnEventDuringAPassAsksForAnother) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0 - 10s);
  s.event(t0);
  s.begin(t0 + 50ms);  // the pass starts, then a link appears while it reads
  s.event(t0 + 60ms);
  EXPECT_FALSE(s.due(t0 + 299ms));  // the gap since the last start holds it back
  EXPECT_TRUE(s.eventDue(t0 + 300ms));
}

TEST(RescanSchedule, AStormIsBoundedByTheMinimumGap) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0 - 10s);
  std::vector<std::chrono::milliseconds> storm;
  for (int i = 0; i < 1000; ++i) storm.push_back(std::chrono::milliseconds(i));  // 1 kHz for 1 s
  int n = passes(s, t0, storm, 1000ms);
  EXPECT_GE(n, 3);
  EXPECT_LE(n, 4);  // 1 s / 250 ms
}

TEST(RescanSchedule, ANewPeriodCountsFromWhenItIsSet) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 1h, t0);
  s.setPeriodic(2s, t0);
  EXPECT_TRUE(s.due(t0 + 2s));
  EXPECT_EQ(s.periodic(), 2s);
  // Lengthened once events are known to work: the start-up cadence's deadline does not linger.
  RescanSchedule l(50ms, 250ms, 2s, t0);
  l.setPeriodic(30s, t0 + 10ms);
  EXPECT_FALSE(l.due(t0 + 2s));
  EXPECT_TRUE(l.due(t0 + 10ms + 30s));
}

DiscoveryWork netnsChanged(std::uint64_t ino) {
  DiscoveryWork w;
  w.netns.insert(ino);
  return w;
}

// A targeted pass (one netns, one process) costs what changed: it waits for the debounce only,
// not for the gap that bounds full passes, and does not stand in for the safety net.
TEST(RescanSchedule, ATargetedPassWaitsForTheDebounceAlone) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0);
  s.event(t0);  // a full one
  s.begin(t0 + 50ms);
  s.event(t0 + 60ms, netnsChanged(7));
  EXPECT_FALSE(s.due(t0 + 109ms));
  EXPECT_TRUE(s.eventDue(t0 + 110ms));
  auto w = s.begin(t0 + 110ms);
  EXPECT_FALSE(w.full);
  EXPECT_EQ(w.netns, std::set<std::uint64_t>{7});
  EXPECT_EQ(s.next(), t0 + 50ms + 30s);  // the safety net still counts from the full pass
}

TEST(RescanSchedule, APassTakesEveryEventSinceTheLastAndTheLaterOneWinsForAPid) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0);
  DiscoveryWork exec, exit_, host;
  exec.pids[42] = false;
  exit_.pids[42] = true;
  host.host = true;
  s.event(t0, exit_);
  s.event(t0 + 10ms, exec);  // pid 42 reused
  s.event(t0 + 20ms, netnsChanged(9));
  s.event(t0 + 30ms, host);
  s.event(t0 + 40ms, DiscoveryWork{});  // names nothing: no pass for it
  ASSERT_TRUE(s.eventDue(t0 + 50ms));
  auto w = s.begin(t0 + 50ms);
  EXPECT_FALSE(w.full);
  EXPECT_TRUE(w.host);
  EXPECT_EQ(w.pids, (std::map<int, bool>{{42, false}}));
  EXPECT_EQ(w.netns, std::set<std::uint64_t>{9});
  EXPECT_FALSE(s.due(t0 + 10s));
  EXPECT_TRUE(s.begin(t0 + 10s).empty());
}

TEST(RescanSchedule, TheSafetyNetIsAFullPassAndAbsorbsWhatIsPending) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0);
  s.event(t0 + 30s - 10ms, netnsChanged(3));
  ASSERT_TRUE(s.due(t0 + 30s));
  auto w = s.begin(t0 + 30s);
  EXPECT_TRUE(w.full);
  EXPECT_FALSE(s.due(t0 + 31s));  // the targeted work went with it
  EXPECT_EQ(s.next(), t0 + 60s);
}

TEST(RescanSchedule, ATargetedPassThatTurnsFullWaitsForTheGap) {
  auto t0 = Clock::now();
  RescanSchedule s(50ms, 250ms, 30s, t0);
  s.event(t0);
  s.begin(t0 + 50ms);
  s.event(t0 + 60ms, netnsChanged(1));
  s.event(t0 + 70ms);  // lost events: a full pass
  EXPECT_FALSE(s.due(t0 + 299ms));
  ASSERT_TRUE(s.eventDue(t0 + 300ms));
  EXPECT_TRUE(s.begin(t0 + 300ms).full);
}

}  // namespace
}  // namespace nodegate::dns
