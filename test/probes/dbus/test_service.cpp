// A stand-in for systemd-timedated and systemd's manager on a private test bus: the parts of
// org.freedesktop.timedate1 and org.freedesktop.systemd1 that nodegate reads, plus a control
// interface (io.nodegate.Test at /io/nodegate/Test) through which tests change properties (with
// PropertiesChanged), slow answers down and make the service quit. Real dbus-daemon, real sd-bus
// on both ends; only the service's logic is ours.
//
//   nodegate_dbus_test_service --address ADDR [--no-timedate] [--no-systemd] [--wrong-types]
//       [--synced 0|1] [--ntp 0|1] [--timezone TZ] [--unit NAME=ACTIVE/SUB/NRESTARTS]...
//       [--delay-ms N]
// Prints "ready" on stdout once its names are owned.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <sdbus-c++/sdbus-c++.h>

namespace {

constexpr const char* kTimedate = "org.freedesktop.timedate1";
constexpr const char* kSystemd = "org.freedesktop.systemd1";
constexpr const char* kManager = "org.freedesktop.systemd1.Manager";
constexpr const char* kUnit = "org.freedesktop.systemd1.Unit";
constexpr const char* kService = "org.freedesktop.systemd1.Service";
constexpr const char* kControl = "io.nodegate.Test";

struct Unit {
  std::string name, load = "loaded", active = "active", sub = "running";
  std::uint32_t restarts = 0;
  std::unique_ptr<sdbus::IObject> object;
};

struct State {
  sdbus::IConnection* conn = nullptr;
  bool wrong_types = false;
  bool synced = true, ntp = true;
  std::string timezone = "UTC";
  std::uint32_t delay_ms = 0;
  std::map<std::string, Unit> units;
  std::unique_ptr<sdbus::IObject> timedate;

  // Sleeping in a getter blocks the service's only thread: exactly a service that answers slowly.
  void delay() const {
    if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
};

// systemd's bus_label_escape: every byte outside [A-Za-z0-9] becomes _xx.
std::string unitPath(const std::string& name) {
  std::string out = "/org/freedesktop/systemd1/unit/";
  for (unsigned char c : name) {
    if (std::isalnum(c)) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "_%02x", c);
      out += buf;
    }
  }
  return out;
}

Unit& unitObject(State& st, const std::string& name, bool known) {
  auto [it, inserted] = st.units.try_emplace(name);
  Unit& u = it->second;
  if (!inserted && u.object) return u;
  u.name = name;
  if (inserted && !known) {
    // What systemd answers for a unit file that does not exist.
    u.load = "not-found";
    u.active = "inactive";
    u.sub = "dead";
  }
  u.object = sdbus::createObject(*st.conn, unitPath(name));
  Unit* up = &u;
  State* sp = &st;
  u.object->registerProperty("Id").onInterface(kUnit).withGetter([up] { return up->name; });
  u.object->registerProperty("LoadState").onInterface(kUnit).withGetter([up] { return up->load; });
  u.object->registerProperty("ActiveState").onInterface(kUnit).withGetter([up, sp] {
    sp->delay();
    return up->active;
  });
  u.object->registerProperty("SubState").onInterface(kUnit).withGetter([up] { return up->sub; });
  if (name.size() > 8 && name.substr(name.size() - 8) == ".service") {
    if (st.wrong_types) {
      u.object->registerProperty("NRestarts").onInterface(kService).withGetter([up] {
        return std::to_string(up->restarts);
      });
    } else {
      u.object->registerProperty("NRestarts").onInterface(kService).withGetter([up] {
        return up->restarts;
      });
    }
  }
  u.object->finishRegistration();
  return u;
}

