#include "tc_filter.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/netlink.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace nodegate::dns {
namespace {

struct Request {
  nlmsghdr nh;
  tcmsg tc;
  alignas(NLMSG_ALIGNTO) char attrs[256];
};

// Appends one attribute; nullptr when the request is full (a bug here, not an input error).
rtattr* addAttr(Request& req, uint16_t type, const void* data, std::size_t len) {
  const std::size_t off = NLMSG_ALIGN(req.nh.nlmsg_len);
  const std::size_t alen = RTA_LENGTH(len);
  if (off + RTA_ALIGN(alen) > sizeof req) return nullptr;
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + off);
  rta->rta_type = type;
  rta->rta_len = static_cast<unsigned short>(alen);
  if (len != 0) std::memcpy(RTA_DATA(rta), data, len);
  req.nh.nlmsg_len = static_cast<uint32_t>(off + RTA_ALIGN(alen));
  return rta;
}

bool addU32(Request& req, uint16_t type, uint32_t v) {
  return addAttr(req, type, &v, sizeof v) != nullptr;
}

// The kernel's extended ack message ("Exclusivity flag on...", "Filter kind and protocol must be
// specified"...), or "" when it sent none.
std::string extackMessage(const nlmsghdr* nh) {
  if ((nh->nlmsg_flags & NLM_F_ACK_TLVS) == 0) return {};
  const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(nh));
  std::size_t off = NLMSG_HDRLEN + sizeof(nlmsgerr);
  if ((nh->nlmsg_flags & NLM_F_CAPPED) == 0) off += err->msg.nlmsg_len - NLMSG_HDRLEN;
  while (off + sizeof(nlattr) <= nh->nlmsg_len) {
    const auto* a = reinterpret_cast<const nlattr*>(reinterpret_cast<const char*>(nh) + off);
    if (a->nla_len < sizeof(nlattr) || off + a->nla_len > nh->nlmsg_len) break;
    if ((a->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG && a->nla_len > sizeof(nlattr)) {
      const char* s = reinterpret_cast<const char*>(a) + NLA_HDRLEN;
      return std::string(s, strnlen(s, a->nla_len - NLA_HDRLEN));
    }
    off += NLA_ALIGN(a->nla_len);
  }
  return {};
}

// A route netlink socket for one request; closed with the object.
class NetlinkSocket {
 public:
  NetlinkSocket() : fd_(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) {
    if (fd_ < 0) return;
    const int one = 1;
    // Error text from the kernel, without a copy of our request in every reply.
    ::setsockopt(fd_, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    ::setsockopt(fd_, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    // rtnetlink answers at once; a bound keeps a wedged kernel from hanging attach() forever.
    const timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~NetlinkSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  NetlinkSocket(const NetlinkSocket&) = delete;
  NetlinkSocket& operator=(const NetlinkSocket&) = delete;

  // Sends req and hands each answer to on_msg until the kernel's ack (NLMSG_ERROR) or, for a
  // dump, its NLMSG_DONE. A dump the kernel marks interrupted (the filters changed under it) is
  // EAGAIN: its listing may miss filters.
  template <typename Fn>
  Result<void> exchange(const Request& req, const std::string& what, Fn on_msg) {
    if (fd_ < 0) return errnoError(errno, what + ": netlink socket");
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd_, &req, req.nh.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
                 sizeof kernel) < 0)
      return errnoError(errno, what);
    alignas(nlmsghdr) char buf[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errnoError(errno == EAGAIN ? ETIMEDOUT : errno,
                          what + ": no answer from the kernel");
      }
      auto len = static_cast<unsigned>(n);
      for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, len);
           nh = NLMSG_NEXT(nh, len)) {
        if (nh->nlmsg_seq != req.nh.nlmsg_seq) continue;
        if ((nh->nlmsg_flags & NLM_F_DUMP_INTR) != 0)
          return Error{EAGAIN, "failed to " + what + ": the listing changed while it was read"};
        if (nh->nlmsg_type == NLMSG_DONE) return {};
        if (nh->nlmsg_type == NLMSG_ERROR) {
          if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr)))
            return Error{EPROTO, "failed to " + what + ": short netlink error message"};
          const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(nh))->error;
          if (err == 0) return {};
          const std::string detail = extackMessage(nh);
          return errnoError(err, what + (detail.empty() ? "" : " (" + detail + ")"));
        }
        if (auto r = on_msg(nh); !r) return r;
      }
    }
  }

 private:
  int fd_;
};

uint32_t clsactParent(bool ingress) {
  return TC_H_MAKE(TC_H_CLSACT, ingress ? TC_H_MIN_INGRESS : TC_H_MIN_EGRESS);
}

std::string hookName(int ifindex, bool ingress) {
  return "ifindex " + std::to_string(ifindex) + (ingress ? " ingress" : " egress");
}

