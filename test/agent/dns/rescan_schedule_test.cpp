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

}  // namespace
}  // namespace nodegate::dns
