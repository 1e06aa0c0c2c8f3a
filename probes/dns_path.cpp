#include "dns_path.h"

#include <dirent.h>

#include <cstdio>
#include <set>

#include "processes.h"
#include "text.h"

namespace nodegate {

std::optional<DnsPathSummary> DnsVerdictBoard::summary() const {
  return board_.get();
}

std::string_view guestDnsReason(GuestDnsState s) {
  switch (s) {
    case GuestDnsState::Ok:
      return "Ok";
    case GuestDnsState::SlowFailover:
      return "SlowFailover";
    case GuestDnsState::TruncatedTcpFailed:
      return "TruncatedTcpFailed";
    case GuestDnsState::Refused:
      return "Refused";
    case GuestDnsState::ServerError:
      return "ServerError";
    case GuestDnsState::ClusterNameNotFound:
      return "ClusterNameNotFound";
    case GuestDnsState::Unreachable:
      return "Unreachable";
    case GuestDnsState::NoResponse:
      return "NoResponse";
    case GuestDnsState::ServiceTranslationMissing:
      return "ServiceTranslationMissing";
    case GuestDnsState::NodeLocalCacheDown:
      return "NodeLocalCacheDown";
  }
  return "Unknown";
}

std::string firstNameserver(const VmiDnsConfig& c, const std::vector<std::string>& service_ips,
                            std::string* how) {
  if (c.dns_policy == "None") {
    *how = "dnsPolicy None, dnsConfig.nameservers[0]";
    return c.nameservers.empty() ? "" : c.nameservers.front();
  }
  if (c.dns_policy == "Default") {
    *how = "dnsPolicy Default: the node's resolv.conf, not known to nodegate";
    return "";
  }
  *how = "dnsPolicy " + (c.dns_policy.empty() ? std::string("ClusterFirst") : c.dns_policy) +
         ": the cluster DNS Service";
  if (service_ips.empty()) *how += ", whose address was not read";
  return service_ips.empty() ? "" : service_ips.front();
}

namespace {

constexpr const char* kSocketLbHint =
    "set socketLB.hostNamespaceOnly=true in Cilium's Helm values (cilium-config "
    "bpf-lb-sock-hostns-only: \"true\") and restart the Cilium agents; see Cilium's \"Socket "
    "LoadBalancer Bypass in Pod Namespace\", which names KubeVirt";

std::string ciliumObserved(const CiliumSocketLb& c) {
  return "kube-proxy-replacement=" + (c.kpr_value.empty() ? "(unset)" : c.kpr_value) +
         " bpf-lb-sock=" + (c.sock_value.empty() ? "(unset)" : c.sock_value) +
         " bpf-lb-sock-hostns-only=" + (c.hostns_value.empty() ? "(unset)" : c.hostns_value) +
         " bpf-lb-external-clusterip=" +
         (c.external_clusterip_value.empty() ? "(unset)" : c.external_clusterip_value);
}

CheckResult predicted(std::size_t guests) {
  if (guests > 0)
    return makeResult(kDnsPathCheck, Status::Fail, "ServiceTranslationMissing",
                      "Cilium socket LB is not limited to the host namespace: guest DNS queries to "
                      "the kube-dns ClusterIP will not be translated",
                      kSocketLbHint);
  return makeResult(kDnsPathCheck, Status::Warn, "ServiceTranslationMissing",
                    "no guests yet, but Cilium socket LB is not limited to the host namespace: "
                    "guests scheduled here will not reach the kube-dns ClusterIP",
                    kSocketLbHint);
}

std::string seconds(std::uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ns) / 1e9);
  return buf;
}

// One guest's state as the evidence shows it: the reason, the newest query in that state and, for
// slow failover, what the silent nameserver cost.
std::string guestEvidence(const GuestDnsStatus& vm) {
  std::string s = std::string(guestDnsReason(vm.state)) + ": " + vm.detail;
  if (vm.state == GuestDnsState::SlowFailover)
    s += "; nameserver " + vm.server + " did not answer " + std::to_string(vm.failovers) +
         (vm.failovers == 1 ? " lookup" : " lookups") + ", " + seconds(vm.failover_lost_ns) +
         " lost waiting for it";
  return s;
}

