// `nodegate device-probe --socket PATH`: the privileged helper of privilege separation. It runs
// in a second container of the chart's pod (privileged, so its device cgroup allows /dev/kvm,
// /dev/vhost-net, tun and block devices; no service-account token; read-only root) and does
// nothing but the fixed device work of devprobe::Service for whoever connects as root to its
// socket in the pod's shared emptyDir. Before it serves it takes itself out of the network
// (a network namespace of its own) and sets no_new_privs, so even a bug in it reaches no network
// and gains nothing through exec.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "device_probe_server.h"
#include "nodegate/log.h"
#include "nodegate/version.h"

namespace nodegate {
namespace {

// Where Kubernetes mounts a service-account token; the helper needs none.
constexpr const char* kTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token";

void dropWhatIsNotNeeded() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    log::warn("failed to set no_new_privs", {{"error", std::strerror(errno)}});
  // Before any thread exists: unshare affects the calling thread, and every thread after
  // inherits it. A unix socket bound by path works across network namespaces.
  if (::unshare(CLONE_NEWNET) != 0)
    log::warn("failed to leave the network: the helper keeps the pod's network namespace",
              {{"error", std::strerror(errno)}, {"hint", "run it privileged (CAP_SYS_ADMIN)"}});
  struct stat st {};
  if (::stat(kTokenPath, &st) == 0)
    log::warn("a service-account token is mounted into the device-probe helper, which needs none",
              {{"path", kTokenPath}, {"hint", "automountServiceAccountToken: false"}});
}

}  // namespace

sigset_t blockDaemonSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return sigs;
}

int runDeviceProbe(const Options& opts) {
  if (opts.socket_path.empty()) {
    std::cerr << "nodegate: device-probe needs --socket PATH\n";
    return 2;
  }
  sigset_t sigs = blockDaemonSignals();
  dropWhatIsNotNeeded();

  auto seams = productionSeams();
  auto service = std::make_shared<devprobe::Service>(opts.hostRoot(), opts.lvm_command,
                                                     seams.device, seams.exec);
  auto server = devprobe::Server::start(
      opts.socket_path, [service](const devprobe::Request& req) { return service->handle(req); });
  if (!server) {
    log::error("failed to start the device-probe helper", {{"error", server.error().message}});
    return 1;
  }
  log::info("device-probe helper serving", {{"version", kVersion},
                                            {"socket", opts.socket_path},
                                            {"host_root", opts.host_root},
                                            {"lvm_command", opts.lvm_command}});
  for (;;) {
    siginfo_t info{};
    const int sig = sigwaitinfo(&sigs, &info);
    if (sig == SIGTERM || sig == SIGINT) break;
  }
  log::info("device-probe helper stopping");
  server.value()->stop();
  seams.exec->shutdown();
  return 0;
}

}  // namespace nodegate
