{{/* Names: <fullname>-metad, <fullname>-bookie, <fullname>-broker. */}}
{{- define "strata.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "strata.labels" -}}
app.kubernetes.io/name: strata
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one role: include with (list $ "metad"). */}}
{{- define "strata.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: strata
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "strata.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The DNS suffix of a role's headless service: svc.ns.svc.domain */}}
{{- define "strata.domain" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%s.%s.svc.%s" (include "strata.fullname" $) (index . 1) $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/* metad client endpoints: every member's stable name. */}}
{{- define "strata.metadEndpoints" -}}
{{- $full := include "strata.fullname" . -}}
{{- $domain := include "strata.domain" (list . "metad") -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.metad.replicas) -}}
{{- $eps = append $eps (printf "%s-metad-%d.%s:%d" $full $i $domain (int $.Values.metad.ports.grpc)) -}}
{{- end -}}
{{- join "," $eps -}}
{{- end -}}

{{/* metad's --peers: id=raftAddress for every member (ids are pod names). */}}
{{- define "strata.metadPeers" -}}
{{- $full := include "strata.fullname" . -}}
{{- $domain := include "strata.domain" (list . "metad") -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.metad.replicas) -}}
{{- $peers = append $peers (printf "%s-metad-%d=%s-metad-%d.%s:%d" $full $i $full $i $domain (int $.Values.metad.ports.raft)) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{- define "strata.brokerBootstrap" -}}
{{- printf "%s-broker.%s.svc.%s:%d" (include "strata.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.broker.ports.grpc) -}}
{{- end -}}

{{/* Environment every role shares. */}}
{{- define "strata.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: STRATA_ID
  value: "$(POD_NAME)"
- name: STRATA_METAD
  value: {{ include "strata.metadEndpoints" . | quote }}
- name: STRATA_BROKER
  value: {{ include "strata.brokerBootstrap" . | quote }}
- name: STRATA_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: STRATA_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
{{- if .Values.security.insecure }}
- name: STRATA_INSECURE
  value: "true"
{{- end }}
{{- end -}}

{{/* Extra STRATA_* settings of a role from values: (list $ .Values.bookie.env). */}}
{{- define "strata.extraEnv" -}}
{{- range $k, $v := index . 1 }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end -}}
{{- end -}}

{{/* Pod annotations: Prometheus scrape hints on the admin port. */}}
{{- define "strata.podAnnotations" -}}
{{- $ := index . 0 -}}
{{- if $.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 1 | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Anti-affinity spreading one role's pods: (list $ "bookie"). */}}
{{- define "strata.affinity" -}}
{{- $ := index . 0 -}}
{{- if eq $.Values.antiAffinity "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: {{ $.Values.antiAffinityTopologyKey }}
        labelSelector:
          matchLabels:
            {{- include "strata.selector" . | nindent 12 }}
{{- else if eq $.Values.antiAffinity "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: {{ $.Values.antiAffinityTopologyKey }}
          labelSelector:
            matchLabels:
              {{- include "strata.selector" . | nindent 14 }}
{{- end }}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Readiness and liveness probes on the admin port: (port). */}}
{{- define "strata.probes" -}}
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet: {path: /livez, port: admin}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}
