#include "dns_path.h"

#include <dirent.h>

#include "processes.h"
#include "text.h"

namespace nodegate {

std::optional<DnsPathSummary> DnsVerdictBoard::summary() const {
  return board_.get();
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
    for (const auto& vm : s.vms) {
      answered += vm.answered;
      if (vm.state != GuestDnsState::Ok && (!worst || vm.state > worst->state)) worst = &vm;
    }
    if (worst && worst->state == GuestDnsState::NodeLocalCacheDown) {
      r = makeResult(kDnsPathCheck, Status::Fail, "NodeLocalCacheDown",
                     "guest DNS queries go to a node-local DNS cache that is not serving (" +
                         worst->vmi + ": " + worst->detail + ")",
                     "the node-local-dns DaemonSet pod on this node is down or not yet ready (a "
                     "new node: cilium/cilium#43080); `kubectl -n kube-system get pods -o wide "
                     "-l k8s-app=node-local-dns` for this node, and its logs");
    } else if (worst && worst->state == GuestDnsState::ServiceTranslationMissing) {
      r = makeResult(kDnsPathCheck, Status::Fail, "ServiceTranslationMissing",
                     "guest DNS queries leave the host with the service IP untranslated (" +
                         worst->vmi + ": " + worst->detail + ")",
                     predicts
                         ? kSocketLbHint
                         : "the CNI does not translate the DNS ClusterIP for traffic forwarded "
                           "from pods (Cilium: socketLB.hostNamespaceOnly=true; kube-proxy: "
                           "check its PREROUTING rules); `nodegate dns trace` shows the hops");
    } else if (worst && worst->state == GuestDnsState::NoResponse) {
      r = makeResult(kDnsPathCheck, Status::Fail, "NoResponse",
                     "guest DNS queries go unanswered (" + worst->vmi + ": " + worst->detail + ")",
                     "`nodegate dns trace --vmi " + worst->vmi +
                         "` shows the last hop each query reached and the kernel's drop reason");
    } else if (worst && worst->state == GuestDnsState::ServerError) {
      r = makeResult(
          kDnsPathCheck, Status::Warn, "ServerError",
          "the DNS server answers guests with errors (" + worst->vmi + ": " + worst->detail + ")",
          "check the DNS server's (CoreDNS) logs and its upstream resolvers");
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
      if (vm.state != GuestDnsState::Ok) r.evidence.push_back({"guest " + vm.vmi, vm.detail});
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
