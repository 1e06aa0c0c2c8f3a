#include "dns/discovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include "processes.h"

namespace nodegate::dns {
namespace {

bool startsWith(const std::string& s, std::string_view p) {
  return s.rfind(p, 0) == 0;
}

}  // namespace

Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path, bool with_addresses) {
  // The production netlink seam (probes/sys/netlink.cpp); hop discovery takes it from there.
  return makeSysNetlink()->listLinks(netns_path, with_addresses);
}

Result<std::uint64_t> netnsInode(const std::string& netns_path) {
  struct stat st {};
  // Our own netns through our own procfs, not --host-root's: the agent is the observer.
  const std::string p = netns_path.empty() ? HostRoot("/").proc("thread-self/ns/net") : netns_path;
  if (::stat(p.c_str(), &st) != 0) return errnoError(errno, "stat netns " + p);
  return static_cast<std::uint64_t>(st.st_ino);
}

std::set<std::string> nodeLocalAddresses(const std::vector<LinkInfo>& links) {
  std::set<std::string> out;
  for (const auto& l : links) {
    if (l.kind != "dummy") continue;
    bool link_local = false;
    for (const auto& a : l.addresses) link_local |= startsWith(a, "169.254.");
    if (link_local) out.insert(l.addresses.begin(), l.addresses.end());
  }
  return out;
}

std::vector<HopDevice> assignHops(const std::vector<NetnsView>& views) {
  std::vector<HopDevice> out;
  auto add = [&](const NetnsView& v, const LinkInfo& l, Hop hop, const std::string& vmi) {
    out.push_back({v.path, v.ino, l.ifindex, l.name, hop, vmi});
  };
  auto isLauncher = [](const NetnsView& v) {
    if (v.role == NetnsRole::Launcher) return true;
    if (v.role == NetnsRole::Self) return false;
    for (const auto& l : v.links)
      if (startsWith(l.name, "k6t-")) return true;
    return false;
  };
  // The veth in another netns whose peer is `l` of view `v` (crosswise ifindex match: a pair is
  // the only way both indexes line up).
  auto peerOf = [&](const NetnsView& v,
                    const LinkInfo& l) -> std::pair<const NetnsView*, const LinkInfo*> {
    for (const auto& w : views) {
      if (&w == &v || w.ino == v.ino || isLauncher(w)) continue;
      for (const auto& m : w.links)
        if (m.ifindex == l.peer_ifindex && m.peer_ifindex == l.ifindex) return {&w, &m};
    }
    return {nullptr, nullptr};
  };

  std::set<std::uint64_t> host_side;  // netns holding the host end of some launcher's eth0
  for (const auto& v : views) {
    if (!isLauncher(v)) continue;
    std::string vmi = v.vmi;
    if (vmi.empty()) {
      auto slash = v.path.find_last_of('/');
      vmi = "netns/" + (slash == std::string::npos ? v.path : v.path.substr(slash + 1));
    }
    std::set<int> bridges;
    for (const auto& l : v.links)
      if (startsWith(l.name, "k6t-")) bridges.insert(l.ifindex);
    for (const auto& l : v.links) {
      if (bridges.count(l.ifindex)) {
        add(v, l, Hop::Bridge, vmi);
      } else if (bridges.count(l.master) || startsWith(l.name, "tap")) {
        add(v, l, Hop::Tap, vmi);
      } else if (l.name == "eth0") {
        add(v, l, Hop::LauncherEth0, vmi);
        auto [w, m] = peerOf(v, l);
        if (m) {
          add(*w, *m, Hop::HostVeth, vmi);
          host_side.insert(w->ino);
        }
      }
    }
  }
  for (const auto& v : views) {
    bool candidate = v.role == NetnsRole::DnsServer || v.role == NetnsRole::Extra;
    if (!candidate || isLauncher(v) || host_side.count(v.ino)) continue;
    for (const auto& l : v.links) {
      if (l.name != "eth0" || l.peer_ifindex == 0) continue;
      auto [w, m] = peerOf(v, l);
      if (!m) continue;  // not a veth into a netns we know: nothing to call HostOut
      add(v, l, Hop::Server, "");
      add(*w, *m, Hop::HostOut, "");
    }
  }
  return out;
}

