#include "kube_wiring.h"

#include <algorithm>

#include "dns_path.h"
#include "local_pv.h"
#include "nodegate/agent_settings.h"
#include "nodegate/log.h"
#include "publish/kube/dry_run_publisher.h"

namespace nodegate {
namespace {

std::chrono::seconds seconds(double s) {
  return std::chrono::seconds(static_cast<long long>(s));
}

// The settings a connection cannot work with (checked before anything is started).
Result<void> checkUsable(const Options& opts, const KubeSettings& s) {
  if (opts.node_name.empty())
    return Error{EINVAL,
                 "failed to start kubernetes publisher: no node name (--node-name or $NODE_NAME)"};
  const auto& p = s.publisher;
  if (s.connection.qps <= 0 || s.connection.burst < 1 || p.heartbeat.count() < 0 ||
      p.watch_timeout_s < 1)
    return Error{EINVAL,
                 "failed to start kubernetes publisher: kube.qps must be > 0, kube.burst >= 1, "
                 "kube.heartbeat_seconds >= 0, kube.watch_timeout_seconds >= 1"};
  return {};
}

}  // namespace

KubeSettings kubeSettings(const Options& opts, const Config& config) {
  KubeSettings s;
  s.connection.qps = config.number(kKubeQpsSetting);
  s.connection.burst = config.number(kKubeBurstSetting);

  auto& p = s.publisher;
  p.publish.node_name = opts.node_name;
  p.publish.prefix = opts.prefix;
  p.publish.gate_label = opts.gateLabel();
  p.publish.taint = opts.taint;
  p.publish.required = config.required;
  p.heartbeat = seconds(config.number(kKubeHeartbeatSetting));
  p.startup_jitter_s = config.number(kKubeStartupJitterSetting);
  p.watch_timeout_s = config.number(kKubeWatchTimeoutSetting);
  p.event_namespace = config.text(kKubeEventNamespaceSetting);
  p.release_delay = seconds(config.number(kKubeLabelReleaseDelaySetting));

  s.pod_watch = config.flag(kKubePodWatchSetting);
  s.pods.node_name = opts.node_name;
  s.pods.watch_timeout_s = p.watch_timeout_s;
  s.pods.forbidden_retry_s = config.number(kKubePodForbiddenRetrySetting);

  s.pv_discovery = config.flag(kLocalPvApiDiscoverySetting);
  auto& v = s.pvs;
  v.node_name = opts.node_name;
  v.resync = std::chrono::duration<double>(opts.resync_seconds);
  v.page_size = static_cast<std::size_t>(config.number(kLocalPvApiPageSizeSetting));
  v.timeout_s = config.number(kLocalPvApiTimeoutSetting);
  v.max_age_s = config.number(kLocalPvApiMaxAgeSetting, 3 * opts.resync_seconds);
  v.node_keys = config.list(kLocalPvApiNodeKeysSetting);

  auto& c = s.cluster_dns;
  // Cilium's settings, the Corefiles and CoreDNS's pods change rarely; four cached reads per
  // node every 5 minutes is 67 requests/s for 5,000 nodes, where the resync cadence (60 s)
  // would be 333.
  c.refresh = seconds(std::max(opts.resync_seconds, config.number(kKubeClusterDnsRefreshSetting)));
  c.startup_jitter_s = p.startup_jitter_s;
  c.cilium_namespace = config.text(kDnsPathCiliumNamespaceSetting);
  c.cilium_configmap = config.text(kDnsPathCiliumConfigMapSetting);
  c.dns_namespace = config.text(kDnsPathDnsNamespaceSetting);
  c.dns_service = config.text(kDnsPathDnsServiceSetting);
  c.corefile_configmap = config.text(kDnsPathCorefileConfigMapSetting);
  c.nodelocal_configmap = config.text(kDnsPathNodeLocalConfigMapSetting);
  return s;
}

Result<KubeSide> startKubeSide(const Options& opts, const KubeSettings& settings,
                               prometheus::Registry& registry,
                               std::shared_ptr<ClusterDnsBoard> facts,
                               std::shared_ptr<kube::GateHoldBoard> holds) {
  KubeSide side;
  auto publisher_options = settings.publisher;
  publisher_options.holds = holds;
  auto dry_run = [&] {
    side.publisher = std::make_shared<kube::DryRunPublisher>(
        settings.publisher.publish, settings.publisher.release_delay, holds);
  };
  if (opts.kube == "none") {
    dry_run();
    return side;
  }
  auto conn = [&]() -> Result<std::shared_ptr<kube::Connection>> {
    if (auto usable = checkUsable(opts, settings); !usable) return usable.error();
    auto c = kube::connect(opts.kube, opts.kubeconfig, settings.connection, registry);
    if (!c)
      return Error{c.error().code, "failed to start kubernetes publisher: " + c.error().message};
    return c;
  }();
  if (!conn) {
    if (opts.kube != "auto") return conn.error();
    log::warn("no kubernetes api: logging what would be published",
              {{"error", conn.error().message}});
    dry_run();
    return side;
  }
  side.connection = *conn;
  if (settings.pod_watch)
    side.pods = std::make_shared<kube::PodSource>(side.connection, settings.pods);
  else
    log::warn(
        "pod watch off (kube.pod_watch=false): a closed gate keeps every label, only the "
        "taint closes the node",
        {{"node", opts.node_name}});
  side.kubevirt = std::make_shared<kube::KubeVirtFactsBoard>(side.pods);
  publisher_options.node_seen = [board = side.kubevirt](const nlohmann::json& node) {
    board->nodeSeen(node);
  };
  side.publisher = kube::startPublisher(side.connection, publisher_options, side.pods);
  if (settings.pv_discovery) {
    log::info("local-pv api discovery on",
              {{"server", kube::redactedUrl(side.connection->config().server)},
               {"node", opts.node_name}});
    side.api_pvs = std::make_shared<kube::ApiPvSource>(side.connection, settings.pvs);
  }
  side.cluster_dns =
      std::make_unique<kube::ClusterDnsSource>(side.connection, settings.cluster_dns, facts);
  return side;
}

}  // namespace nodegate
