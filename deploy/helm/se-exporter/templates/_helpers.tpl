{{/* The chart's name, and the name of every object (63 characters at most, as DNS labels). */}}
{{- define "se-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "se-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "se-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "se-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "se-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "se-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "se-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "se-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "se-exporter.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "se-exporter.windowsImage" -}}
{{- $repository := required "windows.enabled is true but windows.image.repository is empty: se-exporter publishes no Windows image; build one and name it (docs/helm.md, Windows node pools)" .Values.windows.image.repository -}}
{{- printf "%s:%s" $repository (default (printf "%s-windows-ltsc2022" .Chart.AppVersion) .Values.windows.image.tag) -}}
{{- end -}}

{{- define "se-exporter.approvalConfigMap" -}}
{{- default (printf "%s-approval" (include "se-exporter.fullname" .)) .Values.approval.existingConfigMap -}}
{{- end -}}

{{- define "se-exporter.actionsConfigMap" -}}
{{- default (printf "%s-actions" (include "se-exporter.fullname" .)) .Values.actions.existingConfigMap -}}
{{- end -}}

{{/* The exporter's arguments: the subcommand, the flags the chart sets, the user's flags, extraArgs.
A flag of the user's replaces the chart's own: the exporter refuses a flag given twice. */}}
{{- define "se-exporter.args" -}}
- run
{{- if not (hasKey .Values.flags "web.listen-address") }}
- --web.listen-address=:10160
{{- end }}
{{- if .Values.approval.enabled }}
- --approval.config=/etc/se-exporter/approval/policy.yaml
{{- end }}
{{- if .Values.actions.enabled }}
- --actions.config=/etc/se-exporter/actions/actions.yaml
{{- end }}
{{- if .Values.webConfig.existingSecret }}
- --web.config.file=/etc/se-exporter/web/web.yml
{{- end }}
{{- range $flag, $value := .Values.flags }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The OTLP variables, when an endpoint is set (or the node-local collector is asked for). */}}
{{- define "se-exporter.otelEnv" -}}
{{- $otel := .Values.opentelemetry -}}
{{- if or $otel.endpoint $otel.nodeLocalCollector }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $otel.protocol | quote }}
{{- if $otel.nodeLocalCollector }}
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ printf "http://$(HOST_IP):%s" (ternary "4317" "4318" (eq $otel.protocol "grpc")) | quote }}
{{- else }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $otel.endpoint | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The pod's identity, for OTLP resources (the exporter learns the VM name from IMDS itself). */}}
{{- define "se-exporter.podEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_RESOURCE_ATTRIBUTES
  value: k8s.node.name=$(NODE_NAME),k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)
{{- end -}}

{{/* The scrape endpoint's relabeling: the node label first, then the user's. */}}
{{- define "se-exporter.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
  action: replace
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: instance
  action: replace
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end -}}