// The attributes of one filter message: kind, and for cls_bpf its name and program id.
TcFilterEntry parseFilter(const nlmsghdr* nh) {
  const auto* t = static_cast<const tcmsg*>(NLMSG_DATA(nh));
  TcFilterEntry e;
  e.handle = t->tcm_handle;
  e.priority = TC_H_MAJ(t->tcm_info) >> 16;
  int len = static_cast<int>(nh->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(tcmsg)));
  for (auto* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(t) +
                                                 NLMSG_ALIGN(sizeof(tcmsg)));
       RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    const auto type = a->rta_type & NLA_TYPE_MASK;
    if (type == TCA_KIND) {
      const auto* s = static_cast<const char*>(RTA_DATA(a));
      e.kind.assign(s, strnlen(s, RTA_PAYLOAD(a)));
    } else if (type == TCA_OPTIONS) {
      int olen = static_cast<int>(RTA_PAYLOAD(a));
      for (auto* o = static_cast<const rtattr*>(RTA_DATA(a)); RTA_OK(o, olen);
           o = RTA_NEXT(o, olen)) {
        const auto otype = o->rta_type & NLA_TYPE_MASK;
        if (otype == TCA_BPF_NAME) {
          const auto* s = static_cast<const char*>(RTA_DATA(o));
          e.bpf_name.assign(s, strnlen(s, RTA_PAYLOAD(o)));
        } else if (otype == TCA_BPF_ID && RTA_PAYLOAD(o) >= sizeof(uint32_t)) {
          std::memcpy(&e.prog_id, RTA_DATA(o), sizeof e.prog_id);
        }
      }
    }
  }
  return e;
}

}  // namespace

Result<TcFilter> addClsBpfFilter(int ifindex, bool ingress, int prog_fd, uint32_t classid,
                                 const char* name) {
  const std::string what = "add tc filter on " + hookName(ifindex, ingress);
  Request req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(tcmsg));
  req.nh.nlmsg_type = RTM_NEWTFILTER;
  // EXCL: never replace a filter; ECHO: the kernel sends the new filter back with the handle and
  // priority it chose.
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO;
  req.nh.nlmsg_seq = 1;
  req.tc.tcm_family = AF_UNSPEC;
  req.tc.tcm_ifindex = ifindex;
  req.tc.tcm_parent = clsactParent(ingress);
  req.tc.tcm_info = TC_H_MAKE(0, htons(ETH_P_ALL));  // priority 0: the kernel picks one
  rtattr* opts = nullptr;
  bool ok = addAttr(req, TCA_KIND, "bpf", 4) != nullptr &&
            (opts = addAttr(req, TCA_OPTIONS | NLA_F_NESTED, nullptr, 0)) != nullptr &&
            addU32(req, TCA_BPF_FD, static_cast<uint32_t>(prog_fd)) &&
            addAttr(req, TCA_BPF_NAME, name, std::strlen(name) + 1) != nullptr &&
            addU32(req, TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT) &&
            addU32(req, TCA_BPF_CLASSID, classid);
  if (!ok) return Error{EOVERFLOW, "failed to " + what + ": request too long"};
  opts->rta_len = static_cast<unsigned short>(reinterpret_cast<char*>(&req) + req.nh.nlmsg_len -
                                              reinterpret_cast<char*>(opts));

  NetlinkSocket sock;
  TcFilter out;
  bool echoed = false;
  auto r = sock.exchange(req, what, [&](const nlmsghdr* nh) -> Result<void> {
    if (nh->nlmsg_type == RTM_NEWTFILTER && nh->nlmsg_len >= NLMSG_LENGTH(sizeof(tcmsg))) {
      const auto* t = static_cast<const tcmsg*>(NLMSG_DATA(nh));
      out.handle = t->tcm_handle;
      out.priority = TC_H_MAJ(t->tcm_info) >> 16;
      echoed = true;
    }
    return {};
  });
  if (!r) return r.error();
  if (!echoed || out.handle == 0 || out.priority == 0)
    return Error{EPROTO, "failed to " + what + ": the kernel did not echo the new filter"};
  return out;
}

Result<std::vector<TcFilterEntry>> listFilters(int ifindex, bool ingress) {
  const std::string what = "list tc filters on " + hookName(ifindex, ingress);
  Request req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(tcmsg));
  req.nh.nlmsg_type = RTM_GETTFILTER;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = 2;
  req.tc.tcm_family = AF_UNSPEC;
  req.tc.tcm_ifindex = ifindex;
  req.tc.tcm_parent = clsactParent(ingress);
  // A listing the kernel interrupted (filters added or removed meanwhile) is read again.
  for (int attempt = 0;; attempt++) {
    std::vector<TcFilterEntry> out;
    NetlinkSocket sock;
    auto r = sock.exchange(req, what, [&](const nlmsghdr* nh) -> Result<void> {
      if (nh->nlmsg_type == RTM_NEWTFILTER && nh->nlmsg_len >= NLMSG_LENGTH(sizeof(tcmsg)))
        out.push_back(parseFilter(nh));
      return {};
    });
    if (r) return out;
    if (r.error().code != EAGAIN || attempt == 2) return r.error();
  }
}

}  // namespace nodegate::dns
