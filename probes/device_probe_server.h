// The helper's side of the device-probe protocol (device_probe.h): the fixed work behind each
// operation (Service) and the unix socket that serves it (Server). `nodegate device-probe`
// (agent/cli/device_probe_command.cpp) wires the two together.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "device_probe.h"
#include "nodegate/config.h"
#include "nodegate/host_root.h"
#include "nodegate/seams.h"

namespace nodegate::devprobe {

// The work of each operation, on the host root and the lvm command the helper was started with;
// a request cannot change either. The device checks are the agent's own probes, run as they
// are; the lvm operations are LocalLvmAccess's two steps.
class Service {
 public:
  Service(HostRoot host, const std::string& lvm_command, std::shared_ptr<DeviceIo> io,
          std::shared_ptr<Exec> exec);
  // Thread-safe: the server calls it from one thread per connection.
  Result<nlohmann::json> handle(const Request& req) const;

 private:
  HostRoot host_;
  Config config_;  // defaults, plus checks.lvm.command
  std::shared_ptr<DeviceIo> io_;
  std::shared_ptr<Exec> exec_;
};

struct ServerLimits {
  std::size_t max_connections = 4;  // served at once; more are answered "busy" and closed
  std::chrono::milliseconds request_deadline = kRequestDeadline;
  std::chrono::milliseconds reply_deadline = kReplyDeadline;
};

// Listens on a unix socket (mode 0600; a stale socket of a dead helper is replaced, a live one
// is an error) and answers each connection on a thread of its own: peer credentials first (root
// or our own uid), then one framed request under the request deadline, the handler, one framed
// reply under the reply deadline, close. At most max_connections requests are read or handled at
// once (a reply being written no longer counts). Every refusal is an error reply and a log line,
// and the server goes on.
class Server {
 public:
  using Handler = std::function<Result<nlohmann::json>(const Request&)>;
  static Result<std::unique_ptr<Server>> start(const std::string& socket_path, Handler handler,
                                               ServerLimits limits = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Stops accepting, removes the socket, and waits up to a second for connections in progress.
  void stop();

 private:
  // What connection threads share with the server; they hold it, so a connection still running
  // when stop() gives up waiting never outlives what it uses.
  struct Shared {
    Handler handler;
    ServerLimits limits;
    std::mutex mu;
    std::condition_variable idle;
    std::size_t active = 0;
  };
  Server(std::string path, int listen_fd, int wake_r, int wake_w, std::shared_ptr<Shared> shared);
  void acceptLoop();
  static void admit(const std::shared_ptr<Shared>& shared, int fd);
  // Reads and handles the connection's request: the reply to send (empty: none).
  static std::string answer(Shared& shared, int fd);
  std::string path_;
  int listen_fd_, wake_r_, wake_w_;
  std::shared_ptr<Shared> shared_;
  std::thread acceptor_;
  std::atomic<bool> stopped_{false};
};

}  // namespace nodegate::devprobe