HopDiscovery::HopDiscovery(HostRoot host, std::vector<std::string> extra_netns,
                           std::shared_ptr<Netlink> netlink)
    : host_(std::move(host)), extra_(std::move(extra_netns)), netlink_(std::move(netlink)) {}

NetnsView* HopDiscovery::view(std::uint64_t ino) {
  for (auto& v : views_)
    if (v.ino == ino) return &v;
  return nullptr;
}

std::optional<std::uint64_t> HopDiscovery::inodeOf(const std::string& path, NetnsRole role) {
  auto ino = netnsInode(path);
  if (ino) return *ino;
  // A process that exited meanwhile (or a zombie: its comm stays readable, its namespaces are
  // gone) is simply not there; any other failure is worth a warning.
  bool gone =
      ino.error().code == ENOENT && (role == NetnsRole::Launcher || role == NetnsRole::DnsServer);
  if (!gone) list_errors_[path] = ino.error().message;
  return std::nullopt;
}

// Addresses are read where endpoints are matched: DNS server netns, and the node's own (a
// hostNetwork server holds its endpoint there). The node's own and the extra netns (one of which
// is the host side in a replica) also hold a node-local cache's address, if there is one.
bool HopDiscovery::wantsAddresses(NetnsRole role) const {
  return role == NetnsRole::DnsServer || role == NetnsRole::Self || role == NetnsRole::Extra;
}

NetnsView* HopDiscovery::addView(std::string path, std::uint64_t ino, NetnsRole role,
                                 std::string vmi) {
  ++listed_;
  auto links = netlink_->listLinks(path, wantsAddresses(role));
  if (!links) {
    list_errors_[path] = links.error().message;
    return nullptr;
  }
  list_errors_.erase(path);
  views_.push_back({std::move(path), ino, role, std::move(vmi), std::move(links).value()});
  return &views_.back();
}

NetnsView* HopDiscovery::take(std::string path, NetnsRole role, std::string vmi) {
  auto ino = inodeOf(path, role);
  if (!ino) return nullptr;
  if (NetnsView* v = view(*ino)) {
    // Same netns reached twice (a --dns-netns bind mount of a launcher's netns): keep the
    // richer identity.
    if (v->vmi.empty()) v->vmi = std::move(vmi);
    return nullptr;
  }
  return addView(std::move(path), *ino, role, std::move(vmi));
}

void HopDiscovery::relist(std::uint64_t ino) {
  auto it =
      std::find_if(views_.begin(), views_.end(), [&](const NetnsView& v) { return v.ino == ino; });
  if (it == views_.end()) return;
  ++listed_;
  auto links = netlink_->listLinks(it->path, wantsAddresses(it->role));
  if (links) {
    it->links = std::move(links).value();
    list_errors_.erase(it->path);
    return;
  }
  // A launcher's /proc/PID/ns/net goes with its process, whose exit event is on its way; a DNS
  // server's netns that went with its process is simply not there any more.
  const bool gone = links.error().code == ENOENT;
  if (it->role == NetnsRole::Launcher && gone) return;
  if (!(it->role == NetnsRole::DnsServer && gone)) list_errors_[it->path] = links.error().message;
  if (it->role != NetnsRole::Self) views_.erase(it);
}

bool HopDiscovery::launcherStarted(const LauncherProcess& p) {
  auto ino = inodeOf(p.netns_path, NetnsRole::Launcher);
  if (!ino) return true;
  if (auto it = pid_netns_.find(p.pid); it != pid_netns_.end() && it->second != *ino)
    launcherGone(p.pid);  // the pid was reused, or the process moved to another netns
  std::string vmi = p.vmi.empty() ? "pid/" + std::to_string(p.pid) : p.vmi;
  NetnsView* v = view(*ino);
  // A netns known as an --dns-netns or a DNS server's turning out to be a launcher's: which role
  // wins is the full pass's order.
  if (v && v->role != NetnsRole::Launcher && v->role != NetnsRole::Self) return false;
  if (!v) v = addView(p.netns_path, *ino, NetnsRole::Launcher, vmi);
  if (!v) return true;
  if (v->vmi.empty()) v->vmi = vmi;
  pid_netns_[p.pid] = *ino;
  return true;
}

