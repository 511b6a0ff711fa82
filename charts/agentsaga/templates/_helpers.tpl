{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "agentsaga.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agentsaga.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.operatorName" -}}
{{- printf "%s-operator" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.operatorServiceAccount" -}}
{{- default (include "agentsaga.operatorName" .) .Values.operator.serviceAccount.name }}
{{- end }}

{{- define "agentsaga.webhookName" -}}
{{- printf "%s-webhook" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.sidecarServiceAccount" -}}
{{- .Values.sidecar.serviceAccount.name }}
{{- end }}

{{- define "agentsaga.connectorsConfigMap" -}}
{{- printf "%s-connectors" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the sidecar's access token (key `token`), one per agent namespace: a
sidecar listening on a non-loopback address requires it of every request. */}}
{{- define "agentsaga.accessTokenSecret" -}}
{{- printf "%s-sidecar-access" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.sidecarTemplateConfigMap" -}}
{{- printf "%s-sidecar-template" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The cluster's own namespaces: never an agent namespace, never seen by the webhook (the
cluster must start while the operator is down). */}}
{{- define "agentsaga.systemNamespaces" -}}
{{- toJson (list "kube-system" "kube-public" "kube-node-lease") }}
{{- end }}

{{/* The namespaces where agent pods (and so sidecars and reconcile/unwind Jobs) run: a system
namespace is refused. */}}
{{- define "agentsaga.sidecarNamespaces" -}}
{{- $namespaces := .Values.sidecar.namespaces | default (list .Release.Namespace) }}
{{- $system := include "agentsaga.systemNamespaces" . | fromJsonArray }}
{{- range $namespaces }}
{{- if has . $system }}
{{- if $.Values.sidecar.namespaces }}
{{- fail (printf "sidecar.namespaces names %s, a system namespace: agent pods cannot run there (the injection webhook never sees %s so that the cluster starts while it is down). Set sidecar.namespaces to the namespaces of your agent pods" . (join ", " $system)) }}
{{- else }}
{{- fail (printf "sidecar.namespaces is empty, so agent pods would run in the release namespace %s, a system namespace (the injection webhook never sees %s). Install the release in a namespace of its own (e.g. -n agentsaga-system) or set sidecar.namespaces to the namespaces of your agent pods" . (join ", " $system)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson (uniq $namespaces) }}
{{- end }}

{{/* Labels (https://helm.sh/docs/chart_best_practices/labels/) -------------------------------- */}}

{{- define "agentsaga.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentsaga.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agentsaga.labels" -}}
{{ include "agentsaga.selectorLabels" . }}
helm.sh/chart: {{ include "agentsaga.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentsaga
{{- end }}

{{/* Images ------------------------------------------------------------------------------------ */}}

{{- define "agentsaga.image" -}}
{{- printf "%s:%s" .repository (.tag | default $.appVersion) }}
{{- end }}

{{- /* No image is published: both repositories are required, and a missing one is refused
at render time (never an install that fails to pull), naming where the images come from. */ -}}
{{- define "agentsaga.requiredImage" -}}
{{- required (printf "%s.image.repository is required: no agentsaga image is published. Build it from images/%s.Dockerfile (python -P tools/images.py context %s build/%s; docker build --network none -f images/%s.Dockerfile -t REGISTRY/agentsaga/%s:%s build/%s; docs/deploy.md, \"Build and push the images\"), push it, and set --set %s.image.repository=REGISTRY/agentsaga/%s" .name .name .name .name .name .name .appVersion .name .name .name) .image.repository }}
{{- end }}

{{- define "agentsaga.operatorImage" -}}
{{- $_ := include "agentsaga.requiredImage" (dict "name" "operator" "image" .Values.operator.image "appVersion" .Chart.AppVersion) }}
{{- include "agentsaga.image" (merge (dict "appVersion" .Chart.AppVersion) .Values.operator.image) }}
{{- end }}

{{- define "agentsaga.sidecarImage" -}}
{{- $_ := include "agentsaga.requiredImage" (dict "name" "sidecar" "image" .Values.sidecar.image "appVersion" .Chart.AppVersion) }}
{{- include "agentsaga.image" (merge (dict "appVersion" .Chart.AppVersion) .Values.sidecar.image) }}
{{- end }}

{{/* Security ---------------------------------------------------------------------------------- */}}

{{- define "agentsaga.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Environment shared by the operator and the sidecar ----------------------------------------- */}}

{{- define "agentsaga.dsnEnv" -}}
- name: AGENTSAGA_DSN
  valueFrom:
    secretKeyRef:
      name: {{ required "postgres.existingSecret is required: the name of a Secret holding the Postgres DSN" .Values.postgres.existingSecret }}
      key: {{ .Values.postgres.secretKey }}
{{- end }}

{{/* Per agent namespace credentials (postgres.credentials.location): the Secret's name, and the
role names, as agentsaga.store.roles.namespace_role makes them. Call namespaceRole with
(list namespace kind). */}}
{{- define "agentsaga.credentialsSecret" -}}
{{- printf "%s-db-credentials" (include "agentsaga.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsaga.namespaceRole" -}}
{{- $ns := index . 0 }}
{{- $name := printf "%s%s" (ternary "agentsaga_ns_" "agentsaga_job_" (eq (index . 1) "sidecar")) (replace "-" "_" $ns) }}
{{- if gt (len $name) 63 }}
{{- $name = printf "%s_%s" (trunc 52 $name) (trunc 10 (sha256sum $ns)) }}
{{- end }}
{{- $name }}
{{- end }}

{{/* The sidecar's (and, through the operator, the Jobs') database: the namespace's own
credential when postgres.credentials.location is set, else existingSecret's DSN. */}}
{{- define "agentsaga.sidecarDsnEnv" -}}
{{- if .Values.postgres.credentials.location }}
- name: AGENTSAGA_DSN
  value: {{ .Values.postgres.credentials.location | quote }}
- name: PGUSER
  valueFrom:
    secretKeyRef:
      name: {{ include "agentsaga.credentialsSecret" . }}
      key: sidecar-user
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "agentsaga.credentialsSecret" . }}
      key: sidecar-password
{{- else }}
{{- include "agentsaga.dsnEnv" . }}
{{- end }}
{{- end }}

{{- define "agentsaga.operatorDsnEnv" -}}
- name: AGENTSAGA_OPERATOR_DSN
  valueFrom:
    secretKeyRef:
      name: {{ required "postgres.operatorSecret is required: the Secret with the operator role's DSN" .Values.postgres.operatorSecret }}
      key: {{ .Values.postgres.operatorSecretKey }}
{{- end }}

{{/* OpenTelemetry: the standard OTEL_* variables. Call with (dict "root" $ "component" "operator"). */}}
{{- define "agentsaga.otelEnv" -}}
{{- $otel := .root.Values.otel }}
- name: OTEL_SERVICE_NAME
  value: {{ index $otel.serviceName .component | quote }}
{{- if $otel.enabled }}
- name: OTEL_TRACES_EXPORTER
  value: otlp
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ required "otel.endpoint is required when otel.enabled is true" $otel.endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $otel.protocol | quote }}
- name: OTEL_METRICS_EXPORTER
  value: {{ $otel.metricsExporter | quote }}
{{- if eq $otel.metricsExporter "prometheus" }}
- name: OTEL_EXPORTER_PROMETHEUS_HOST
  value: "0.0.0.0"
- name: OTEL_EXPORTER_PROMETHEUS_PORT
  value: {{ index $otel.prometheusPort .component | quote }}
{{- end }}
- name: OTEL_TRACES_SAMPLER
  value: {{ $otel.tracesSampler | quote }}
{{- if $otel.tracesSamplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $otel.tracesSamplerArg | quote }}
{{- end }}
{{- $attributes := list (printf "k8s.namespace.name=$(AGENTSAGA_POD_NAMESPACE)") (printf "k8s.pod.name=$(AGENTSAGA_POD_NAME)") }}
{{- range $key := keys $otel.resourceAttributes | sortAlpha }}
{{- $attributes = append $attributes (printf "%s=%s" $key (index $otel.resourceAttributes $key)) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attributes | quote }}
{{- else }}
- name: OTEL_SDK_DISABLED
  value: "true"
- name: OTEL_TRACES_EXPORTER
  value: none
{{- end }}
{{- end }}

{{- define "agentsaga.podEnv" -}}
- name: AGENTSAGA_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: AGENTSAGA_POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: AGENTSAGA_POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
{{- end }}

{{/* Webhook TLS ------------------------------------------------------------------------------ */}}

{{/* The webhook's TLS material as YAML (tls.crt, tls.key, ca.crt, base64): the existing Secret's
(lookup, so upgrades keep it), else generated once per render and memoised in .Values so that the
Secret, the caBundle and the operator's checksum annotation agree. */}}
{{- define "agentsaga.webhookTLS" -}}
{{- $inj := .Values.injection }}
{{- if not (hasKey $inj "_generated") }}
{{- $name := include "agentsaga.webhookName" . }}
{{- $ns := .Release.Namespace }}
{{- $existing := lookup "v1" "Secret" $ns (printf "%s-tls" $name) }}
{{- if and $existing $existing.data (index $existing.data "ca.crt") }}
{{- $_ := set $inj "_generated" (dict "tls.crt" (index $existing.data "tls.crt") "tls.key" (index $existing.data "tls.key") "ca.crt" (index $existing.data "ca.crt")) }}
{{- else }}
{{- $days := int $inj.certificate.validityDays }}
{{- $caCert := genCA (printf "%s-ca" $name) $days }}
{{- $dns := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $name $ns) nil $dns $days $caCert }}
{{- $_ := set $inj "_generated" (dict "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) "ca.crt" ($caCert.Cert | b64enc)) }}
{{- end }}
{{- end }}
{{- toYaml $inj._generated }}
{{- end }}

{{- define "agentsaga.webhookSecret" -}}
{{- $tls := include "agentsaga.webhookTLS" . | fromYaml }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "agentsaga.webhookName" . }}-tls
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "agentsaga.labels" . | nindent 4 }}
    app.kubernetes.io/component: webhook
type: kubernetes.io/tls
data:
  tls.crt: {{ index $tls "tls.crt" }}
  tls.key: {{ index $tls "tls.key" }}
  ca.crt: {{ index $tls "ca.crt" }}
{{- end }}
