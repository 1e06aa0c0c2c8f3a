#include "dns/discovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

DiscoveryResult discoverHops(const HostRoot& host, const std::vector<std::string>& extra_netns,
                             const DnsServerHints& servers) {
  DiscoveryResult res;
  std::vector<NetnsView> views;
  std::set<std::uint64_t> seen;
  auto addView = [&](std::string path, NetnsRole role, std::string vmi) -> NetnsView* {
    auto ino = netnsInode(path);
    if (!ino) {
      // A process that exited during the scan (or a zombie: its comm stays readable, its
      // namespaces are gone) is simply not there; any other failure is worth a warning.
      bool gone = ino.error().code == ENOENT &&
                  (role == NetnsRole::Launcher || role == NetnsRole::DnsServer);
      if (!gone) res.errors.push_back(ino.error().message);
      return nullptr;
    }
    if (!seen.insert(*ino).second) {
      // Same netns reached twice (a --dns-netns bind mount of a launcher's netns): keep the
      // richer identity.
      for (auto& v : views)
        if (v.ino == *ino && v.vmi.empty()) v.vmi = vmi;
      return nullptr;
    }
    // Addresses are read where endpoints are matched: DNS server netns, and the node's own (a
    // hostNetwork server holds its endpoint there).
    bool addrs = role == NetnsRole::DnsServer || (role == NetnsRole::Self && servers.endpoints);
    auto links = listLinks(path, addrs);
    if (!links) {
      res.errors.push_back(links.error().message);
      seen.erase(*ino);
      return nullptr;
    }
    views.push_back({std::move(path), *ino, role, std::move(vmi), std::move(links).value()});
    return &views.back();
  };
  addView("", NetnsRole::Self, "");
  auto names = servers.process_names;
  names.insert("virt-launcher");
  std::vector<LauncherProcess> server_procs;
  for (auto& p : findProcesses(host, names)) {
    if (p.comm != "virt-launcher") {
      server_procs.push_back(std::move(p));
      continue;
    }
    res.launcher_pids.push_back(p.pid);
    addView(p.netns_path, NetnsRole::Launcher,
            p.vmi.empty() ? "pid/" + std::to_string(p.pid) : p.vmi);
  }
  for (const auto& p : extra_netns) addView(p, NetnsRole::Extra, "");
  // DNS servers last: a server netns that is also a launcher's or an extra keeps that role. A
  // server in the node's own netns (hostNetwork) is deduplicated away: it has no hop of its own.
  std::set<std::string> matched;
  if (!views.empty() && views.front().role == NetnsRole::Self)
    for (const auto& l : views.front().links)
      matched.insert(l.addresses.begin(), l.addresses.end());
  for (const auto& p : server_procs) {
    NetnsView* v = addView(p.netns_path, NetnsRole::DnsServer, "");
    if (!v || !servers.endpoints) continue;
    bool endpoint = false;
    for (const auto& l : v->links)
      for (const auto& a : l.addresses)
        if (servers.endpoints->count(a)) {
          endpoint = true;
          matched.insert(a);
        }
    // Not an endpoint of the kube-dns Service: a process of that name serving something else.
    // addView() just appended it, so it is the last view.
    if (!endpoint) views.pop_back();
  }
  for (const auto& a : servers.expected_here)
    if (!matched.count(a))
      res.errors.push_back("kube-dns endpoint " + a +
                           " is on this node but no DNS server process's netns holds it "
                           "(dns-path.server_processes names the processes looked at)");
  for (const auto& v : views) {
    bool launcher = v.role == NetnsRole::Launcher;
    for (const auto& l : v.links)
      launcher |= v.role == NetnsRole::Extra && startsWith(l.name, "k6t-");
    if (launcher) ++res.launchers;
  }
  res.devices = assignHops(views);
  // A --dns-netns that yields no hop is a wrong path or not a shape discovery knows: say so rather
  // than trace nothing in silence.
  for (const auto& v : views) {
    if (v.role != NetnsRole::Extra) continue;
    bool traced = false;
    for (const auto& d : res.devices) traced |= d.netns_ino == v.ino;
    if (!traced)
      res.errors.push_back("--dns-netns " + v.path +
                           ": nothing to trace there (no k6t-* bridge of a launcher, no eth0 veth "
                           "into a netns that is traced, no veth peer of a launcher's eth0)");
  }
  for (const auto& v : views)
    if (v.role == NetnsRole::DnsServer)
      for (const auto& d : res.devices)
        if (d.netns_ino == v.ino && d.hop == Hop::Server) ++res.dns_servers;
  return res;
}

}  // namespace nodegate::dns