// The check's result for the worst guest's state (not Ok); `failing`: guests not Ok.
CheckResult judged(const GuestDnsStatus& vm, std::size_t failing, bool predicts) {
  const std::string who = " (" + vm.vmi + ": " + vm.detail +
                          (failing > 1 ? "; " + std::to_string(failing) + " guests not Ok" : "") +
                          ")";
  const std::string trace = "`nodegate dns trace --vmi " + vm.vmi + "`";
  const std::string reason(guestDnsReason(vm.state));
  switch (vm.state) {
    case GuestDnsState::NodeLocalCacheDown:
      return makeResult(kDnsPathCheck, Status::Fail, reason,
                        "guest DNS queries go to a node-local DNS cache that is not serving" + who,
                        "the node-local-dns DaemonSet pod on this node is down or not yet ready (a "
                        "new node: cilium/cilium#43080); `kubectl -n kube-system get pods -o wide "
                        "-l k8s-app=node-local-dns` for this node, and its logs");
    case GuestDnsState::ServiceTranslationMissing:
      return makeResult(kDnsPathCheck, Status::Fail, reason,
                        "guest DNS queries leave the host with the service IP untranslated" + who,
                        predicts ? kSocketLbHint
                                 : "the CNI does not translate the DNS ClusterIP for traffic "
                                   "forwarded from pods (Cilium: socketLB.hostNamespaceOnly=true; "
                                   "kube-proxy: check its PREROUTING rules); `nodegate dns trace` "
                                   "shows the hops");
    case GuestDnsState::NoResponse:
      return makeResult(kDnsPathCheck, Status::Fail, reason,
                        "guest DNS queries go unanswered" + who,
                        trace +
                            " shows the last hop each query reached and the kernel's drop "
                            "reason");
    case GuestDnsState::Unreachable:
      return makeResult(
          kDnsPathCheck, Status::Fail, reason,
          "the DNS server side refuses guest queries with ICMP unreachable or a TCP reset" + who,
          "nothing listens on port 53 at " + (vm.server.empty() ? "the server" : vm.server) +
              ", or a firewall rejects DNS (`reject`); " + trace +
              " shows where the ICMP error or reset came from");
    case GuestDnsState::ClusterNameNotFound:
      return makeResult(
          kDnsPathCheck, Status::Fail, reason,
          "a name of the cluster's zones does not exist for a guest (NXDOMAIN/NODATA)" + who,
          "the guest asked a server that cannot see the cluster's zones (its nameservers are not "
          "the cluster DNS: the VMI's dnsPolicy/dnsConfig), or that server forwards to one that "
          "cannot; if the guest did ask the cluster DNS, check that the Service exists");
    case GuestDnsState::ServerError:
      return makeResult(kDnsPathCheck, Status::Warn, reason,
                        "the DNS server answers guests with errors" + who,
                        "check the DNS server's (CoreDNS) logs and its upstream resolvers (the "
                        "Corefile's forward target)");
    case GuestDnsState::Refused:
      return makeResult(kDnsPathCheck, Status::Warn, reason,
                        "the DNS server refuses guest queries (REFUSED)" + who,
                        "DNS server policy: an ACL, no recursion for the guest's address, or a "
                        "zone it does not serve; check the server the guest asked (" +
                            (vm.server.empty() ? std::string("see the trace") : vm.server) + ")");
    case GuestDnsState::TruncatedTcpFailed:
      return makeResult(kDnsPathCheck, Status::Warn, reason,
                        "answers too big for UDP do not reach guests over TCP" + who,
                        "allow DNS over TCP (port 53/tcp) on the path: a NetworkPolicy or "
                        "firewall passes only UDP; " +
                            trace + " shows how the TCP retry ended");
    case GuestDnsState::SlowFailover:
      return makeResult(
          kDnsPathCheck, Status::Warn, reason,
          "guest lookups wait for a silent nameserver before the next one answers" + who,
          "the VM's first nameserver " + vm.server +
              " does not answer: fix it or remove it from the VM's DNS "
              "configuration (dnsPolicy: None with explicit nameservers, options "
              "timeout:1 attempts:2)");
    case GuestDnsState::Ok:
      break;
  }
  return makeResult(kDnsPathCheck, Status::Pass, "Ok", "guest DNS answered");
}

