// Process events from the kernel's proc connector (NETLINK_CONNECTOR, CN_IDX_PROC): exec, comm
// change and exit of every process on the host, so hop discovery hears of a virt-launcher the
// moment it starts or stops instead of at the next periodic rescan.
//
// The connector only reports to listeners in the initial user, pid and network namespaces (the
// agent runs with hostPID and hostNetwork) with CAP_NET_ADMIN; anywhere else the kernel ignores
// the subscription without a word. start() therefore waits for the kernel's acknowledgement and
// fails with the reason when none comes, so the caller can fall back to periodic rescans.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "nodegate/result.h"

namespace nodegate::dns {

struct ProcessEvent {
  enum class Kind {
    Exec,  // pid called execve(): its comm is the new program's file name
    Comm,  // pid renamed itself (prctl PR_SET_NAME): comm holds the new name
    Exit,  // pid (a whole process, not a thread) exited
    Lost,  // the socket overflowed: events were lost, so anything may have happened
  };
  Kind kind = Kind::Lost;
  int pid = 0;       // thread group id (what /proc/<pid> names)
  std::string comm;  // Comm only
};

class ProcessEvents {
 public:
  using Sink = std::function<void(const ProcessEvent&)>;

  // Subscribes and starts the reader thread. sink runs on that thread and must return quickly.
  static Result<std::unique_ptr<ProcessEvents>> start(
      Sink sink, std::chrono::milliseconds ack_timeout = std::chrono::milliseconds(500));
  ~ProcessEvents();  // unsubscribes and joins the thread
  ProcessEvents(const ProcessEvents&) = delete;
  ProcessEvents& operator=(const ProcessEvents&) = delete;

  struct Impl;

 private:
  ProcessEvents() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodegate::dns
