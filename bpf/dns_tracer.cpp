#include "dns_tracer.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "dns_tracer.skel.h"
#include "dns_tracer_maps.h"
#include "dns_wire.h"
#include "nodegate/log.h"
#include "tc_filter.h"

namespace nodegate::dns {
namespace {

// libbpf talks through one process-wide print hook; route it into our logger once. Its INFO lines
// are load chatter (debug for us); WARN is what an operator needs (verifier rejections etc.).
int libbpfPrint(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG && log::level() != log::Level::Debug) return 0;
  char buf[1024];
  int n = vsnprintf(buf, sizeof buf, fmt, args);
  if (n <= 0) return n;
  std::string line(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (line.empty()) return n;
  // bpf_tc_hook_create() on a device that already has clsact is expected (we then leave the qdisc
  // alone); the kernel's extack for it is not worth a warning.
  const bool expected = line.find("Exclusivity flag on") != std::string::npos;
  if (level == LIBBPF_WARN && !expected)
    log::warn("libbpf", {{"detail", line}});
  else
    log::debug("libbpf", {{"detail", line}});
  return n;
}

void installLibbpfPrint() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpfPrint); });
}

Error libbpfError(int err, const std::string& what) {
  // libbpf returns -errno (or sets errno and returns NULL); normalise to a positive errno.
  if (err < 0) err = -err;
  if (err == 0) err = EINVAL;
  return errnoError(err, what);
}

// Runs fn on a short-lived thread that has joined the network namespace at `path` (empty = stay).
// setns() switches only the calling thread, so the caller's own netns never changes and there is
// nothing to restore if anything fails half-way.
template <typename Fn>
auto inNetns(const std::string& path, Fn fn) -> decltype(fn()) {
  std::optional<decltype(fn())> out;
  std::thread worker([&] {
    if (!path.empty()) {
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        out.emplace(errnoError(errno, "open netns " + path));
        return;
      }
      int rc = ::setns(fd, CLONE_NEWNET);
      int err = errno;
      ::close(fd);
      if (rc != 0) {
        out.emplace(errnoError(err, "enter netns " + path));
        return;
      }
    }
    out.emplace(fn());
  });
  worker.join();
  return std::move(*out);
}

struct Attachment {
  AttachmentInfo info;
  uint16_t id = 0;  // the filters' classid: names the device in its events (dns_event.h)
  std::string netns_path;
  TcFilter ingress;  // handle and priority: what detach needs to find our filters
  TcFilter egress;
};

using AttachKey = std::pair<uint64_t, int>;

// The ids of the BPF programs live processes hold, as last read from procfs (heldPrograms()).
// Read again after kHeldProgramsTtl: a scan of every process's fds is not done per attach().
struct HeldPrograms {
  std::optional<Result<std::set<uint32_t>>> ids;
  std::chrono::steady_clock::time_point read_at{};
  // Dead agents' programs whose filters were removed: logged once each at info, each filter at
  // debug (a restart beside 100 VMs removes 804 filters of one program).
  std::set<uint32_t> removed;
};
constexpr std::chrono::seconds kHeldProgramsTtl{10};

// Attachment ids are cls_bpf classids, of which the program sees the 16 minor bits; 0 means "not
// ours" and 0xFFF2/0xFFF3 are clsact's own ingress and egress minors.
constexpr uint16_t kMaxAttachId = 0xFFEF;

}  // namespace

struct DnsTracer::Impl {
  TracerOptions opts;
  ng_dns_tracer_bpf* skel = nullptr;
  bpf_program* drop_prog = nullptr;  // the kfree_skb flavour that loaded (tp_btf or raw_tp)
  uint32_t tc_prog_id = 0;  // the classifier's kernel id: tells our tc filters from others'
  HeldPrograms held;        // guarded by mu
  bool drops = false;
  std::unordered_map<uint32_t, std::string> reasons;

  // Nothing is traced while no device is attached (a node whose VMs are all stopped): then the
  // kfree_skb link is off too, and the ring is not mapped here (it would be 2 x ring_bytes of the
  // agent's RSS, the data pages being mapped twice) and not polled. The first attach() turns
  // tracing on, the last detach() off.
  mutable std::mutex mu;  // guards attachments and drop_link
  std::map<AttachKey, Attachment> attachments;
  bpf_link* drop_link = nullptr;
  // Mapped by the poll thread while active, or by consume() on first use; only the thread that
  // consumes touches it (consume() and the poll thread are never mixed).
  ring_buffer* rb = nullptr;