bool parseUnitArg(const std::string& arg, Unit& u) {
  auto eq = arg.find('='), s1 = arg.find('/'), s2 = arg.rfind('/');
  if (eq == std::string::npos || s1 == std::string::npos || s1 == s2) return false;
  u.name = arg.substr(0, eq);
  u.active = arg.substr(eq + 1, s1 - eq - 1);
  u.sub = arg.substr(s1 + 1, s2 - s1 - 1);
  u.restarts = static_cast<std::uint32_t>(std::stoul(arg.substr(s2 + 1)));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  State st;
  std::string address;
  bool with_timedate = true, with_systemd = true;
  std::map<std::string, Unit> initial;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "test-service: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--address")
      address = next();
    else if (a == "--no-timedate")
      with_timedate = false;
    else if (a == "--no-systemd")
      with_systemd = false;
    else if (a == "--wrong-types")
      st.wrong_types = true;
    else if (a == "--synced")
      st.synced = next() == "1";
    else if (a == "--ntp")
      st.ntp = next() == "1";
    else if (a == "--timezone")
      st.timezone = next();
    else if (a == "--delay-ms")
      st.delay_ms = static_cast<std::uint32_t>(std::stoul(next()));
    else if (a == "--unit") {
      Unit u;
      if (!parseUnitArg(next(), u)) {
        std::cerr << "test-service: --unit wants NAME=ACTIVE/SUB/NRESTARTS\n";
        return 2;
      }
      initial[u.name] = std::move(u);
    } else {
      std::cerr << "test-service: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (address.empty()) {
    std::cerr << "test-service: --address is required\n";
    return 2;
  }

  try {
    auto conn = sdbus::createSessionBusConnectionWithAddress(address);
    st.conn = conn.get();

    if (with_timedate) {
      st.timedate = sdbus::createObject(*conn, "/org/freedesktop/timedate1");
      if (st.wrong_types) {
        st.timedate->registerProperty("NTPSynchronized").onInterface(kTimedate).withGetter([&st] {
          st.delay();
          return std::string(st.synced ? "yes" : "no");
        });
      } else {
        st.timedate->registerProperty("NTPSynchronized").onInterface(kTimedate).withGetter([&st] {
          st.delay();
          return st.synced;
        });
      }
      st.timedate->registerProperty("NTP").onInterface(kTimedate).withGetter(
          [&st] { return st.ntp; });
      st.timedate->registerProperty("Timezone").onInterface(kTimedate).withGetter([&st] {
        return st.timezone;
      });
      st.timedate->finishRegistration();
    }

    std::unique_ptr<sdbus::IObject> manager;
    if (with_systemd) {
      for (auto& [name, u] : initial) {
        Unit& made = unitObject(st, name, true);
        made.active = u.active;
        made.sub = u.sub;
        made.restarts = u.restarts;
      }
      manager = sdbus::createObject(*conn, "/org/freedesktop/systemd1");
      manager->registerMethod("LoadUnit")
          .onInterface(kManager)
          .implementedAs([&st](const std::string& name) {
            st.delay();
            return sdbus::ObjectPath(unitPath(unitObject(st, name, false).name));
          });
      manager->finishRegistration();
    }

    auto control = sdbus::createObject(*conn, "/io/nodegate/Test");
    control->registerMethod("SetTimedate")
        .onInterface(kControl)
        .implementedAs([&st](bool synced, bool ntp, const std::string& tz) {
          st.synced = synced;
          st.ntp = ntp;
          st.timezone = tz;
          if (st.timedate)
            st.timedate->emitPropertiesChangedSignal(kTimedate,
                                                     {"NTPSynchronized", "NTP", "Timezone"});
        });
    control->registerMethod("SetUnit").onInterface(kControl).implementedAs(
        [&st](const std::string& name, const std::string& load, const std::string& active,
              const std::string& sub, std::uint32_t restarts) {
          Unit& u = unitObject(st, name, true);
          u.load = load;
          u.active = active;
          u.sub = sub;
          u.restarts = restarts;
          u.object->emitPropertiesChangedSignal(kUnit, {"LoadState", "ActiveState", "SubState"});
        });
    control->registerMethod("SetDelay")
        .onInterface(kControl)
        .implementedAs([&st](std::uint32_t ms) { st.delay_ms = ms; });
    control->registerMethod("Quit").onInterface(kControl).implementedAs(
        [&conn] { conn->leaveEventLoop(); });
    control->finishRegistration();

    conn->requestName(kControl);
    if (with_timedate) conn->requestName(kTimedate);
    if (with_systemd) conn->requestName(kSystemd);
    std::cout << "ready" << std::endl;
    conn->enterEventLoop();
  } catch (const sdbus::Error& e) {
    std::cerr << "test-service: " << e.getName() << ": " << e.getMessage() << "\n";
    return 1;
  }
  return 0;
}
