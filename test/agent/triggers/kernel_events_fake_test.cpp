// KernelEvents through the udev and netlink seams: which events fire which triggers, what is
// counted, listeners, sources that fail to open, and a prompt stop; no kernel involved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <prometheus/text_serializer.h>

#include "fake_sources.h"
#include "nodegate/probe.h"
#include "triggers/kernel_events.h"

namespace nodegate {
namespace {

using namespace std::chrono_literals;
using testing::FakeNetlink;
using testing::FakeUdev;
using ::testing::HasSubstr;

KernelEvent uevent(std::string subsystem, std::string sysname, std::string action,
                   std::string kvm_event = {}) {
  return KernelEvent{std::move(subsystem), std::move(sysname), std::move(action),
                     std::move(kvm_event), false};
}
KernelEvent rtnl(std::string what) {
  KernelEvent e;
  e.subsystem = std::move(what);
  return e;
}

// Collects the trigger bits the sink receives.
struct Bits {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint32_t> got;
  KernelEvents::Sink sink() {
    return [this](std::uint32_t b) {
      std::lock_guard l(mu);
      got.push_back(b);
      cv.notify_all();
    };
  }
  // Waits for the n-th batch; returns its bits (0 on timeout).
  std::uint32_t wait(std::size_t n) {
    std::unique_lock l(mu);
    cv.wait_for(l, 2s, [&] { return got.size() >= n; });
    return got.size() >= n ? got[n - 1] : 0;
  }
};

struct Fixture {
  std::shared_ptr<FakeUdev> udev = std::make_shared<FakeUdev>();
  std::shared_ptr<FakeNetlink> netlink = std::make_shared<FakeNetlink>();
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  Bits bits;
  std::unique_ptr<KernelEvents> events;

  void start(HostRoot host = HostRoot("/nonexistent-host")) {
    Seams seams;
    seams.udev = udev;
    seams.netlink = netlink;
    auto ev = KernelEvents::start(host, bits.sink(), registry, seams);
    ASSERT_TRUE(ev.ok()) << ev.error().message;
    events = std::move(ev).value();
  }
  std::string metrics() { return prometheus::TextSerializer().Serialize(registry->Collect()); }
};

TEST(KernelEventsSeams, UeventsFireTheirSubsystemsTrigger) {
  Fixture f;
  f.start();
  ASSERT_NE(f.udev->kernel, nullptr);
  f.udev->kernel->push({uevent("misc", "vhost-net", "add")});
  EXPECT_EQ(f.bits.wait(1), kTriggerUdevMisc);
  f.udev->udev->push({uevent("block", "sda", "change"), uevent("net", "tap0", "add")});
  EXPECT_EQ(f.bits.wait(2), kTriggerUdevBlock | kTriggerNetLink);
  f.udev->kernel->push({uevent("usb", "1-1", "add")});  // not watched: no batch at all
  f.udev->kernel->push({uevent("misc", "tun", "remove")});
  EXPECT_EQ(f.bits.wait(3), kTriggerUdevMisc);
  EXPECT_THAT(
      f.metrics(),
      HasSubstr("nodegate_agent_kernel_events_total{source=\"udev\",subsystem=\"block\"} 1"));
  EXPECT_THAT(
      f.metrics(),
      HasSubstr("nodegate_agent_kernel_events_total{source=\"uevent\",subsystem=\"misc\"} 2"));
}

TEST(KernelEventsSeams, KvmLifecycleNoticesTriggerNothing) {
  Fixture f;
  f.start();
  // A VM created on the node is a "change" of kvm with EVENT=create: no re-probe loop.
  f.udev->kernel->push(
      {uevent("misc", "kvm", "change", "create"), uevent("misc", "kvm", "change", "destroy")});
  f.udev->kernel->push({uevent("block", "loop0", "add")});
  EXPECT_EQ(f.bits.wait(1), kTriggerUdevBlock);          // the first batch fired nothing
  f.udev->kernel->push({uevent("misc", "kvm", "add")});  // the device itself: a real change
  EXPECT_EQ(f.bits.wait(2), kTriggerUdevMisc);
}

TEST(KernelEventsSeams, LinkEventsAndOverflowFireNetlink) {
  Fixture f;
  f.start();
  ASSERT_TRUE(f.events->watchesLinks());
  f.netlink->events->push({rtnl("newlink"), rtnl("delnsid")});
  EXPECT_EQ(f.bits.wait(1), kTriggerNetLink);
  KernelEvent lost;
  lost.overflow = true;  // a full socket lost messages: the links may have changed
  f.netlink->events->push({lost});
  EXPECT_EQ(f.bits.wait(2), kTriggerNetLink);
  EXPECT_THAT(f.metrics(), HasSubstr("{source=\"rtnetlink\",subsystem=\"newlink\"} 1"));
  EXPECT_THAT(f.metrics(), HasSubstr("{source=\"rtnetlink\",subsystem=\"delnsid\"} 1"));
}

TEST(KernelEventsSeams, ListenersGetEveryBatchUntilRemoved) {
  Fixture f;
  f.start();
  Bits extra;
  int id = f.events->addListener(extra.sink());
  f.netlink->events->push({rtnl("newlink")});
  EXPECT_EQ(extra.wait(1), kTriggerNetLink);
  f.events->removeListener(id);
  f.udev->kernel->push({uevent("misc", "kvm", "add")});
  EXPECT_EQ(f.bits.wait(2), kTriggerUdevMisc);
  std::lock_guard l(extra.mu);
  EXPECT_EQ(extra.got.size(), 1u);
}

TEST(KernelEventsSeams, FailedSourcesAreSkippedAndNoneAtAllIsAnError) {
  Fixture f;
  f.udev->fail = true;
  f.start();  // netlink alone is enough
  EXPECT_TRUE(f.events->watchesLinks());
  f.events.reset();

  Fixture none;
  none.udev->fail = true;
  none.netlink->fail = true;
  Seams seams;
  seams.udev = none.udev;
  seams.netlink = none.netlink;
  auto ev = KernelEvents::start(HostRoot("/nonexistent-host"), none.bits.sink(), nullptr, seams);
  ASSERT_FALSE(ev.ok());
  EXPECT_THAT(ev.error().message, HasSubstr("failed to open any kernel event source"));
}

TEST(KernelEventsSeams, StopsPromptly) {
  Fixture f;
  f.start();
  auto t0 = std::chrono::steady_clock::now();
  f.events.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
}

}  // namespace
}  // namespace nodegate
