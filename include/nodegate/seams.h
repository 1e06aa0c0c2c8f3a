// Seams: the small interfaces in front of everything that talks to the kernel or other programs
// beyond reading files. Production implementations live in probes/sys/, fakes in test/.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "nodegate/result.h"

namespace nodegate {

// Opening device nodes and issuing ioctls on them (kvm, vhost-net, tun, block devices), and
// running the KVM test guest.
class DeviceIo {
 public:
  virtual ~DeviceIo() = default;
  virtual Result<struct stat> statPath(const std::string& path) = 0;
  // Returns an fd; errors keep errno (EACCES, ENOENT, ENXIO...) so callers can tell them apart.
  virtual Result<int> open(const std::string& path, int flags) = 0;
  // Returns the ioctl's non-negative return value.
  virtual Result<int> ioctl(int fd, unsigned long request, void* arg) = 0;
  virtual void close(int fd) = 0;
  // Reads up to len bytes at offset (the lvm probe's label scan of block devices); returns the
  // count read, short at the end of the device. Not pure virtual: a fake that does not model
  // reads answers ENOSYS, which every caller treats as "could not look".
  virtual Result<std::size_t> pread(int fd, void* buf, std::size_t len, std::uint64_t offset) {
    (void)fd, (void)buf, (void)len, (void)offset;
    return Error{ENOSYS, "failed to read device: this DeviceIo does not read"};
  }
  // The KVM test guest's needs (probes/kvm_guest.h); a fake without them answers ENOSYS too.
  // map: len bytes read-write and shared, of fd (a vCPU's kvm_run area) or, with fd -1, fresh
  // zeroed anonymous memory (the guest's RAM). Every mapping is released with unmap.
  virtual Result<void*> map(int fd, std::size_t len) {
    (void)fd, (void)len;
    return Error{ENOSYS, "failed to map memory: this DeviceIo does not map"};
  }
  virtual void unmap(void* addr, std::size_t len) { (void)addr, (void)len; }
  // KVM_RUN on a vCPU fd, cut short at deadline, so a guest that never exits cannot hang the
  // caller. ETIMEDOUT: the deadline passed, before or during the run; EINTR: another signal
  // interrupted it and the caller may run it again; any other errno is KVM_RUN's own.
  virtual Result<int> runVcpu(int vcpu_fd, std::chrono::steady_clock::time_point deadline) {
    (void)vcpu_fd, (void)deadline;
    return Error{ENOSYS, "failed to run the vcpu: this DeviceIo does not run guests"};
  }
};

struct ExecResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that ended the command, when exit_code is -1
  std::string out;
  std::string err;
  bool timed_out = false;
  bool truncated = false;  // output exceeded the limit and was cut
};

// Running a host command (lvm) with a timeout and bounded output; never through a shell.
// The timeout bounds the whole run, not just the output: a command that closes its stdout and
// stderr and goes on running is killed at the deadline all the same, with every process of its
// process group (nsenter -> lvm, a shell's children).
class Exec {
 public:
  virtual ~Exec() = default;
  virtual Result<ExecResult> run(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout,
                                 std::size_t max_output = 16u << 20) = 0;
  // Kills every command still running and fails every later run(): the agent calls it when it
  // stops, so no child outlives it (a probe abandoned at its deadline may still be waiting).
  virtual void shutdown() {}
};

// A D-Bus property value reduced to what probes compare. The signature is kept so a probe can
// report a property of the wrong type instead of misreading it; containers stay monostate.
struct DBusValue {
  std::string signature;  // "b", "s", "o", "u", "t", "d", "as"...
  std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string> value;
};
using DBusProperties = std::map<std::string, DBusValue>;

// One client of one bus. No call blocks its caller longer than the client's timeout (a slow or
// wedged peer becomes an error); the client connects lazily, reconnects with backoff and
// reports a missing bus or service as an error, never an exception.
class DBusClient {
 public:
  virtual ~DBusClient() = default;
  // org.freedesktop.DBus.Properties.GetAll(interface) on service's object at path.
  virtual Result<DBusProperties> getAll(const std::string& service, const std::string& path,
                                        const std::string& interface) = 0;
  // A method that takes one string and returns one object path (systemd1 Manager.LoadUnit).
  virtual Result<std::string> callForPath(const std::string& service, const std::string& path,
                                          const std::string& interface, const std::string& method,
                                          const std::string& arg) = 0;
  // Calls fn on every PropertiesChanged of interface at path, and whenever the bus connection is
  // lost or re-established (anything may have changed meanwhile). A client with a watch keeps
  // itself connected. fn runs on the client's own thread: keep it short and non-blocking.
  virtual void watchProperties(const std::string& path, const std::string& interface,
                               std::function<void()> fn) = 0;
};

class DBus {
 public:
  virtual ~DBus() = default;
  // address is a D-Bus address ("unix:path=/run/dbus/system_bus_socket"); timeout bounds calls.
  virtual std::unique_ptr<DBusClient> client(const std::string& address,
                                             std::chrono::milliseconds timeout) = 0;
};

// The kernel clock's discipline state as adjtimex(2) reports it, read-only (modes = 0).
struct KernelTimex {
  int state = 0;         // return value: TIME_OK (0) .. TIME_ERROR (5)
  int status = 0;        // STA_* bits
  long maxerror_us = 0;  // maximum error bound
  long esterror_us = 0;  // estimated error
  long offset = 0;       // nanoseconds when status has STA_NANO, else microseconds
};