void HopDiscovery::launcherGone(int pid) {
  auto it = pid_netns_.find(pid);
  if (it == pid_netns_.end()) return;
  const std::uint64_t ino = it->second;
  pid_netns_.erase(it);
  auto v =
      std::find_if(views_.begin(), views_.end(), [&](const NetnsView& w) { return w.ino == ino; });
  if (v == views_.end() || v->role != NetnsRole::Launcher) return;
  for (const auto& [other, other_ino] : pid_netns_)
    if (other_ino == ino) {
      // Another launcher still runs there: the netns stays, reached through that one's /proc.
      v->path = host_.proc(std::to_string(other) + "/ns/net");
      return;
    }
  list_errors_.erase(v->path);
  views_.erase(v);
}

// Whether the host side of a launcher's eth0 (its veth peer, in a netns that is no launcher's) is
// in the views. It is not when the host's link event for that veth has not been read yet: then the
// new launcher's exec is the first to tell of it.
bool HopDiscovery::hostSideKnown(std::uint64_t launcher_ino) {
  NetnsView* v = view(launcher_ino);
  if (!v) return true;
  for (const auto& l : v->links) {
    if (l.name != "eth0" || l.peer_ifindex == 0) continue;
    for (const auto& w : views_) {
      if (w.role == NetnsRole::Launcher || w.ino == launcher_ino) continue;
      for (const auto& m : w.links)
        if (m.ifindex == l.peer_ifindex && m.peer_ifindex == l.ifindex) return true;
    }
    return false;
  }
  return true;
}

DiscoveryResult HopDiscovery::update(const DiscoveryWork& work, const DnsServerHints& servers) {
  if (work.full || full_passes_ == 0 || !(servers == hints_)) return full(servers);
  // An --dns-netns that could not be read may be there now: the node's links changing is the
  // sign (a full pass, as every pass was before passes were targeted).
  if (work.host)
    for (const auto& p : extra_)
      if (list_errors_.count(p)) return full(servers);
  auto names = hints_.process_names;
  names.insert("virt-launcher");
  std::set<std::uint64_t> fresh;  // listed in this pass
  std::vector<std::uint64_t> started;
  for (const auto& [pid, exited] : work.pids) {
    auto p = exited ? std::nullopt : readProcess(host_, pid, names);
    if (!p) {
      launcherGone(pid);  // exited, or no longer a launcher (renamed, exec'd something else)
      continue;
    }
    // A DNS server process: whether it is an endpoint of the Service is the full pass's to tell.
    if (p->comm != "virt-launcher") return full(servers);
    const std::size_t had = views_.size();
    if (!launcherStarted(*p)) return full(servers);
    if (views_.size() > had) {
      fresh.insert(views_.back().ino);
      started.push_back(views_.back().ino);
    }
  }
  for (auto ino : work.netns)
    if (fresh.insert(ino).second) relist(ino);
  // The node's own links on its event; every netns that may hold a host side when a new
  // launcher's is in none of the views yet.
  bool host_side = false;
  for (auto ino : started) host_side |= !hostSideKnown(ino);
  std::vector<std::uint64_t> again;
  for (const auto& v : views_)
    if ((v.role == NetnsRole::Self && work.host) || (v.role != NetnsRole::Launcher && host_side))
      again.push_back(v.ino);
  for (auto ino : again)
    if (fresh.insert(ino).second) relist(ino);
  return result();
}