  // Per device, stamped into each event on the poll thread: the hop, and for tc events the netns
  // cookie. A lookup per event here instead of a hash lookup (hop) or a cold line of struct net
  // (cookie) per packet in the kernel.
  struct DeviceStamp {
    uint8_t hop = 0;
    uint64_t netns_cookie = 0;  // 0 until attach() has seen the device's netns
  };
  mutable std::mutex hop_mu;
  std::map<AttachKey, DeviceStamp> hops;
  // Attachment id -> device, for tc events (they carry the id instead of the netns inode). Ids are
  // handed out in turn, not reused at once, so a late event of a detached filter is not taken for
  // a newer device's.
  std::unordered_map<uint16_t, AttachKey> by_id;
  uint16_t last_id = 0;  // guarded by mu

  // A free attachment id; called with mu held.
  uint16_t nextId() {
    std::lock_guard l(hop_mu);
    for (unsigned tries = 0; tries < kMaxAttachId; tries++) {
      last_id = last_id >= kMaxAttachId ? 1 : static_cast<uint16_t>(last_id + 1);
      if (by_id.count(last_id) == 0) return last_id;
    }
    return 0;  // every id in use: more than NG_HOPS_MAX attachments never get here
  }

  // The ring buffer callback has no per-call context; the consumer in charge sets this first.
  const EventCallback* sink = nullptr;
  std::atomic<uint64_t> delivered{0};

  std::thread poller;
  std::mutex stop_mu;  // guards stopping, started and active
  std::condition_variable stop_cv;
  bool stopping = false;
  bool started = false;
  bool active = false;  // a device is attached: the poll thread maps and drains the ring
  EventCallback cb;

  static int onSample(void* ctx, void* data, size_t size) {
    auto* self = static_cast<Impl*>(ctx);
    if (self->sink == nullptr) return 0;
    // The record is shorter than the event (sized by its question) and carries the question raw;
    // the full event, dotted name, qtype and parse flags are made here.
    ng_dns_event ev;
    if (!decodeRecord(data, size, ev)) return 0;
    {
      std::lock_guard lock(self->hop_mu);
      if (ev.kind == NG_EV_PACKET && ev.netns_cookie != 0) {
        // A tc event names its attachment (dns_event.h); the cookie is stamped below.
        auto id = self->by_id.find(static_cast<uint16_t>(ev.netns_cookie));
        if (id != self->by_id.end() && id->second.second == static_cast<int>(ev.ifindex))
          ev.netns_ino = static_cast<uint32_t>(id->second.first);
        ev.netns_cookie = 0;
      }
      auto it = self->hops.find({ev.netns_ino, static_cast<int>(ev.ifindex)});
      if (it != self->hops.end()) {
        ev.hop = it->second.hop;
        ev.flags |= NG_F_HOP_SET;
        if (ev.kind == NG_EV_PACKET) ev.netns_cookie = it->second.netns_cookie;
      }
    }
    self->delivered.fetch_add(1, std::memory_order_relaxed);
    (*self->sink)(ev);
    return 0;
  }

  ~Impl() {
    ring_buffer__free(rb);
    bpf_link__destroy(drop_link);
    ng_dns_tracer_bpf__destroy(skel);
  }

  Result<void> mapRing() {
    if (rb != nullptr) return {};
    rb = ring_buffer__new(bpf_map__fd(skel->maps.ng_events), &Impl::onSample, this, nullptr);
    if (rb == nullptr) return libbpfError(errno, "map dns ring buffer");
    return {};
  }

  // Drains what is left, then unmaps.
  void unmapRing() {
    if (rb == nullptr) return;
    ring_buffer__consume(rb);
    ring_buffer__free(rb);
    rb = nullptr;
  }

  // The kfree_skb link, or null after a warning: packets are still traced then, only the reason
  // for a lost query goes missing.
  static bpf_link* attachDrops(bpf_program* prog) {
    bpf_link* link = bpf_program__attach(prog);
    if (link == nullptr)
      log::warn(
          "dns tracer: drop reasons off",
          {{"reason", "failed to attach to skb:kfree_skb: " + std::string(std::strerror(errno))}});
    return link;
  }

  // Called with mu held whenever attachments changed: tracing is on while any device is attached.
  void setActive() {
    const bool on = !attachments.empty();
    if (on && drops && drop_link == nullptr) {
      drop_link = attachDrops(drop_prog);
    } else if (!on && drop_link != nullptr) {
      bpf_link__destroy(drop_link);
      drop_link = nullptr;
    }
    {
      std::lock_guard l(stop_mu);
      if (active == on) return;
      active = on;
    }
    stop_cv.notify_all();
  }
};

