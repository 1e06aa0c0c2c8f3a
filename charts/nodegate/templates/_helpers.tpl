{{/* Names, labels and the few values several templates derive. */}}
{{- define "nodegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodegate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "nodegate.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "nodegate.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every namespaced object (namespaceOverride: a parent chart installs this one
     into another namespace than its own release's). */}}
{{- define "nodegate.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nodegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "nodegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodegate
{{- end -}}

{{- define "nodegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nodegate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image: repository (with global.imageRegistry in front when set), tag or digest. The
     chart has no published default image: it refuses to render without one. */}}
{{- define "nodegate.image" -}}
{{- if not .Values.image.repository -}}
{{- fail "image.repository is not set, and nodegate publishes no image to default to. Build one from this repository: `tools/image/build.sh BUILD_DIR OUT_DIR` (Debian's mmdebstrap and umoci, no container engine) or tools/image/Dockerfile with buildah, podman or docker (docs/install.md, \"The image\"), push it to a registry your nodes pull from, then install with --set image.repository=REGISTRY/nodegate --set image.tag=TAG (or image.digest=sha256:...)" -}}
{{- end -}}
{{- include "nodegate.imageRef" (dict "registry" (.Values.global | default dict).imageRegistry "repository" .Values.image.repository "tag" (default .Chart.AppVersion .Values.image.tag) "digest" .Values.image.digest) -}}
{{- end -}}

{{/* The gate label key: <prefix>/vm-ready unless set. */}}
{{- define "nodegate.gateLabelKey" -}}
{{- default (printf "%s/vm-ready" .Values.agent.prefix) .Values.agent.gateLabel.key -}}
{{- end -}}

{{- define "nodegate.taintKey" -}}
{{- printf "%s/not-ready" .Values.agent.prefix -}}
{{- end -}}

{{/* Node condition types nodegate owns (DESIGN.md; test/chart/chart_test.py keeps it equal to the
    checks' conditions, docs/config.md). */}}
{{- define "nodegate.conditionTypes" -}}
VirtualizationReady LocalStorageHealthy GuestDNSHealthy TimeSynchronized KubeVirtNodeHealthy
{{- end -}}

{{/* The `job` label Prometheus gives the agent's scrape. */}}
{{- define "nodegate.jobLabel" -}}
{{- if .Values.prometheusRule.jobLabel -}}
{{- .Values.prometheusRule.jobLabel -}}
{{- else if .Values.podMonitor.enabled -}}
{{- printf "%s/%s" (include "nodegate.namespace" .) (include "nodegate.fullname" .) -}}
{{- else -}}
{{- include "nodegate.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* "true" on Kubernetes 1.30+: ValidatingAdmissionPolicy v1 and securityContext.appArmorProfile are GA there. */}}
{{- define "nodegate.kube130" -}}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}

{{/* "true" when the device-probe container is rendered (privilege separation). */}}
{{- define "nodegate.deviceProbe" -}}
{{- if and .Values.deviceProbe.enabled (not .Values.privileged) -}}true{{- end -}}
{{- end -}}

{{/* The device-probe socket, in the emptyDir both containers mount at /run/nodegate. */}}
{{- define "nodegate.deviceProbeSocket" -}}/run/nodegate/device-probe.sock{{- end -}}

{{/* The device-probe container's command line: fixed paths, nothing a request can change. */}}
{{- define "nodegate.deviceProbeArgs" -}}
- device-probe
- {{ printf "--socket=%s" (include "nodegate.deviceProbeSocket" .) | quote }}
- --host-root=/host
- {{ printf "--lvm-command=%s" .Values.agent.lvmCommand | quote }}
- {{ printf "--log-level=%s" .Values.deviceProbe.logLevel | quote }}
{{- end -}}

{{/* Settings the agent and a `nodegate check` run by hand in its container share (the CLI reads
     them from the environment, agent/cli/options.h): one place, so both see the same host root,
     policy file, lvm command and device-probe helper. */}}
{{- define "nodegate.env" -}}
- name: NODEGATE_HOST_ROOT
  value: /host
- name: NODEGATE_CONFIG
  value: /etc/nodegate/config.json
- name: NODEGATE_LVM_COMMAND
  value: {{ .Values.agent.lvmCommand | quote }}
- name: NODEGATE_RUNBOOK_BASE_URL
  value: {{ printf "%schecks/" .Values.prometheusRule.runbookBaseURL | quote }}
{{- if include "nodegate.deviceProbe" . }}
- name: NODEGATE_DEVICE_PROBE
  value: {{ include "nodegate.deviceProbeSocket" . | quote }}
{{- end }}
{{- end -}}

{{/*
The health listener (/healthz, /readyz) that the kubelet's probes ask. With hostNetwork (the
default) it binds the node's loopback and the probes connect to 127.0.0.1: the kubelet runs in
the node's network namespace, so it reaches the listener, and no client on the network can hold
its workers. Without hostNetwork the kubelet can only reach the pod's own address.
*/}}
{{- define "nodegate.healthAddress" -}}
{{- if .Values.hostNetwork }}127.0.0.1{{ else }}0.0.0.0{{ end -}}
{{- end -}}

{{/* A probe's httpGet: (list $ "/healthz"). */}}
{{- define "nodegate.healthProbe" -}}
{{- $ := index . 0 -}}
{{- if $.Values.hostNetwork -}}
host: 127.0.0.1
{{ end -}}
path: {{ index . 1 }}
port: {{ $.Values.agent.healthPort }}
{{- end -}}

{{/* The agent's command line; test/chart runs exactly these arguments (with nodegate.env). */}}
{{- define "nodegate.args" -}}
- agent
- {{ printf "--listen=%s:%v" (ternary "127.0.0.1" "0.0.0.0" .Values.kubeRBACProxy.enabled) .Values.agent.metricsPort | quote }}
- {{ printf "--debug-listen=127.0.0.1:%v" .Values.agent.debugPort | quote }}
- {{ printf "--health-listen=%s:%v" (include "nodegate.healthAddress" .) .Values.agent.healthPort | quote }}
- {{ printf "--kube=%s" .Values.agent.kube | quote }}
- {{ printf "--prefix=%s" .Values.agent.prefix | quote }}
- {{ printf "--gate-label=%s=%s" (include "nodegate.gateLabelKey" .) .Values.agent.gateLabel.value | quote }}
{{- if .Values.agent.taint }}
- --taint
{{- end }}
- {{ printf "--resync=%v" .Values.agent.resync | quote }}
- {{ printf "--dns-trace=%s" .Values.agent.dnsTrace | quote }}
{{- range .Values.agent.dnsNetns }}
- {{ printf "--dns-netns=%s" . | quote }}
{{- end }}
- {{ printf "--log-level=%s" .Values.agent.logLevel | quote }}
{{- range .Values.agent.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* REGISTRY/REPOSITORY@DIGEST or :TAG; an empty registry leaves the repository as it is. */}}
{{- define "nodegate.imageRef" -}}
{{- $repo := .repository -}}
{{- with .registry -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- if .digest -}}
{{- printf "%s@%s" $repo .digest -}}
{{- else -}}
{{- printf "%s:%s" $repo .tag -}}
{{- end -}}
{{- end -}}

{{/* The kube-rbac-proxy image: global.imageRegistry, when set, applies to it as to nodegate's. */}}
{{- define "nodegate.rbacProxyImage" -}}
{{- $i := .Values.kubeRBACProxy.image -}}
{{- include "nodegate.imageRef" (dict "registry" (default $i.registry (.Values.global | default dict).imageRegistry) "repository" $i.repository "tag" $i.tag "digest" $i.digest) -}}
{{- end -}}
