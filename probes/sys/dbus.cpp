#include "sys/dbus.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <sdbus-c++/sdbus-c++.h>

#include "nodegate/log.h"

namespace nodegate {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr auto kCallerSlack = std::chrono::milliseconds(250);
constexpr auto kBackoffMin = std::chrono::milliseconds(250);
constexpr auto kBackoffMax = std::chrono::milliseconds(30000);

// Runs on the worker, with the live connection or with nullptr and the reason there is none.
using Job = std::function<void(sdbus::IConnection*, const std::string& why_not)>;

struct QueuedJob {
  Job fn;
  SteadyClock::time_point deadline;
};

struct Watch {
  std::string path;
  std::string interface;
  std::function<void()> fn;
};

// Everything the worker touches, owned jointly by the client and the worker, so that a worker
// stuck in sd-bus's handshake with a wedged daemon can outlive a client that gave up on it.
struct Shared {
  std::string address;
  std::chrono::milliseconds timeout{1000};
  int wake_fd = -1;

  std::mutex mu;
  std::condition_variable cv;  // call completions and worker exit
  std::deque<QueuedJob> jobs;
  std::vector<Watch> watches;
  bool watches_changed = false;
  bool stop = false;
  bool exited = false;

  // Held while a watch callback runs, so the client's destructor can wait out a running one and
  // no callback runs after the client is gone.
  std::mutex callback_mu;

  ~Shared() {
    if (wake_fd >= 0) ::close(wake_fd);
  }
  void wake() const {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
  }
  void fire(const std::function<void()>& fn) {
    std::lock_guard cb(callback_mu);
    {
      std::lock_guard lk(mu);
      if (stop) return;
    }
    fn();
  }
  void fireAll() {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard lk(mu);
      for (const auto& w : watches) fns.push_back(w.fn);
    }
    for (const auto& fn : fns) fire(fn);
  }
};

// D-Bus error names the probes tell apart, as errno values so callers need no D-Bus knowledge.
int errnoOf(const sdbus::Error& e) {
  const std::string& n = e.getName();
  if (n == "org.freedesktop.DBus.Error.ServiceUnknown" ||
      n == "org.freedesktop.DBus.Error.NameHasNoOwner")
    return ESRCH;
  if (n == "org.freedesktop.DBus.Error.Timeout" || n == "org.freedesktop.DBus.Error.NoReply" ||
      n == "org.freedesktop.DBus.Error.TimedOut")
    return ETIMEDOUT;
  if (n == "org.freedesktop.DBus.Error.UnknownObject" ||
      n == "org.freedesktop.DBus.Error.UnknownInterface" ||
      n == "org.freedesktop.DBus.Error.UnknownMethod" ||
      n == "org.freedesktop.DBus.Error.UnknownProperty")
    return ENOENT;
  if (n == "org.freedesktop.DBus.Error.AccessDenied") return EACCES;
  return EIO;
}

std::string describe(const sdbus::Error& e) {
  std::string msg = e.getMessage().empty() ? std::string(e.what()) : e.getMessage();
  return e.getName().empty() ? msg : e.getName() + ": " + msg;
}

DBusValue toValue(const sdbus::Variant& v) {
  DBusValue out;
  out.signature = v.peekValueType();
  const std::string& t = out.signature;
  if (t == "b")
    out.value = v.get<bool>();
  else if (t == "s")
    out.value = v.get<std::string>();
  else if (t == "o")
    out.value = std::string(v.get<sdbus::ObjectPath>());
  else if (t == "y")
    out.value = std::uint64_t{v.get<std::uint8_t>()};
  else if (t == "q")
    out.value = std::uint64_t{v.get<std::uint16_t>()};
  else if (t == "u")
    out.value = std::uint64_t{v.get<std::uint32_t>()};
  else if (t == "t")
    out.value = std::uint64_t{v.get<std::uint64_t>()};
  else if (t == "n")
    out.value = std::int64_t{v.get<std::int16_t>()};
  else if (t == "i")
    out.value = std::int64_t{v.get<std::int32_t>()};
  else if (t == "x")
    out.value = std::int64_t{v.get<std::int64_t>()};
  else if (t == "d")
    out.value = v.get<double>();
  return out;
}

std::string matchRule(const Watch& w) {
  // No sender= clause: the owner's unique name changes when the service restarts, and a match
  // on a well-known name is not something sd-bus can check on the client side.
  return "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',"
         "path='" +
         w.path + "',arg0='" + w.interface + "'";
}