namespace {

// Names of enum skb_drop_reason from the running kernel's BTF: the numbers move between releases
// (and with config options), the names are what the kernel documents. SKB_DROP_REASON_FOO -> FOO.
std::unordered_map<uint32_t, std::string> loadDropReasons(const btf* vmlinux) {
  std::unordered_map<uint32_t, std::string> out;
  if (vmlinux == nullptr) return out;
  int id = btf__find_by_name_kind(vmlinux, "skb_drop_reason", BTF_KIND_ENUM);
  if (id < 0) id = btf__find_by_name_kind(vmlinux, "skb_drop_reason", BTF_KIND_ENUM64);
  if (id < 0) return out;
  const btf_type* t = btf__type_by_id(vmlinux, static_cast<uint32_t>(id));
  auto add = [&](uint32_t name_off, uint64_t value) {
    std::string name = btf__name_by_offset(vmlinux, name_off);
    for (std::string_view prefix : {"SKB_DROP_REASON_", "SKB_"}) {
      if (name.rfind(prefix, 0) == 0) {
        name.erase(0, prefix.size());
        break;
      }
    }
    out.emplace(static_cast<uint32_t>(value), std::move(name));
  };
  const unsigned n = btf_vlen(t);
  if (btf_is_enum(t)) {
    const struct btf_enum* e = btf_enum(t);
    for (unsigned i = 0; i < n; i++) add(e[i].name_off, static_cast<uint32_t>(e[i].val));
  } else if (btf_is_enum64(t)) {
    const struct btf_enum64* e = btf_enum64(t);
    for (unsigned i = 0; i < n; i++) add(e[i].name_off, btf_enum64_value(&e[i]));
  }
  return out;
}

Result<uint64_t> statInode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errnoError(errno, "stat netns " + path);
  return static_cast<uint64_t>(st.st_ino);
}

// The calling thread's netns cookie (SO_NETNS_COOKIE, Linux 5.14), 0 where the kernel has none:
// the event field it fills is informational.
uint64_t ownNetnsCookie() {
  uint64_t cookie = 0;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  socklen_t len = sizeof cookie;
  if (::getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) cookie = 0;
  ::close(fd);
  return cookie;
}

