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
{{- else }}
# Mutual TLS on every listener with the pod's own certificate (issued by
# the init container "certificate"), the admin port over https, /metrics
# behind the admin token.
- name: STRATA_TLS_CERT_FILE
  value: /tls/node.crt
- name: STRATA_TLS_KEY_FILE
  value: /tls/node.key
- name: STRATA_TLS_CA_FILE
  value: /tls/ca.crt
- name: STRATA_ADMIN_TLS
  value: "true"
- name: STRATA_ADMIN_TOKEN_FILE
  value: /admin-token/token
# The CLI in this container (kubectl exec ... strata cluster status) acts
# with the pod's own certificate: what the node may do, nothing more.
- name: STRATA_TLS_CA
  value: /tls/ca.crt
- name: STRATA_TLS_CERT
  value: /tls/node.crt
- name: STRATA_TLS_KEY
  value: /tls/node.key
{{- end }}
{{- end -}}

{{/* Secrets of the secure default (docs/deploy.md): the CA, the admin
certificate (both made by the Job in certificates.yaml) and the admin
token. */}}
{{- define "strata.caSecret" -}}
{{- .Values.security.tls.caSecret | default (printf "%s-ca" (include "strata.fullname" .)) -}}
{{- end -}}
{{- define "strata.adminSecret" -}}
{{- printf "%s-admin" (include "strata.fullname" .) -}}
{{- end -}}
{{- define "strata.tokenSecret" -}}
{{- .Values.security.adminTokenSecret | default (printf "%s-admin-token" (include "strata.fullname" .)) -}}
{{- end -}}

{{/* The init container that issues the pod's certificate from the CA
Secret, mounted here only: (list $ role hosts). Its name is the pod's
name (the node's id), its hosts the names and addresses others dial. */}}
{{- define "strata.certificateInit" -}}
{{- $ := index . 0 -}}
{{- if not $.Values.security.insecure -}}
initContainers:
  - name: certificate
    image: {{ include "strata.image" $ }}
    imagePullPolicy: {{ $.Values.image.pullPolicy }}
    command: ["strata", "cert", "issue", "--ca=/ca", "--out=/tls", "--days={{ int $.Values.security.tls.certificateDays }}",
              {{ printf "node=%s:$(POD_NAME):%s,$(POD_IP),127.0.0.1,localhost" (index . 1) (join "," (index . 2)) | quote }}]
    env:
      - name: POD_NAME
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      - name: POD_IP
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
    resources:
      requests: {cpu: 10m, memory: 16Mi}
      limits: {memory: 64Mi}
    securityContext:
      {{- toYaml $.Values.securityContext | nindent 6 }}
    volumeMounts:
      - {name: ca, mountPath: /ca, readOnly: true}
      - {name: tls, mountPath: /tls}
{{- end }}
{{- end -}}

{{/* The volumes of the secure default: the CA Secret (the init container
only), the pod's certificate in memory, the admin token. */}}
{{- define "strata.tlsVolumes" -}}
{{- if not .Values.security.insecure -}}
- name: ca
  secret:
    secretName: {{ include "strata.caSecret" . }}
    defaultMode: 0440
- name: tls
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
- name: admin-token
  secret:
    secretName: {{ include "strata.tokenSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* The main container's mounts of strata.tlsVolumes. */}}
{{- define "strata.tlsMounts" -}}
{{- if not .Values.security.insecure -}}
- {name: tls, mountPath: /tls, readOnly: true}
- {name: admin-token, mountPath: /admin-token, readOnly: true}
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
{{- if not $.Values.security.insecure }}
prometheus.io/scheme: https
{{- end }}
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

{{/* Readiness and liveness probes on the admin port (https unless
insecure; the kubelet does not check the certificate, and the two paths
need no token). */}}
{{- define "strata.probes" -}}
{{- $scheme := ternary "HTTP" "HTTPS" .Values.security.insecure -}}
readinessProbe:
  httpGet: {path: /readyz, port: admin, scheme: {{ $scheme }}}
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet: {path: /livez, port: admin, scheme: {{ $scheme }}}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* The names clients dial the brokers' Service by (gRPC and Kafka
bootstrap), short to fully qualified, comma-separated. */}}
{{- define "strata.brokerNames" -}}
{{- $svc := printf "%s-broker" (include "strata.fullname" .) -}}
{{- join "," (list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain)) -}}
{{- end -}}
