// Settings of the agent's own parts that are not checks, under checks.<section> in --config
// (nodegate/spec.h): declared here so that validation (probes/registry.cpp's configSchema) and
// the readers (agent/kube, agent/publish/kube) share one declaration.
#pragma once

#include "nodegate/spec.h"

namespace nodegate {

inline constexpr char kKubeSection[] = "kube";
inline const SettingSpec kKubeQpsSetting = numberSetting(
    kKubeSection, "qps", 5, 0.1, 1000, "API requests per second, sustained (client-side limit)");
inline const SettingSpec kKubeBurstSetting =
    numberSetting(kKubeSection, "burst", 10, 1, 10000, "API requests allowed in a burst");
inline const SettingSpec kKubeHeartbeatSetting =
    numberSetting(kKubeSection, "heartbeat_seconds", 300, 0, 86400,
                  "rewrite unchanged conditions this often, seconds (0: never)");
inline const SettingSpec kKubeStartupJitterSetting =
    numberSetting(kKubeSection, "startup_jitter_seconds", 2, 0, 600,
                  "random delay before the first write, spreading a fleet restart, seconds");
inline const SettingSpec kKubeWatchTimeoutSetting =
    numberSetting(kKubeSection, "watch_timeout_seconds", 300, 1, 3600,
                  "length of one Node watch, jittered up to +50 %, seconds");
inline const SettingSpec kKubeEventNamespaceSetting = textSetting(
    kKubeSection, "event_namespace", "default", "namespace of the Events it writes", {}, 63);
inline const SettingSpec kKubeClusterDnsRefreshSetting =
    numberSetting(kKubeSection, "cluster_dns_refresh_seconds", 300, 1, 86400,
                  "re-read Cilium's ConfigMap and the kube-dns EndpointSlices this often (at "
                  "least --resync), seconds");
inline const SettingSpec kKubeLabelReleaseDelaySetting =
    numberSetting(kKubeSection, "label_release_delay_seconds", 10, 0, 600,
                  "a label running pods could select is removed only after nodegate's NoSchedule "
                  "taint has been on the Node this long (a VM bound just before has time to show "
                  "up), seconds");
inline const SettingSpec kKubePodWatchSetting =
    flagSetting(kKubeSection, "pod_watch", true,
                "list and watch the pods bound to this node (needs RBAC list/watch on pods); "
                "false: no label is ever removed while the gate is closed, only the taint closes "
                "the node");
inline const SettingSpec kKubePodForbiddenRetrySetting =
    numberSetting(kKubeSection, "pod_forbidden_retry_seconds", 60, 1, 3600,
                  "after the API refused the pod list or watch (401/403: no RBAC), ask again this "
                  "often — a granted Role takes effect within it; refusals are not transient, so "
                  "faster would only spend the request budget on 403s, seconds");
inline const SectionSpec kKubeSectionSpec{
    .name = kKubeSection,
    .summary = "the Kubernetes API connection and publisher",
    .settings = {&kKubeQpsSetting, &kKubeBurstSetting, &kKubeHeartbeatSetting,
                 &kKubeStartupJitterSetting, &kKubeWatchTimeoutSetting, &kKubeEventNamespaceSetting,
                 &kKubeClusterDnsRefreshSetting, &kKubeLabelReleaseDelaySetting,
                 &kKubePodWatchSetting, &kKubePodForbiddenRetrySetting},
};

}  // namespace nodegate