bool isPowerOfTwo(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// libbpf's options naming one of our filters, for bpf_tc_detach().
bpf_tc_opts detachOpts(const TcFilter& f) {
  bpf_tc_opts o;
  std::memset(&o, 0, sizeof o);
  o.sz = sizeof o;
  o.handle = f.handle;
  o.priority = f.priority;
  return o;
}

// The name our filters carry (`tc filter show`: "bpf name ng_tc"); with the program id it is how a
// filter on a hook is recognised as ours.
constexpr const char* kFilterName = "ng_tc";

bool ignorableDetachError(int err) {
  // The device or its qdisc went away, and our filter with it.
  return err == 0 || err == ENOENT || err == ENODEV || err == EINVAL;
}

// Removes our filter f from one hook of the current netns's ifindex, but only while the filter at
// its handle and priority is still ours: a cls_bpf filter named ng_tc running our program. If it
// is gone (someone removed the qdisc) that handle and priority may since hold someone else's
// filter, which stays. Returns a positive errno, 0 on success or nothing to remove.
int removeOwnFilter(int ifindex, bool ingress, const TcFilter& f, uint32_t prog_id) {
  auto list = listFilters(ifindex, ingress);
  if (!list) return list.error().code;
  for (const TcFilterEntry& e : *list) {
    if (e.handle != f.handle || e.priority != f.priority) continue;
    if (e.kind != "bpf" || e.bpf_name != kFilterName || e.prog_id != prog_id) {
      log::warn("dns tracer: our tc filter was replaced, leaving the new one",
                {{"ifindex", std::to_string(ifindex)},
                 {"hook", ingress ? "ingress" : "egress"},
                 {"kind", e.kind},
                 {"name", e.bpf_name},
                 {"prog_id", std::to_string(e.prog_id)}});
      return 0;
    }
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
                .attach_point = ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    bpf_tc_opts del = detachOpts(f);
    const int err = -bpf_tc_detach(&hook, &del);
    return ignorableDetachError(err) ? 0 : err;
  }
  return 0;
}

// Removes the clsact qdisc on the current netns's ifindex when neither of its hooks holds a filter
// any more (after ours are gone): deleting the qdisc deletes every filter on it, and one left
// there belongs to someone else (another agent, a CNI, a user). A filter added between the listing
// and the delete is not seen; netlink has no conditional delete. Returns a positive errno or 0.
int removeQdiscIfEmpty(int ifindex) {
  for (bool ingress : {true, false}) {
    auto list = listFilters(ifindex, ingress);
    if (!list) return list.error().code;
    if (!list->empty()) {
      log::debug("dns tracer: clsact qdisc kept, other filters remain",
                 {{"ifindex", std::to_string(ifindex)},
                  {"hook", ingress ? "ingress" : "egress"},
                  {"filters", std::to_string(list->size())}});
      return 0;
    }
  }
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
              .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
  const int err = -bpf_tc_hook_destroy(&hook);
  return ignorableDetachError(err) ? 0 : err;
}

// PROC_PID_INIT_INO (include/linux/proc_ns.h): the inode of the initial pid namespace, fixed by
// the kernel. Only a procfs of that namespace shows every process of the machine.
constexpr uint64_t kInitPidNsInode = 0xEFFFFFFCu;

// Ids of the BPF programs some process of the machine holds a file descriptor of
// (/proc/PID/fdinfo/N, "prog_id:"). An error when that cannot be known for every process: a procfs
// of another pid namespace (a pod without hostPID), or a process whose fds may not be read.
Result<std::set<uint32_t>> heldPrograms(const std::string& procfs) {
  auto pidns = statInode(procfs + "/self/ns/pid");
  if (!pidns) return pidns.error();
  if (*pidns != kInitPidNsInode)
    return Error{EPERM, procfs + " shows another pid namespace than the host's"};
  using Dir = std::unique_ptr<DIR, int (*)(DIR*)>;
  Dir proc(::opendir(procfs.c_str()), ::closedir);
  if (!proc) return errnoError(errno, "read " + procfs);
  std::set<uint32_t> held;
  while (const dirent* p = ::readdir(proc.get())) {
    if (p->d_name[0] < '0' || p->d_name[0] > '9') continue;
    const std::string pid_dir = procfs + "/" + p->d_name;
    Dir fds(::opendir((pid_dir + "/fd").c_str()), ::closedir);
    if (!fds) {
      if (errno == ENOENT || errno == ESRCH) continue;  // exited meanwhile
      return errnoError(errno, "read " + pid_dir + "/fd");
    }
    while (const dirent* f = ::readdir(fds.get())) {
      if (f->d_name[0] == '.') continue;
      char target[32];
      const ssize_t n = ::readlinkat(::dirfd(fds.get()), f->d_name, target, sizeof target - 1);
      if (n <= 0) continue;  // closed meanwhile
      target[n] = '\0';
      if (std::strcmp(target, "anon_inode:bpf-prog") != 0) continue;
      std::ifstream info(pid_dir + "/fdinfo/" + f->d_name);
      for (std::string line; std::getline(info, line);)
        if (line.rfind("prog_id:", 0) == 0) {
          held.insert(static_cast<uint32_t>(std::strtoul(line.c_str() + 8, nullptr, 10)));
          break;
        }
    }
  }
  return held;
}

// Removes the filters a dead agent left on one device of the current netns: cls_bpf filters named
// ng_tc whose program no live process holds (an agent killed with SIGKILL cannot detach; its
// filters keep its program and ring buffer in the kernel and run on every packet, and one pair
// more would stack up per restart). Another live agent's filters (a rolling update with surge)
// stay, and so does everything when the holders cannot all be seen.
void removeStaleFilters(int ifindex, uint32_t prog_id, HeldPrograms& held,
                        const std::string& procfs) {
  for (bool ingress : {true, false}) {
    auto list = listFilters(ifindex, ingress);
    if (!list) return;  // attach adds its filters and reports any error itself
    for (const TcFilterEntry& e : *list) {
      if (e.handle == 0 || e.kind != "bpf" || e.bpf_name != kFilterName || e.prog_id == prog_id)
        continue;
      const auto now = std::chrono::steady_clock::now();
      if (!held.ids || now - held.read_at > kHeldProgramsTtl) {
        held.ids = heldPrograms(procfs);
        held.read_at = now;
        if (!held.ids->ok())
          log::info(
              "dns tracer: stale tc filters are not removed",
              {{"reason", "who holds BPF programs is unknown: " + held.ids->error().message}});
      }
      if (!held.ids->ok() || held.ids->value().count(e.prog_id) != 0) continue;
      const int err = removeOwnFilter(ifindex, ingress, {e.handle, e.priority}, e.prog_id);
      const std::string where = std::to_string(ifindex) + (ingress ? " ingress" : " egress");
      if (err != 0)
        log::warn("dns tracer: failed to remove a dead agent's tc filter",
                  {{"device", where},
                   {"prog_id", std::to_string(e.prog_id)},
                   {"error", std::strerror(err)}});
      else if (held.removed.insert(e.prog_id).second)
        log::info("dns tracer: removing a dead agent's tc filters (each at debug)",
                  {{"device", where}, {"prog_id", std::to_string(e.prog_id)}});
      else
        log::debug("dns tracer: removed a dead agent's tc filter",
                   {{"device", where}, {"prog_id", std::to_string(e.prog_id)}});
    }
  }
}

}  // namespace