// Each VMI on the node whose first nameserver the tracer has seen failing, named in the evidence
// with the server and how it failed, and nodegate_dns_first_nameserver_failing per VMI (1: seen
// failing, 0: not; no series where the first nameserver is unknown). Without a complete pod view
// nothing is known, and said so.
void predictions(const DnsPathInputs& in, const DnsPathSummary& s, CheckResult& r) {
  const char* kSource = "vmi first nameservers";
  if (!in.vmi_dns) {
    r.evidence.push_back({kSource,
                          "unknown: no pod view (no API connection, or kube.pod_watch "
                          "false)"});
    return;
  }
  if (!in.vmi_dns->complete) {
    r.evidence.push_back(
        {kSource, "unknown: the pods on this node are not known (" + in.vmi_dns->why + ")"});
    return;
  }
  std::size_t predicted = 0, unknown = 0;
  std::set<std::string> unknown_why;
  for (const auto& c : in.vmi_dns->vmis) {
    std::string how;
    const std::string first = firstNameserver(c, in.service_ips, &how);
    if (first.empty()) {
      ++unknown;
      if (c.dns_policy != "None" && c.dns_policy != "Default" && !in.service_detail.empty())
        how += " (" + in.service_detail + ")";  // why the Service's address is not known
      unknown_why.insert(how);
      continue;
    }
    const auto* f = [&]() -> const DnsPathSummary::FailingServer* {
      for (const auto& x : s.failing_servers)
        if (x.server == first) return &x;
      return nullptr;
    }();
    const auto slash = c.vmi.find('/');
    MetricSample m;
    m.name = "nodegate_dns_first_nameserver_failing";
    m.help =
        "1 when the DNS tracer has seen the VMI's first nameserver failing (lost, unreachable, "
        "untranslated or silent before a failover), 0 when not";
    m.labels = {{"namespace", slash == std::string::npos ? "" : c.vmi.substr(0, slash)},
                {"vmi", slash == std::string::npos ? c.vmi : c.vmi.substr(slash + 1)}};
    m.value = f ? 1 : 0;
    r.metrics.push_back(std::move(m));
    if (!f) continue;
    ++predicted;
    r.evidence.push_back({"predicted to fail " + c.vmi,
                          "first nameserver " + first + " (" + how +
                              ") seen failing: " + std::string(guestDnsReason(f->state)) + " (" +
                              f->vmi + ": " + f->detail + ")"});
  }
  std::string summary = std::to_string(in.vmi_dns->vmis.size()) + " VMIs on this node, " +
                        std::to_string(predicted) + " predicted to fail";
  if (unknown) {
    summary += ", " + std::to_string(unknown) + " with an unknown first nameserver (";
    for (auto it = unknown_why.begin(); it != unknown_why.end(); ++it)
      summary += (it == unknown_why.begin() ? "" : "; ") + *it;
    summary += ")";
  }
  r.evidence.push_back({kSource, summary});
}

// Without cilium-config nothing says whether guests' DNS will be translated: not a pass.
CheckResult ciliumForbidden() {
  return makeResult(kDnsPathCheck, Status::Unknown, "CiliumConfigForbidden",
                    "the API server refused to show cilium-config, so the Cilium socket-LB "
                    "setting that predicts lost guest DNS cannot be checked",
                    "grant the agent's service account get on configmaps/cilium-config in "
                    "Cilium's namespace (chart value rbac.readCiliumConfig=true)");
}

}  // namespace

