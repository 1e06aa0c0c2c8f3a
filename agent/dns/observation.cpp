#include "dns/observation.h"

#include <cstring>

#include "dns_tracer.h"

namespace nodegate::dns {

Observation observationOf(const ng_dns_event& ev) {
  Observation o;
  o.ts_ns = ev.ts_ns;
  o.egress = ev.dir == NG_DIR_EGRESS;
  o.response = ev.flags & NG_F_QR;
  o.truncated = ev.flags & NG_F_TC;
  o.tcp = ev.flags & NG_F_TCP;
  o.ipv6 = ev.flags & NG_F_IPV6;
  o.drop = ev.kind == NG_EV_DROP;
  o.saddr = formatAddress(ev, true);
  o.daddr = formatAddress(ev, false);
  o.sport = ev.sport;
  o.dport = ev.dport;
  o.id = ev.dns_id;
  o.qtype = ev.qtype;
  o.rcode = ev.rcode;
  o.qname.assign(ev.qname, strnlen(ev.qname, sizeof ev.qname));
  o.no_answers = ev.flags & NG_F_NOANS;
  o.icmp = ev.flags & NG_F_ICMP;
  o.icmp_code = o.icmp ? ev.rcode : 0;
  o.syn = ev.flags & NG_F_SYN;
  o.rst = ev.flags & NG_F_RST;
  o.ack = ev.flags & NG_F_ACK;
  o.tcp_seq = ev.tcp_seq;
  o.hop = hopFromNumber(ev.hop);
  return o;
}

}  // namespace nodegate::dns