DnsTracer::DnsTracer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DnsTracer::~DnsTracer() {
  stop();
  detachAll();
}

Result<std::unique_ptr<DnsTracer>> DnsTracer::open(const TracerOptions& opts) {
  installLibbpfPrint();
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (!isPowerOfTwo(opts.ring_bytes) || opts.ring_bytes < page)
    return Error{EINVAL, "failed to size dns ring buffer: " + std::to_string(opts.ring_bytes) +
                             " bytes is not a power of two of at least one page"};
  if (opts.poll_interval.count() <= 0 || opts.idle_poll_interval.count() <= 0)
    return Error{EINVAL, "failed to configure dns tracer: poll intervals must be positive"};

  auto impl = std::make_unique<Impl>();
  impl->opts = opts;

  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr)
    return libbpfError(errno, "load kernel btf (the tracer needs CONFIG_DEBUG_INFO_BTF)");
  impl->reasons = loadDropReasons(vmlinux);
  const bool has_kern_ctx =
      btf__find_by_name_kind(vmlinux, "bpf_cast_to_kern_ctx", BTF_KIND_FUNC) >= 0;
  btf__free(vmlinux);
  if (!has_kern_ctx)
    return Error{ENOTSUP,
                 "failed to load dns tracer: kernel lacks kfunc bpf_cast_to_kern_ctx "
                 "(linux 6.3 or newer needed)"};

  // The drop program needs the reason argument of skb:kfree_skb (5.17+), which came with the enum.
  impl->drops = opts.trace_drops && !impl->reasons.empty();
  if (!impl->drops)
    log::info("dns tracer: drop reasons off",
              {{"reason", opts.trace_drops ? "kernel has no enum skb_drop_reason"
                                           : "disabled by configuration"}});

  // kfree_skb through tp_btf first (typed skb, plain loads: cheapest per drop); a kernel or policy
  // that refuses BTF-typed tracing gets the raw_tp copy of the same program instead.
  for (int attempt = 0; attempt < 2; attempt++) {
    const bool use_btf = impl->drops && attempt == 0 && !opts.drops_via_raw_tp;
    impl->skel = ng_dns_tracer_bpf__open();
    if (impl->skel == nullptr) return libbpfError(errno, "open dns tracer bpf object");
    // The program wakes the reader early once half of this waits (ng_emit()): past that point a
    // 10 ms poll might not be soon enough.
    if (int err = bpf_map__set_max_entries(impl->skel->maps.ng_events,
                                           static_cast<uint32_t>(opts.ring_bytes)))
      return libbpfError(err, "size dns ring buffer");
    bpf_program__set_autoload(impl->skel->progs.ng_kfree_skb_btf, use_btf);
    bpf_program__set_autoload(impl->skel->progs.ng_kfree_skb, impl->drops && !use_btf);
    int err = ng_dns_tracer_bpf__load(impl->skel);
    if (err == 0) {
      impl->drop_prog = !impl->drops ? nullptr
                        : use_btf    ? impl->skel->progs.ng_kfree_skb_btf
                                     : impl->skel->progs.ng_kfree_skb;
      break;
    }
    ng_dns_tracer_bpf__destroy(impl->skel);
    impl->skel = nullptr;
    if (!use_btf) return libbpfError(err, "load dns tracer bpf programs");
    log::info("dns tracer: kfree_skb via raw_tp",
              {{"reason", "tp_btf program rejected: " + std::string(std::strerror(-err))}});
  }

  // Its id is how detach() knows a filter at our handle and priority is still ours.
  {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (int err = bpf_obj_get_info_by_fd(bpf_program__fd(impl->skel->progs.ng_tc), &info, &len))
      return libbpfError(err, "read the dns classifier's program id");
    impl->tc_prog_id = info.id;
  }

  // The kfree_skb link comes and goes with the attached devices (Impl::setActive); one attach here
  // finds out now whether the kernel allows it at all, so dropsAvailable() is true from the start.
  if (impl->drop_prog != nullptr) {
    bpf_link* probe = Impl::attachDrops(impl->drop_prog);
    if (probe == nullptr) {
      impl->drops = false;
      impl->drop_prog = nullptr;
    }
    bpf_link__destroy(probe);
  }

  log::debug("dns tracer loaded", {{"ring_bytes", std::to_string(opts.ring_bytes)},
                                   {"drop_reasons", std::to_string(impl->reasons.size())}});
  return std::unique_ptr<DnsTracer>(new DnsTracer(std::move(impl)));
}

Result<uint64_t> DnsTracer::netnsInode(const std::string& netns_path) const {
  return statInode(netns_path.empty() ? impl_->opts.procfs + "/thread-self/ns/net" : netns_path);
}