CheckResult evaluateDnsPath(const DnsPathInputs& in) {
  CheckResult r;
  const bool predicts = in.cilium.predictsIncident();
  if (in.tracer) {
    const DnsPathSummary& s = *in.tracer;
    const GuestDnsStatus* worst = nullptr;
    std::uint64_t answered = 0;
    std::size_t failing = 0;
    for (const auto& vm : s.vms) {
      answered += vm.answered;
      if (vm.state == GuestDnsState::Ok) continue;
      ++failing;
      if (!worst || vm.state > worst->state) worst = &vm;
    }
    if (worst) {
      r = judged(*worst, failing, predicts);
    } else if (answered > 0) {
      r = makeResult(kDnsPathCheck, Status::Pass, "Ok",
                     "guest DNS answered end to end (" + std::to_string(answered) +
                         " queries from " + std::to_string(s.vms.size()) +
                         " guests in the window)");
    } else if (predicts) {
      r = predicted(s.guests);
    } else if (in.cilium_forbidden) {
      r = ciliumForbidden();
    } else if (s.guests == 0) {
      r = makeResult(kDnsPathCheck, Status::Pass, "NoGuests",
                     "no virt-launcher on this node to trace");
    } else {
      r = makeResult(
          kDnsPathCheck, Status::Pass, "NoQueries",
          "tracing " + std::to_string(s.guests) + " guests; none sent a DNS query in the window");
    }
    r.evidence.push_back({"dns tracer", std::to_string(s.guests) + " guests, " +
                                            std::to_string(s.attached_hops) + " hops attached, " +
                                            std::to_string(s.queries_in_window) +
                                            " queries in the window"});
    for (const auto& vm : s.vms)
      if (vm.state != GuestDnsState::Ok)
        r.evidence.push_back({"guest " + vm.vmi, guestEvidence(vm)});
    predictions(in, s, r);
  } else if (predicts) {
    r = predicted(in.launchers);
  } else if (in.cilium_forbidden) {
    r = ciliumForbidden();
  } else if (in.launchers == 0 && in.launchers_readable) {
    r = makeResult(kDnsPathCheck, Status::Pass, "NoGuests",
                   "no virt-launcher process on this node, so no guest DNS path to check");
  } else {
    r = makeResult(kDnsPathCheck, Status::Unknown, "TracerNotRunning",
                   std::to_string(in.launchers) +
                       " virt-launcher processes, but no DNS tracer runs in this process",
                   "run `nodegate agent --dns-trace=on` as root (BPF) and read this check from the "
                   "agent; a one-shot `nodegate check` cannot watch queries");
  }
  if (in.cilium.known) r.evidence.push_back({"cilium-config", ciliumObserved(in.cilium)});
  if (!in.cilium_note.empty()) r.evidence.push_back({"cilium-config", in.cilium_note});
  if (!in.cilium_error.empty()) r.evidence.push_back({"cilium-config", in.cilium_error});
  for (const auto& line : in.corefile) r.evidence.push_back({"coredns Corefile", line});
  if (!in.nodelocal.empty()) r.evidence.push_back({"node-local-dns", in.nodelocal});
  r.evidence.push_back({"virt-launcher processes",
                        in.launchers_readable ? std::to_string(in.launchers) : "unreadable"});
  return r;
}

CheckResult DnsPathProbe::run(const ProbeContext& ctx) {
  DnsPathInputs in;
  if (source_) in.tracer = source_->summary();
  // One snapshot of the cluster's facts for the whole run (the Cilium settings and the Corefile
  // of the same read).
  const auto facts = cluster_ ? cluster_->facts() : std::nullopt;
  std::string path = ctx.config.text(kDnsPathCiliumFileSetting);
  if (!path.empty()) {
    // An exported copy (`kubectl get cm -n kube-system cilium-config -o json`) for a one-shot
    // `nodegate check`; the agent reads the ConfigMap from the API (agent/kube/cluster_dns.h).
    auto text = readFile(path, 1u << 20);
    if (!text) {
      in.cilium_error = text.error().message;
    } else if (auto c = parseCiliumConfig(*text)) {
      in.cilium = *c;
    } else {
      in.cilium_error = c.error().message + " (" + path + ")";
    }
  } else if (const auto& f = facts) {
    switch (f->cilium_read) {
      case ApiRead::Ok:
        in.cilium = f->cilium;
        break;
      case ApiRead::NotFound:
        in.cilium_note = f->cilium_detail;
        break;
      case ApiRead::Forbidden:
        in.cilium_forbidden = true;
        in.cilium_error = f->cilium_detail;
        break;
      case ApiRead::Failed:
        in.cilium_error = f->cilium_detail;
        break;
    }
  }
  if (vmi_dns_) in.vmi_dns = vmi_dns_->configs();
  if (facts) {
    in.service_read = facts->service_read == ApiRead::Ok;
    in.service_ips = facts->service_ips;
    in.service_detail = facts->service_detail;
  } else {
    in.service_detail = "the cluster's DNS facts not read yet, or no API connection";
  }
  if (facts) {
    if (facts->corefile_read == ApiRead::Ok)
      in.corefile = describeCorefile(facts->corefile);
    else if (!facts->corefile_detail.empty())
      in.corefile = {facts->corefile_detail};
    in.nodelocal = facts->nodelocal_detail;
  }
  if (in.tracer) {
    // The tracer's discovery follows the launchers already (proc connector, rescans): a scan of
    // every process's comm here would make each probe cycle grow with the host's process count.
    in.launchers = in.tracer->launcher_processes;
  } else {
    DIR* d = ::opendir(ctx.host.proc().c_str());
    in.launchers_readable = d != nullptr;
    if (d) ::closedir(d);
    in.launchers = findVirtLaunchers(ctx.host).size();
  }
  return evaluateDnsPath(in);
}

}  // namespace nodegate