class KernelClock {
 public:
  virtual ~KernelClock() = default;
  virtual Result<KernelTimex> adjtimex() = 0;
};

// One kernel event, reduced to what triggers compare.
struct KernelEvent {
  // uevents: the subsystem ("misc", "block", "net"); rtnetlink: the message ("newlink",
  // "dellink", "newnsid", "delnsid").
  std::string subsystem;
  std::string sysname;    // uevents: "kvm", "sda", "tap0"
  std::string action;     // uevents: "add", "remove", "change", ...
  std::string kvm_event;  // uevents: the EVENT property KVM puts on its VM lifecycle notices
  bool overflow = false;  // the source lost events (its buffer filled): anything may have changed
};

// A stream of kernel events: poll fd() for POLLIN, then drain() what is there without blocking.
class KernelEventSource {
 public:
  virtual ~KernelEventSource() = default;
  virtual std::string_view name() const = 0;  // "uevent", "udev", "rtnetlink"
  virtual int fd() const = 0;
  virtual std::vector<KernelEvent> drain() = 0;
};

// udev: monitors of the misc, block and net subsystems. source "kernel" gives the raw uevents
// (no udevd needed), "udev" the events after udevd processed them.
class Udev {
 public:
  virtual ~Udev() = default;
  virtual Result<std::unique_ptr<KernelEventSource>> monitor(const std::string& source) = 0;
};

// One network link as rtnetlink lists it.
struct LinkInfo {
  int ifindex = 0;
  std::string name;
  std::string kind;      // rtnetlink IFLA_INFO_KIND: "veth", "bridge", "tun", "" when none
  int peer_ifindex = 0;  // IFLA_LINK: a veth's peer (in whatever netns the peer lives)
  int master = 0;        // bridge the link is enslaved to
  std::vector<std::string> addresses;  // IPv4/IPv6 addresses, no prefix; only when asked for
};

// rtnetlink: the links of a network namespace, and link/netns-id change events.
class Netlink {
 public:
  virtual ~Netlink() = default;
  // The links of the netns at netns_path ("" = the caller's own), with their addresses when
  // with_addresses. The real one enters the netns on a short-lived thread of its own, so no
  // other thread ever changes namespace.
  virtual Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path,
                                                  bool with_addresses) = 0;
  // RTNLGRP_LINK and RTNLGRP_NSID of the caller's netns (link add/remove/change, a peer netns
  // getting or losing its id).
  virtual Result<std::unique_ptr<KernelEventSource>> linkEvents() = 0;
};

class PvSource;          // probes/local_pv.h
class ClusterDnsBoard;   // probes/dns_path.h
class DnsVerdictSource;  // probes/dns_path.h
class KubeVirtSource;    // probes/kubevirt_node.h
class VmiDnsBoard;       // probes/dns_path.h
namespace devprobe {
class Client;  // probes/device_probe_client.h
}

// The production seams; the agent adds what its own parts produce (api_pvs, cluster_dns,
// dns_verdicts, kubevirt).
struct Seams {
  std::shared_ptr<DeviceIo> device;
  std::shared_ptr<Exec> exec;
  std::shared_ptr<DBus> dbus;
  std::shared_ptr<KernelClock> clock;
  std::shared_ptr<Udev> udev;
  std::shared_ptr<Netlink> netlink;
  // local-pv's second PV source, the API's view (agent/kube/pv_source.h); the agent sets it
  // when it has an API connection, productionSeams() leaves it null.
  std::shared_ptr<PvSource> api_pvs;
  // dns-path's view of the cluster (Cilium's settings), written by the agent's cluster-DNS
  // reader (agent/kube/cluster_dns.h); null in `nodegate check`.
  std::shared_ptr<const ClusterDnsBoard> cluster_dns;
  // dns-path's view of the guests: the verdicts the agent's DNS service (agent/dns) publishes;
  // null in `nodegate check`, which runs no tracer.
  std::shared_ptr<const DnsVerdictSource> dns_verdicts;
  // kubevirt-node's view of the Node and its virt-handler pods, kept by the agent's Node watch
  // and pod source (agent/kube/kubevirt_facts.h); null without an API connection (`nodegate
  // check`, --kube none), where the check is UNKNOWN/NoApiConnection.
  std::shared_ptr<KubeVirtSource> kubevirt;
  // dns-path's view of the VMIs' DNS configuration, from the agent's pod source (launcher pods'
  // dnsPolicy/dnsConfig); null in `nodegate check` and without a pod source.
  std::shared_ptr<const VmiDnsBoard> vmi_dns;
  // The device-probe helper (`--device-probe PATH`): when set, the device checks and lvm's
  // block-device work are asked of it (probes/device_probe_client.h); null: done here.
  std::shared_ptr<const devprobe::Client> device_probe;
};

// Real implementations (probes/sys/). makeSysDBus alone serves the agent's D-Bus watchers,
// which need a bus client of their own but none of the other seams.
Seams productionSeams();
std::shared_ptr<DBus> makeSysDBus();
std::shared_ptr<Udev> makeSysUdev();
std::shared_ptr<Netlink> makeSysNetlink();

}  // namespace nodegate