Result<AttachmentInfo> DnsTracer::attach(const AttachTarget& target) {
  if (target.ifindex <= 0)
    return Error{EINVAL,
                 "failed to attach dns tracer: invalid ifindex " + std::to_string(target.ifindex)};
  std::lock_guard lock(impl_->mu);
  // One program for both hooks: it reads the direction from the skb (dns_tracer.bpf.c).
  const int prog_fd = bpf_program__fd(impl_->skel->progs.ng_tc);
  const uint32_t prog_id = impl_->tc_prog_id;
  const std::string procfs = impl_->opts.procfs;
  const uint16_t id = impl_->nextId();  // unused if the device turns out to be attached already
  if (id == 0) return Error{ENOSPC, "failed to attach dns tracer: no free attachment id"};

  Result<Attachment> made = inNetns(target.netns_path, [&]() -> Result<Attachment> {
    // Inside the target netns, our own view of it is the netns file's inode.
    auto ino = statInode(procfs + "/thread-self/ns/net");
    if (!ino) return ino.error();
    Attachment a;
    a.id = id;
    a.netns_path = target.netns_path;
    a.info.netns_ino = *ino;
    a.info.ifindex = target.ifindex;
    a.info.hop = target.hop;
    if (impl_->attachments.count({*ino, target.ifindex}) != 0) return a;  // already attached
    a.info.netns_cookie = ownNetnsCookie();

    char name[IF_NAMESIZE] = {};
    const std::string dev = std::to_string(target.ifindex) +
                            (if_indextoname(static_cast<unsigned>(target.ifindex), name)
                                 ? std::string(" (") + name + ")"
                                 : "");
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = target.ifindex,
                .attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
    int err = bpf_tc_hook_create(&hook);
    if (err != 0 && err != -EEXIST)
      return libbpfError(err, "create clsact qdisc on ifindex " + dev);
    a.info.created_qdisc = (err == 0);
    if (!a.info.created_qdisc) removeStaleFilters(target.ifindex, prog_id, impl_->held, procfs);

    // The kernel picks a priority ahead of the existing filters; we return TC_ACT_UNSPEC, so
    // theirs still run and decide. Our own netlink request, because the filter needs a classid
    // (tc_filter.h). Detach finds them by handle and priority and removes them only while they
    // are still ours (removeOwnFilter).
    auto in = addClsBpfFilter(target.ifindex, true, prog_fd, id, kFilterName);
    auto out = in ? addClsBpfFilter(target.ifindex, false, prog_fd, id, kFilterName)
                  : Result<TcFilter>(in.error());
    if (!out) {
      // Undo only what this attach did; cleanup errors are secondary to the one reported.
      if (in) removeOwnFilter(target.ifindex, true, *in, prog_id);
      if (a.info.created_qdisc) removeQdiscIfEmpty(target.ifindex);
      Error e = out.error();
      e.message += " (device " + dev + ")";
      return e;
    }
    a.ingress = *in;
    a.egress = *out;
    return a;
  });
  if (!made) return made.error();

  Attachment a = std::move(made.value());
  if (auto r = setHop(a.info.netns_ino, target.ifindex, target.hop); !r) return r.error();
  const AttachKey key{a.info.netns_ino, target.ifindex};
  auto it = impl_->attachments.find(key);
  if (it != impl_->attachments.end()) {
    it->second.info.hop = target.hop;
    return it->second.info;
  }
  {
    // A new attachment: its device's events carry this cookie from now on (the one already
    // attached keeps the stamp it got then).
    std::lock_guard hl(impl_->hop_mu);
    const AttachKey stamp_key{static_cast<uint32_t>(a.info.netns_ino), target.ifindex};
    impl_->hops[stamp_key].netns_cookie = a.info.netns_cookie;
    impl_->by_id[a.id] = stamp_key;
  }
  log::info("dns tracer attached", {{"netns_ino", std::to_string(a.info.netns_ino)},
                                    {"ifindex", std::to_string(target.ifindex)},
                                    {"hop", std::to_string(target.hop)}});
  AttachmentInfo info = a.info;
  impl_->attachments.emplace(key, std::move(a));
  impl_->setActive();
  return info;
}

