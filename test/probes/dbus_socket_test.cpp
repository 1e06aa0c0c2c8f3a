// The D-Bus probes on a host without a bus socket: they answer at once from the missing socket,
// without starting a client (whose connection attempt would warn and schedule retries), and
// start one as soon as the socket exists, so the agent still connects when the bus comes up.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "node_services.h"
#include "time_sync.h"

namespace nodegate {
namespace {

// Counts clients; every call fails as an unreachable bus would.
class CountingDBus final : public DBus {
 public:
  int clients = 0;
  std::unique_ptr<DBusClient> client(const std::string&, std::chrono::milliseconds) override {
    ++clients;
    class Down final : public DBusClient {
     public:
      Result<DBusProperties> getAll(const std::string&, const std::string&,
                                    const std::string&) override {
        return Error{ENOTCONN, "failed to connect to the fake: down"};
      }
      Result<std::string> callForPath(const std::string&, const std::string&, const std::string&,
                                      const std::string&, const std::string&) override {
        return Error{ENOTCONN, "failed to connect to the fake: down"};
      }
      void watchProperties(const std::string&, const std::string&, std::function<void()>) override {
      }
    };
    return std::make_unique<Down>();
  }
};

class SyncedClock final : public KernelClock {
 public:
  Result<KernelTimex> adjtimex() override { return KernelTimex{0, 0, 1000, 100, 0}; }
};

class NoBusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodegate-nobus-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    sock_ = dir_ + "/bus socket";  // a space: the address escapes it, the check must unescape
    cfg_.set("time-sync", "bus", sock_);
    cfg_.set("node-services", "bus", sock_);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    std::filesystem::remove_all(dir_);
  }
  // A real unix socket file at sock_ (nobody answers on it; the probes only check it exists).
  void bindSocket() {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    ASSERT_LT(sock_.size(), sizeof a.sun_path);
    std::memcpy(a.sun_path, sock_.c_str(), sock_.size() + 1);
    ASSERT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  }
  static std::string evidence(const CheckResult& r, const std::string& source) {
    for (const auto& e : r.evidence)
      if (e.source == source) return e.observed;
    return "<none>";
  }

  std::string dir_, sock_;
  int fd_ = -1;
  Config cfg_;
  HostRoot host_{"/"};
  std::shared_ptr<CountingDBus> dbus_ = std::make_shared<CountingDBus>();
};

TEST(BusAddress, SocketPathOfAPlainUnixAddress) {
  EXPECT_EQ(busSocketPath("unix:path=/run/dbus/system_bus_socket"), "/run/dbus/system_bus_socket");
  EXPECT_EQ(busSocketPath("unix:path=/tmp/a%20b%2cc"), "/tmp/a b,c");
  // What probeBusAddress escapes comes back as it was.
  Config cfg;
  cfg.set("time-sync", "bus", "/tmp/odd dir/ü;x,y%");
  EXPECT_EQ(busSocketPath(probeBusAddress(HostRoot("/"), cfg, kTimeSyncBusSetting)),
            "/tmp/odd dir/ü;x,y%");
  EXPECT_EQ(busSocketPath(probeBusAddress(HostRoot("/host"), Config{}, kTimeSyncBusSetting)),
            "/host/run/dbus/system_bus_socket");
  // Other transports, more keys, fallbacks and broken escapes are for the connection to judge.
  EXPECT_FALSE(busSocketPath("unix:abstract=/tmp/dbus-x"));
  EXPECT_FALSE(busSocketPath("tcp:host=127.0.0.1,port=4000"));
  EXPECT_FALSE(busSocketPath("unix:path=/a,guid=0123"));
  EXPECT_FALSE(busSocketPath("unix:path=/a;unix:path=/b"));
  EXPECT_FALSE(busSocketPath("unix:path=/a%2"));
  EXPECT_FALSE(busSocketPath("unix:path=/a%zz"));
  EXPECT_FALSE(busSocketPath("unix:path=/a% 1"));
  EXPECT_FALSE(busSocketPath("unix:path="));
  EXPECT_FALSE(busSocketPath(""));
  EXPECT_FALSE(busSocketMissing("unix:abstract=/nonexistent"));
}

TEST_F(NoBusTest, MissingSocketIsAnErrorWithoutAClient) {
  const std::string address = probeBusAddress(host_, cfg_, kTimeSyncBusSetting);
  auto missing = busSocketMissing(address);
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->code, ENOTCONN);
  EXPECT_EQ(missing->message, "failed to connect to " + address + ": " + sock_ +
                                  " does not exist (no bus runs there)");
  // A path through a regular file is just as absent.
  std::ofstream(dir_ + "/file") << "x";
  EXPECT_TRUE(busSocketMissing("unix:path=" + dir_ + "/file/socket"));
  bindSocket();
  EXPECT_FALSE(busSocketMissing(address));
}

TEST_F(NoBusTest, TimeSyncAnswersFromTheKernelAlone) {
  TimeSyncProbe probe(dbus_, std::make_shared<SyncedClock>());
  ProbeContext ctx{host_, cfg_};
  auto r = probe.run(ctx);
  EXPECT_EQ(dbus_->clients, 0);
  EXPECT_EQ(r.status, Status::Warn);
  EXPECT_EQ(r.reason, "TimedateUnavailable");
  EXPECT_NE(evidence(r, "timedate1").find("does not exist"), std::string::npos)
      << evidence(r, "timedate1");

  // The bus appears: the next run connects (the agent's probes run every cycle).
  bindSocket();
  r = probe.run(ctx);
  EXPECT_EQ(dbus_->clients, 1);
  EXPECT_NE(evidence(r, "timedate1").find("the fake: down"), std::string::npos);
}

TEST_F(NoBusTest, NodeServicesUnknownForEveryUnit) {
  NodeServicesProbe probe(dbus_);
  ProbeContext ctx{host_, cfg_};
  auto r = probe.run(ctx);
  EXPECT_EQ(dbus_->clients, 0);
  EXPECT_EQ(r.status, Status::Unknown);
  EXPECT_EQ(r.reason, "UnitUnreadable");
  EXPECT_NE(r.message.find("does not exist (no bus runs there)"), std::string::npos) << r.message;
  EXPECT_NE(evidence(r, "kubelet.service"), "<none>");
  EXPECT_NE(evidence(r, "containerd.service"), "<none>");

  bindSocket();
  r = probe.run(ctx);
  EXPECT_EQ(dbus_->clients, 1);
  EXPECT_EQ(r.reason, "UnitUnreadable");
  EXPECT_NE(r.message.find("the fake: down"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace nodegate