void workerLoop(const std::shared_ptr<Shared>& s) {
  std::unique_ptr<sdbus::IConnection> conn;
  std::vector<sdbus::Slot> matches;
  std::string down_reason = "failed to connect to " + s->address + ": not connected yet";
  auto backoff = kBackoffMin;
  auto next_attempt = SteadyClock::now();
  bool ever_connected = false;
  bool reported_down = false;  // warn once per outage, not on every retry

  auto installMatches = [&] {
    std::vector<Watch> ws;
    {
      std::lock_guard lk(s->mu);
      ws = s->watches;
      s->watches_changed = false;
    }
    matches.clear();
    for (const auto& w : ws) {
      auto fn = w.fn;
      matches.push_back(conn->addMatch(matchRule(w), [s, fn](sdbus::Message&) { s->fire(fn); }));
    }
  };
  auto markDown = [&](std::string why) {
    matches.clear();
    conn.reset();
    down_reason = std::move(why);
    next_attempt = SteadyClock::now() + backoff;
    backoff = std::min(backoff * 2, kBackoffMax);
  };

  for (;;) {
    std::deque<QueuedJob> jobs;
    bool have_watches = false, watches_changed = false;
    {
      std::lock_guard lk(s->mu);
      if (s->stop) break;
      jobs.swap(s->jobs);
      have_watches = !s->watches.empty();
      watches_changed = s->watches_changed;
    }

    if (!conn && (have_watches || !jobs.empty()) && SteadyClock::now() >= next_attempt) {
      try {
        conn = sdbus::createSessionBusConnectionWithAddress(s->address);
        conn->setMethodCallTimeout(s->timeout);
        installMatches();
        backoff = kBackoffMin;
        if (ever_connected || reported_down) {
          log::info("dbus connection re-established", {{"address", s->address}});
          s->fireAll();
        }
        ever_connected = true;
        reported_down = false;
        watches_changed = false;
      } catch (const sdbus::Error& e) {
        markDown("failed to connect to " + s->address + ": " + describe(e));
        if (!reported_down) {
          log::warn("dbus connection failed", {{"address", s->address},
                                               {"cause", describe(e)},
                                               {"retry_ms", std::to_string(backoff.count() / 2)}});
          reported_down = true;
        }
      }
    }
    if (conn && watches_changed) {
      try {
        installMatches();
      } catch (const sdbus::Error& e) {
        markDown("failed to subscribe on " + s->address + ": " + describe(e));
      }
    }

    for (auto& job : jobs) {
      // Its caller has already given up and reported a timeout; sending it now would only
      // queue more work behind a slow peer.
      if (SteadyClock::now() > job.deadline) continue;
      job.fn(conn.get(), down_reason);
    }

    if (conn) {
      try {
        while (conn->processPendingRequest()) {
        }
      } catch (const sdbus::Error& e) {
        markDown("lost connection to " + s->address + ": " + describe(e));
        log::warn("dbus connection lost", {{"address", s->address}, {"cause", describe(e)}});
        reported_down = true;
        s->fireAll();
      }
    }

    pollfd fds[2] = {{s->wake_fd, POLLIN, 0}, {-1, 0, 0}};
    nfds_t nfds = 1;
    int timeout_ms = -1;
    if (conn) {
      auto pd = conn->getEventLoopPollData();
      fds[1] = {pd.fd, pd.events, 0};
      nfds = 2;
      timeout_ms = pd.getPollTimeout();
    } else if (have_watches) {
      auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt - SteadyClock::now());
      timeout_ms = static_cast<int>(std::max<std::int64_t>(0, wait.count()));
    }
    int r = ::poll(fds, nfds, timeout_ms);
    if (r > 0 && (fds[0].revents & POLLIN)) {
      std::uint64_t n = 0;
      [[maybe_unused]] ssize_t got = ::read(s->wake_fd, &n, sizeof n);
    }
  }

  matches.clear();
  conn.reset();
  std::lock_guard lk(s->mu);
  s->exited = true;
  s->cv.notify_all();
}