namespace {

// Removes our two filters, and clsact if we made it and nothing else is left on it. A device or
// netns that vanished took our filters with it: that is success, not an error.
Result<void> removeFilters(const Attachment& a, const std::string& procfs, uint32_t prog_id) {
  return inNetns(a.netns_path, [&]() -> Result<void> {
    auto ino = statInode(procfs + "/thread-self/ns/net");
    if (!ino) return ino.error();
    if (*ino != a.info.netns_ino) return {};  // the path now names another netns: ours is gone
    int first_err = removeOwnFilter(a.info.ifindex, true, a.ingress, prog_id);
    if (int err = removeOwnFilter(a.info.ifindex, false, a.egress, prog_id); first_err == 0)
      first_err = err;
    if (a.info.created_qdisc && first_err == 0) first_err = removeQdiscIfEmpty(a.info.ifindex);
    if (first_err != 0)
      return libbpfError(first_err,
                         "detach tc program from ifindex " + std::to_string(a.info.ifindex));
    return {};
  });
}

}  // namespace

Result<void> DnsTracer::detach(uint64_t netns_ino, int ifindex) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->attachments.find({netns_ino, ifindex});
  if (it == impl_->attachments.end())
    return Error{ENOENT, "failed to detach dns tracer: ifindex " + std::to_string(ifindex) +
                             " in netns " + std::to_string(netns_ino) + " is not attached"};
  Result<void> r;
  if (!it->second.netns_path.empty() || netnsInode("").valueOr(0) == netns_ino)
    r = removeFilters(it->second, impl_->opts.procfs, impl_->tc_prog_id);
  // The netns file is gone (pod deleted): its devices and our filters went with it.
  if (!r && r.error().code == ENOENT) r = {};
  {
    std::lock_guard hl(impl_->hop_mu);
    impl_->hops.erase({static_cast<uint32_t>(netns_ino), ifindex});
    impl_->by_id.erase(it->second.id);
  }
  impl_->attachments.erase(it);
  impl_->setActive();
  if (r)
    log::info("dns tracer detached",
              {{"netns_ino", std::to_string(netns_ino)}, {"ifindex", std::to_string(ifindex)}});
  return r;
}

void DnsTracer::detachAll() {
  std::vector<AttachKey> keys;
  {
    std::lock_guard lock(impl_->mu);
    for (const auto& [k, _] : impl_->attachments) keys.push_back(k);
  }
  for (const auto& [ino, ifindex] : keys) {
    if (auto r = detach(ino, ifindex); !r)
      log::warn("dns tracer: detach failed", {{"error", r.error().message}});
  }
}

std::vector<AttachmentInfo> DnsTracer::attachments() const {
  std::lock_guard lock(impl_->mu);
  std::vector<AttachmentInfo> out;
  for (const auto& [_, a] : impl_->attachments) out.push_back(a.info);
  return out;
}

Result<void> DnsTracer::setHop(uint64_t netns_ino, int ifindex, uint8_t hop) {
  // Events carry the netns inode truncated to 32 bits; key the same way so lookups match.
  const AttachKey key{static_cast<uint32_t>(netns_ino), ifindex};
  std::lock_guard lock(impl_->hop_mu);
  if (impl_->hops.size() >= NG_HOPS_MAX && impl_->hops.count(key) == 0)
    return Error{ENOSPC, "failed to set dns hop for ifindex " + std::to_string(ifindex) + ": " +
                             std::to_string(NG_HOPS_MAX) + " devices already have one"};
  impl_->hops[key].hop = hop;
  return {};
}

Result<void> DnsTracer::start(EventCallback cb) {
  std::lock_guard lock(impl_->stop_mu);
  if (impl_->started) return Error{EALREADY, "failed to start dns tracer: already started"};
  impl_->started = true;
  impl_->cb = std::move(cb);
  impl_->sink = &impl_->cb;
  Impl* impl = impl_.get();
  impl_->poller = std::thread([impl] {
    // The ring only holds a few polls' worth of events at peak (TracerOptions::ring_bytes), so
    // this thread must not wait behind CPU-bound neighbours: on a loaded 2-vCPU node at nice 0 it
    // was measured off-CPU for over 50 ms and the ring overflowed. A higher weight (it uses ~1% of
    // a CPU) gets it scheduled soon after each wakeup. Best effort: without CAP_SYS_NICE it
    // stays at the default.
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), -10) != 0)
      log::debug("dns tracer: poll thread priority unchanged", {{"error", std::strerror(errno)}});
    // Named, so its wakeups and CPU can be told from the other threads' (top -H, /proc/PID/task).
    ::pthread_setname_np(::pthread_self(), "ng-dns-poll");
    const int busy_ms = static_cast<int>(impl->opts.poll_interval.count());
    const int idle_ms = std::max(busy_ms, static_cast<int>(impl->opts.idle_poll_interval.count()));
    constexpr auto kQuietAfter = std::chrono::seconds(1);
    auto last_event = std::chrono::steady_clock::now();
    for (;;) {
      bool active = false;
      {
        // Idle (no device attached, ring drained and unmapped): sleep until one is attached.
        std::unique_lock l(impl->stop_mu);
        impl->stop_cv.wait(l, [impl] { return impl->stopping || impl->active || impl->rb; });
        if (impl->stopping) break;
        active = impl->active;
      }
      if (!active) {
        impl->unmapRing();
        continue;
      }
      if (auto r = impl->mapRing(); !r) {
        log::error("dns tracer: events not read", {{"error", r.error().message}});
        std::unique_lock l(impl->stop_mu);
        impl->stop_cv.wait_for(l, impl->opts.poll_interval, [impl] { return impl->stopping; });
        continue;
      }
      // Returns early only when the BPF side forces a wakeup (ring half full); otherwise this is
      // the poll interval, and consume() picks up what arrived without a wakeup.
      const auto now = std::chrono::steady_clock::now();
      const bool quiet = now - last_event >= kQuietAfter;
      const int polled = ring_buffer__poll(impl->rb, quiet ? idle_ms : busy_ms);
      if (ring_buffer__consume(impl->rb) > 0 || polled > 0)
        last_event = std::chrono::steady_clock::now();
    }
    impl->unmapRing();
  });
  return {};
}

