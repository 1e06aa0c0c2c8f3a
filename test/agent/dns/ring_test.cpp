// The ring behind the accounting's verdict windows and the engine's recent traces: first in,
// first out across its wrap and its growth, and no allocation once it is full and rotating (what
// keeps their memory in one place after a burst).
#include "dns/ring.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace nodegate::dns {
namespace {

std::vector<int> contents(const Ring<int>& r) {
  return {r.begin(), r.end()};
}

TEST(Ring, FirstInFirstOutAcrossGrowthAndWrap) {
  Ring<int> r(40);
  for (int i = 0; i < 30; ++i) r.push_back(i);  // grows 16 -> 32
  for (int i = 0; i < 20; ++i) r.pop_front();
  for (int i = 30; i < 60; ++i) r.push_back(i);  // wraps, grows to 40
  EXPECT_TRUE(r.full());
  std::vector<int> want;
  for (int i = 20; i < 60; ++i) want.push_back(i);
  EXPECT_EQ(contents(r), want);
  r.push_back(99);  // full: the caller must make room first
  EXPECT_EQ(contents(r), want);
  std::vector<int> backwards(r.rbegin(), r.rend());
  EXPECT_EQ(backwards, std::vector<int>(want.rbegin(), want.rend()));
  EXPECT_EQ(r.front(), 20);
  EXPECT_EQ(r.at(39), 59);
  for (int i = 60; i < 125; ++i) r.overwrite_back(i);  // each drops the oldest, past the wrap
  want.clear();
  for (int i = 85; i < 125; ++i) want.push_back(i);
  EXPECT_EQ(contents(r), want);
}

TEST(Ring, RotatingWhenFullStaysInItsOneAllocation) {
  Ring<int> r(512);
  for (int i = 0; i < 512; ++i) r.push_back(i);
  std::set<const int*> slots;
  for (int i = 0; i < 512; ++i) slots.insert(&r.at(static_cast<std::size_t>(i)));
  const int* lo = *slots.begin();
  EXPECT_EQ(*slots.rbegin() - lo, 511) << "the slots are one array";
  for (int i = 512; i < 100'000; ++i) {
    r.pop_front();
    r.push_back(i);
    ASSERT_TRUE(slots.count(&r.at(511))) << "a rotation moved to new memory at " << i;
  }
  EXPECT_EQ(r.front(), 100'000 - 512);
}

// The engine's recent traces: a full ring drops its oldest by copying the newest into that slot,
// so the slot's storage (here a string's) is reused, not freed and allocated elsewhere.
TEST(Ring, OverwritingAFullRingReusesTheOldestSlotsStorage) {
  Ring<std::string> r(4);
  const std::string text(100, 'x');  // past the small-string buffer: on the heap
  for (int i = 0; i < 4; ++i) r.overwrite_back(text);
  std::set<const char*> storage;
  for (const auto& s : r) storage.insert(s.data());
  ASSERT_EQ(storage.size(), 4u);
  for (int i = 0; i < 1000; ++i) {
    const std::string next(100, static_cast<char>('a' + i % 26));
    r.overwrite_back(next);
    ASSERT_EQ(r.size(), 4u);
    ASSERT_TRUE(storage.count(r.back().data())) << "a copy allocated new storage at " << i;
    ASSERT_EQ(r.back(), next);
  }
}

TEST(Ring, PopReleasesWhatTheElementOwnedAndEmptyIsSafe) {
  auto owned = std::make_shared<int>(7);
  Ring<std::shared_ptr<int>> r(4);
  r.push_back(owned);
  EXPECT_EQ(owned.use_count(), 2);
  r.pop_front();
  EXPECT_EQ(owned.use_count(), 1);
  EXPECT_TRUE(r.empty());
  r.pop_front();  // nothing to pop: no effect
  EXPECT_TRUE(r.empty());
  Ring<int> none(0);
  none.push_back(1);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace nodegate::dns