class SdBusClient final : public DBusClient {
 public:
  SdBusClient(std::string address, std::chrono::milliseconds timeout)
      : s_(std::make_shared<Shared>()) {
    s_->address = std::move(address);
    s_->timeout = timeout;
    s_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s_->wake_fd < 0) {
      // Without a wake-up fd the worker could not be reached; every call reports this instead.
      start_error_ = errnoError(errno, "create eventfd for the dbus worker");
      return;
    }
    worker_ = std::thread([s = s_] { workerLoop(s); });
  }

  ~SdBusClient() override {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lk(s_->mu);
      s_->stop = true;
    }
    s_->wake();
    {
      // Wait out a callback in flight; none starts after this (stop is set).
      std::lock_guard cb(s_->callback_mu);
      std::lock_guard lk(s_->mu);
      s_->watches.clear();
    }
    std::unique_lock lk(s_->mu);
    bool exited = s_->cv.wait_for(lk, s_->timeout + kCallerSlack, [&] { return s_->exited; });
    lk.unlock();
    if (exited) {
      worker_.join();
    } else {
      log::warn("dbus worker still busy at shutdown, leaving it behind",
                {{"address", s_->address}});
      worker_.detach();
    }
  }

  Result<DBusProperties> getAll(const std::string& service, const std::string& path,
                                const std::string& interface) override {
    auto timeout_us = usec();
    return submit<DBusProperties>(
        "read " + interface + " properties of " + service + " on " + s_->address,
        [=](sdbus::IConnection& c) -> Result<DBusProperties> {
          auto proxy = sdbus::createProxy(c, service, path);
          auto call = proxy->createMethodCall("org.freedesktop.DBus.Properties", "GetAll");
          call << interface;
          auto reply = proxy->callMethod(call, timeout_us);
          std::map<std::string, sdbus::Variant> raw;
          reply >> raw;
          DBusProperties out;
          for (const auto& [k, v] : raw) out.emplace(k, toValue(v));
          return out;
        });
  }

  Result<std::string> callForPath(const std::string& service, const std::string& path,
                                  const std::string& interface, const std::string& method,
                                  const std::string& arg) override {
    auto timeout_us = usec();
    return submit<std::string>(
        "call " + interface + "." + method + "(" + arg + ") on " + service + " on " + s_->address,
        [=](sdbus::IConnection& c) -> Result<std::string> {
          auto proxy = sdbus::createProxy(c, service, path);
          auto call = proxy->createMethodCall(interface, method);
          call << arg;
          auto reply = proxy->callMethod(call, timeout_us);
          sdbus::ObjectPath out;
          reply >> out;
          return std::string(out);
        });
  }

  void watchProperties(const std::string& path, const std::string& interface,
                       std::function<void()> fn) override {
    {
      std::lock_guard lk(s_->mu);
      s_->watches.push_back({path, interface, std::move(fn)});
      s_->watches_changed = true;
    }
    if (s_->wake_fd >= 0) s_->wake();
  }

 private:
  std::uint64_t usec() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(s_->timeout).count());
  }

  template <typename T>
  Result<T> submit(const std::string& what, std::function<Result<T>(sdbus::IConnection&)> call) {
    if (start_error_) return *start_error_;
    struct Slot {
      std::optional<Result<T>> out;
    };
    auto slot = std::make_shared<Slot>();
    auto deadline = SteadyClock::now() + s_->timeout + kCallerSlack;
    std::weak_ptr<Shared> weak = s_;
    Job job = [weak, slot, call, what](sdbus::IConnection* c, const std::string& why_not) {
      auto s = weak.lock();
      if (!s) return;
      std::optional<Result<T>> r;
      if (!c) {
        r.emplace(Error{ENOTCONN, why_not});
      } else {
        try {
          r.emplace(call(*c));
        } catch (const sdbus::Error& e) {
          r.emplace(Error{errnoOf(e), "failed to " + what + ": " + describe(e)});
        } catch (const std::exception& e) {
          r.emplace(Error{EIO, "failed to " + what + ": " + e.what()});
        }
      }
      std::lock_guard lk(s->mu);
      slot->out = std::move(r);
      s->cv.notify_all();
    };
    {
      std::lock_guard lk(s_->mu);
      s_->jobs.push_back({std::move(job), deadline});
    }
    s_->wake();
    std::unique_lock lk(s_->mu);
    if (!s_->cv.wait_until(lk, deadline, [&] { return slot->out.has_value(); })) {
      return Error{ETIMEDOUT, "failed to " + what + ": no answer within " +
                                  std::to_string(s_->timeout.count()) + " ms"};
    }
    return std::move(*slot->out);
  }

  std::shared_ptr<Shared> s_;
  std::optional<Error> start_error_;
  std::thread worker_;
};

class SdBus final : public DBus {
 public:
  std::unique_ptr<DBusClient> client(const std::string& address,
                                     std::chrono::milliseconds timeout) override {
    return std::make_unique<SdBusClient>(address, timeout);
  }
};

}  // namespace

std::shared_ptr<DBus> makeSysDBus() {
  return std::make_shared<SdBus>();
}

}  // namespace nodegate