void DnsTracer::stop() {
  {
    std::lock_guard lock(impl_->stop_mu);
    if (!impl_->started || impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->poller.joinable()) impl_->poller.join();
}

Result<int> DnsTracer::consume(const EventCallback& cb) {
  {
    std::lock_guard lock(impl_->stop_mu);
    if (impl_->started && !impl_->stopping)
      return Error{EBUSY, "failed to consume dns events: the poll thread is running"};
  }
  if (auto r = impl_->mapRing(); !r) return r.error();
  impl_->sink = &cb;
  int n = ring_buffer__consume(impl_->rb);
  impl_->sink = nullptr;
  if (n < 0) return libbpfError(n, "consume dns ring buffer");
  return n;
}

TracerStats DnsTracer::stats() const {
  TracerStats s;
  const int ncpu = libbpf_num_possible_cpus();
  const int fd = bpf_map__fd(impl_->skel->maps.ng_stats);
  std::vector<uint64_t> values(ncpu > 0 ? static_cast<std::size_t>(ncpu) : 1);
  auto sum = [&](uint32_t idx) -> uint64_t {
    if (bpf_map_lookup_elem(fd, &idx, values.data()) != 0) return 0;
    uint64_t total = 0;
    for (uint64_t v : values) total += v;
    return total;
  };
  s.events_lost = sum(NG_STAT_LOST);
  s.frags_skipped = sum(NG_STAT_FRAG);
  s.ext_skipped = sum(NG_STAT_EXT);
  s.not_dns = sum(NG_STAT_NOT_DNS);
  s.short_packets = sum(NG_STAT_SHORT);
  s.tcp_prefix_segments = sum(NG_STAT_TCP_PREFIX);
  s.paged_skipped = sum(NG_STAT_PAGED);
  s.events = impl_->delivered.load(std::memory_order_relaxed);
  return s;
}

bool DnsTracer::dropsAvailable() const {
  return impl_->drops;
}

std::string DnsTracer::dropReasonName(uint32_t reason) const {
  auto it = impl_->reasons.find(reason);
  if (it != impl_->reasons.end()) return it->second;
  return "UNKNOWN(" + std::to_string(reason) + ")";
}

int DnsTracer::tcProgFd() const {
  return bpf_program__fd(impl_->skel->progs.ng_tc);
}
int DnsTracer::dropProgFd() const {
  return impl_->drop_prog != nullptr ? bpf_program__fd(impl_->drop_prog) : -1;
}

std::string formatAddress(const ng_dns_event& ev, bool source) {
  const uint8_t* a = source ? ev.saddr : ev.daddr;
  char buf[INET6_ADDRSTRLEN] = {};
  if (!(ev.flags & NG_F_IPV6)) {
    // The agent formats both addresses of every event; glibc's inet_ntop() does IPv4 through
    // sprintf(), which was a fifth of the poll thread's time under load.
    // Digits by hand, not std::to_chars: GCC's -Wstringop-overflow cannot bound to_chars'
    // result pointer at -O2/-O3 and fails the Release build; here every index is provably < 16.
    std::size_t n = 0;
    for (int i = 0; i < 4; i++) {
      if (i > 0) buf[n++] = '.';
      unsigned v = a[i];
      if (v >= 100) buf[n++] = static_cast<char>('0' + v / 100);
      if (v >= 10) buf[n++] = static_cast<char>('0' + v / 10 % 10);
      buf[n++] = static_cast<char>('0' + v % 10);
    }
    return std::string(buf, n);
  }
  if (inet_ntop(AF_INET6, a, buf, sizeof buf) == nullptr) return {};
  return buf;
}

}  // namespace nodegate::dns
