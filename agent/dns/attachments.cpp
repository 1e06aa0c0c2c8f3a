#include "dns/attachments.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "dns_tracer.h"
#include "nodegate/host_root.h"
#include "nodegate/log.h"
#include "triggers/netns_watch.h"

namespace nodegate::dns {

Attachments::~Attachments() {
  closeAll();
}

void Attachments::closeAll() {
  watch_ = nullptr;
  for (const auto& [ino, fd] : netns_fds_) ::close(fd);
  netns_fds_.clear();
}

void Attachments::apply(const std::vector<HopDevice>& found) {
  std::map<Key, HopDevice> want;
  for (const auto& d : found) want[{static_cast<std::uint32_t>(d.netns_ino), d.ifindex}] = d;
  std::map<Key, HopDevice> have;
  {
    std::lock_guard lock(mu_);
    have = devices_;
  }
  for (const auto& [k, d] : have) {
    auto w = want.find(k);
    if (w != want.end() && w->second.hop == d.hop && w->second.vmi == d.vmi) continue;
    if (auto r = tracer_.detach(d.netns_ino, d.ifindex); !r)
      log::debug("dns tracer detach", {{"device", d.ifname}, {"error", r.error().message}});
    {
      std::lock_guard lock(mu_);
      devices_.erase(k);
    }
    log::info("dns hop gone",
              {{"vmi", d.vmi}, {"hop", std::string(hopName(d.hop))}, {"device", d.ifname}});
  }
  for (const auto& [k, d] : want) {
    {
      std::lock_guard lock(mu_);
      if (devices_.count(k)) continue;
    }
    auto r = tracer_.attach({stablePath(d), d.ifindex, static_cast<std::uint8_t>(d.hop)});
    if (!r) {
      // A launcher that exited between discovery and attach: it will not be wanted next time.
      log::warn("failed to attach dns tracer",
                {{"vmi", d.vmi}, {"device", d.ifname}, {"error", r.error().message}});
      continue;
    }
    {
      std::lock_guard lock(mu_);
      devices_[k] = d;
    }
    log::info("dns hop traced", {{"vmi", d.vmi.empty() ? "(shared)" : d.vmi},
                                 {"hop", std::string(hopName(d.hop))},
                                 {"device", d.ifname},
                                 {"netns", d.netns_path.empty() ? "self" : d.netns_path}});
  }
  releaseUnusedNetns();
}

// The path the tracer should use for a netns: our own fd of it, opened on first use.
std::string Attachments::stablePath(const HopDevice& d) {
  if (d.netns_path.empty()) return "";
  auto it = netns_fds_.find(d.netns_ino);
  if (it == netns_fds_.end()) {
    int fd = ::open(d.netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return d.netns_path;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_ino) != d.netns_ino) {
      ::close(fd);  // the process changed netns or exited and its pid was reused
      return d.netns_path;
    }
    it = netns_fds_.emplace(d.netns_ino, fd).first;
    if (watch_)
      if (auto r = watch_->add(d.netns_ino, fd); !r)
        log::debug("dns hop discovery: netns link events", {{"error", r.error().message}});
  }
  return HostRoot("/").proc("self/fd/" + std::to_string(it->second));
}

void Attachments::releaseUnusedNetns() {
  std::set<std::uint64_t> used;
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, d] : devices_) used.insert(d.netns_ino);
  }
  for (auto it = netns_fds_.begin(); it != netns_fds_.end();) {
    if (used.count(it->first)) {
      ++it;
      continue;
    }
    if (watch_) watch_->remove(it->first);
    ::close(it->second);
    it = netns_fds_.erase(it);
  }
}

std::optional<Attachments::Owner> Attachments::owner(std::uint32_t netns_ino, int ifindex) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find({netns_ino, ifindex});
  if (it == devices_.end()) return std::nullopt;
  return Owner{it->second.vmi, it->second.hop};
}

std::vector<HopDevice> Attachments::devices() const {
  std::lock_guard lock(mu_);
  std::vector<HopDevice> out;
  out.reserve(devices_.size());
  for (const auto& [k, d] : devices_) out.push_back(d);
  return out;
}

std::size_t Attachments::size() const {
  std::lock_guard lock(mu_);
  return devices_.size();
}

bool Attachments::beyondHostTraced() const {
  std::lock_guard lock(mu_);
  for (const auto& [k, d] : devices_)
    if (d.hop >= Hop::HostOut) return true;
  return false;
}

}  // namespace nodegate::dns
