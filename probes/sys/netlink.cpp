// The netlink seam over libnl: link dumps inside a network namespace and link/nsid events.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <netlink/cache.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/socket.h>
#include <sched.h>
#include <unistd.h>

#include <map>
#include <thread>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

// The addresses of every link, by ifindex, as text without prefix length.
Result<std::map<int, std::vector<std::string>>> addressesHere(nl_sock* sk) {
  nl_cache* cache = nullptr;
  int err = rtnl_addr_alloc_cache(sk, &cache);
  if (err < 0) return Error{0, std::string("failed to list addresses: ") + nl_geterror(err)};
  std::map<int, std::vector<std::string>> out;
  for (nl_object* o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    nl_addr* local = rtnl_addr_get_local(a);
    if (!local) continue;
    int family = nl_addr_get_family(local);
    char text[INET6_ADDRSTRLEN] = {};
    if ((family != AF_INET && family != AF_INET6) ||
        !::inet_ntop(family, nl_addr_get_binary_addr(local), text, sizeof text))
      continue;
    out[rtnl_addr_get_ifindex(a)].push_back(text);
  }
  nl_cache_free(cache);
  return out;
}

Result<std::vector<LinkInfo>> listLinksHere(bool with_addresses) {
  nl_sock* sk = nl_socket_alloc();
  if (!sk) return Error{ENOMEM, "failed to allocate netlink socket"};
  std::vector<LinkInfo> out;
  int err = nl_connect(sk, NETLINK_ROUTE);
  nl_cache* cache = nullptr;
  if (err == 0) err = rtnl_link_alloc_cache(sk, AF_UNSPEC, &cache);
  if (err < 0) {
    nl_socket_free(sk);
    return Error{0, std::string("failed to list links: ") + nl_geterror(err)};
  }
  for (nl_object* o = nl_cache_get_first(cache); o; o = nl_cache_get_next(o)) {
    auto* l = reinterpret_cast<rtnl_link*>(o);
    LinkInfo li;
    li.ifindex = rtnl_link_get_ifindex(l);
    if (const char* n = rtnl_link_get_name(l)) li.name = n;
    if (const char* k = rtnl_link_get_type(l)) li.kind = k;
    li.peer_ifindex = static_cast<int>(rtnl_link_get_link(l));
    li.master = static_cast<int>(rtnl_link_get_master(l));
    out.push_back(std::move(li));
  }
  nl_cache_free(cache);
  if (with_addresses) {
    auto addrs = addressesHere(sk);
    if (!addrs) {
      nl_socket_free(sk);
      return addrs.error();
    }
    for (auto& l : out)
      if (auto it = addrs->find(l.ifindex); it != addrs->end()) l.addresses = it->second;
  }
  nl_socket_free(sk);
  return out;
}

// RTNLGRP_LINK and RTNLGRP_NSID messages of the caller's netns.
class LinkEvents final : public KernelEventSource {
 public:
  explicit LinkEvents(nl_sock* nl) : nl_(nl) {
    nl_socket_modify_cb(nl_, NL_CB_VALID, NL_CB_CUSTOM, &LinkEvents::onMessage, this);
  }
  ~LinkEvents() override { nl_socket_free(nl_); }
  std::string_view name() const override { return "rtnetlink"; }
  int fd() const override { return nl_socket_get_fd(nl_); }
  std::vector<KernelEvent> drain() override {
    pending_.clear();
    int rc = nl_recvmsgs_default(nl_);
    // An overflowed socket lost events: the caller treats that as "links changed".
    if (rc == -NLE_NOMEM || rc == -NLE_OBJ_NOTFOUND || rc == -NLE_MSG_OVERFLOW) {
      KernelEvent lost;
      lost.overflow = true;
      pending_.push_back(lost);
    }
    return std::move(pending_);
  }

 private:
  static int onMessage(nl_msg* msg, void* arg) {
    auto* self = static_cast<LinkEvents*>(arg);
    const char* what = nullptr;
    switch (nlmsg_hdr(msg)->nlmsg_type) {
      case RTM_NEWLINK:
        what = "newlink";
        break;
      case RTM_DELLINK:
        what = "dellink";
        break;
      case RTM_NEWNSID:
        what = "newnsid";
        break;
      case RTM_DELNSID:
        what = "delnsid";
        break;
    }
    if (what) {
      KernelEvent e;
      e.subsystem = what;
      self->pending_.push_back(std::move(e));
    }
    return NL_OK;
  }

  nl_sock* nl_;
  std::vector<KernelEvent> pending_;
};

class SysNetlink final : public Netlink {
 public:
  Result<std::vector<LinkInfo>> listLinks(const std::string& netns_path,
                                          bool with_addresses) override {
    if (netns_path.empty()) return listLinksHere(with_addresses);
    int fd = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errnoError(errno, "open netns " + netns_path);
    // setns() changes only the calling thread's netns; a thread of its own keeps every other
    // thread (and this one's caller) where it was, and the netns is left when the thread ends.
    Result<std::vector<LinkInfo>> result = Error{0, "not run"};
    std::thread t([&] {
      if (::setns(fd, CLONE_NEWNET) != 0) {
        result = errnoError(errno, "enter netns " + netns_path);
        return;
      }
      result = listLinksHere(with_addresses);
    });
    t.join();
    ::close(fd);
    return result;
  }

  Result<std::unique_ptr<KernelEventSource>> linkEvents() override {
    nl_sock* nl = nl_socket_alloc();
    if (!nl) return Error{ENOMEM, "failed to allocate netlink socket"};
    nl_socket_disable_seq_check(nl);
    int rc = nl_connect(nl, NETLINK_ROUTE);
    if (rc == 0) rc = nl_socket_add_memberships(nl, RTNLGRP_LINK, RTNLGRP_NSID, 0);
    if (rc == 0) rc = nl_socket_set_nonblocking(nl);
    if (rc != 0) {
      nl_socket_free(nl);
      return Error{0,
                   std::string("failed to subscribe to rtnetlink link events: ") + nl_geterror(rc)};
    }
    return std::unique_ptr<KernelEventSource>(new LinkEvents(nl));
  }
};

}  // namespace

std::shared_ptr<Netlink> makeSysNetlink() {
  return std::make_shared<SysNetlink>();
}

}  // namespace nodegate