DiscoveryResult HopDiscovery::full(const DnsServerHints& servers) {
  ++full_passes_;
  hints_ = servers;
  views_.clear();
  pid_netns_.clear();
  list_errors_.clear();
  scan_errors_.clear();
  take("", NetnsRole::Self, "");
  auto names = servers.process_names;
  names.insert("virt-launcher");
  std::vector<LauncherProcess> server_procs;
  for (auto& p : findProcesses(host_, names)) {
    if (p.comm == "virt-launcher")
      launcherStarted(p);  // before any --dns-netns or server view: it cannot fail here
    else
      server_procs.push_back(std::move(p));
  }
  for (const auto& p : extra_) take(p, NetnsRole::Extra, "");
  // DNS servers last: a server netns that is also a launcher's or an extra keeps that role. A
  // server in the node's own netns (hostNetwork) is deduplicated away: it has no hop of its own.
  std::set<std::string> matched;
  if (!views_.empty() && views_.front().role == NetnsRole::Self)
    for (const auto& l : views_.front().links)
      matched.insert(l.addresses.begin(), l.addresses.end());
  for (const auto& p : server_procs) {
    NetnsView* v = take(p.netns_path, NetnsRole::DnsServer, "");
    if (!v || !servers.endpoints) continue;
    bool endpoint = false;
    for (const auto& l : v->links)
      for (const auto& a : l.addresses)
        if (servers.endpoints->count(a)) {
          endpoint = true;
          matched.insert(a);
        }
    // Not an endpoint of the kube-dns Service: a process of that name serving something else.
    // take() just appended it, so it is the last view.
    if (!endpoint) views_.pop_back();
  }
  for (const auto& a : servers.expected_here)
    if (!matched.count(a))
      scan_errors_.push_back("kube-dns endpoint " + a +
                             " is on this node but no DNS server process's netns holds it "
                             "(dns-path.server_processes names the processes looked at)");
  return result();
}

DiscoveryResult HopDiscovery::result() const {
  DiscoveryResult res;
  for (const auto& [pid, ino] : pid_netns_) res.launcher_pids.push_back(pid);
  for (const auto& [path, e] : list_errors_) res.errors.push_back(e);
  res.errors.insert(res.errors.end(), scan_errors_.begin(), scan_errors_.end());
  for (const auto& v : views_) {
    bool launcher = v.role == NetnsRole::Launcher;
    for (const auto& l : v.links)
      launcher |= v.role == NetnsRole::Extra && startsWith(l.name, "k6t-");
    if (launcher) ++res.launchers;
  }
  res.devices = assignHops(views_);
  for (const auto& v : views_)
    if (v.role == NetnsRole::Self || v.role == NetnsRole::Extra) {
      auto a = nodeLocalAddresses(v.links);
      res.node_local.insert(a.begin(), a.end());
      bool launcher = false;  // an extra netns that is a launcher's
      for (const auto& l : v.links) launcher |= startsWith(l.name, "k6t-");
      for (const auto& l : v.links)
        if (!launcher) res.host_addresses.insert(l.addresses.begin(), l.addresses.end());
    }
  // A --dns-netns that yields no hop is a wrong path or not a shape discovery knows: say so rather
  // than trace nothing in silence.
  for (const auto& v : views_) {
    if (v.role != NetnsRole::Extra) continue;
    bool traced = false;
    for (const auto& d : res.devices) traced |= d.netns_ino == v.ino;
    if (!traced)
      res.errors.push_back("--dns-netns " + v.path +
                           ": nothing to trace there (no k6t-* bridge of a launcher, no eth0 veth "
                           "into a netns that is traced, no veth peer of a launcher's eth0)");
  }
  for (const auto& v : views_)
    if (v.role == NetnsRole::DnsServer)
      for (const auto& d : res.devices)
        if (d.netns_ino == v.ino && d.hop == Hop::Server) ++res.dns_servers;
  return res;
}

DiscoveryResult discoverHops(const HostRoot& host, const std::vector<std::string>& extra_netns,
                             const DnsServerHints& servers) {
  return HopDiscovery(host, extra_netns, makeSysNetlink()).full(servers);
}

}  // namespace nodegate::dns
