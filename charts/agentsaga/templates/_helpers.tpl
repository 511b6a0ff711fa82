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

{{/* Every agent namespace needs a credential of its own (postgres.credentials.location): a
shared DSN is refused at render time, unless postgres.allowSharedCredentialForDevelopment says
so in so many words (a sidecar on the shared agentsaga_sidecar role refuses to start, so the
shared DSN must be the schema owner's: development only). */}}
{{- define "agentsaga.requireNamespaceCredentials" -}}
{{- if not (or .Values.postgres.credentials.location .Values.postgres.allowSharedCredentialForDevelopment) }}
{{- $namespaces := include "agentsaga.sidecarNamespaces" . | fromJsonArray }}
{{- fail (printf "postgres.credentials.location is empty, so the agent namespaces (%s) would share the DSN of Secret %s: a sidecar refuses to start on the shared agentsaga_sidecar role (Postgres shows it no namespace's runs), and with the schema owner's DSN no namespace is isolated from another. Set postgres.credentials.location to where Postgres is, without user or password (e.g. --set postgres.credentials.location=postgresql://postgres.databases.svc:5432/agentsaga?sslmode=require): the migration Job then creates each namespace's own credentials and the chart writes them to the Secret %s there. For development only, with a DSN of the schema's owner: --set postgres.allowSharedCredentialForDevelopment=true" (join ", " $namespaces) .Values.postgres.existingSecret (include "agentsaga.credentialsSecret" .)) }}
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

{{- define "agentsaga.webhookTLSSecret" -}}
{{- printf "%s-tls" (include "agentsaga.webhookName" .) }}
{{- end }}

{{/* "true" when the chart's setup Job makes the webhook's certificate and the operator sets the
caBundle (injection on, cert-manager off); else empty. */}}
{{- define "agentsaga.operatorInjectsCABundle" -}}
{{- if and .Values.injection.enabled (not .Values.injection.certificate.certManager.enabled) }}true{{ end }}
{{- end }}

{{/* Watched namespaces ----------------------------------------------------------------------- */}}

{{/* The namespaces the operator watches, as a JSON list: operator.watchNamespaces when given,
else the release namespace and the agent namespaces (sidecar.namespaces); [] with
operator.watchAllNamespaces (every namespace: cluster-wide RBAC and a ClusterKopfPeering). */}}
{{- define "agentsaga.watchNamespaces" -}}
{{- $op := .Values.operator }}
{{- if $op.watchAllNamespaces }}
{{- if $op.watchNamespaces }}
{{- fail (printf "operator.watchAllNamespaces is true and operator.watchNamespaces names %s: set one of them (all namespaces, or those)" (join ", " $op.watchNamespaces)) }}
{{- end }}
{{- toJson list }}
{{- else if $op.watchNamespaces }}
{{- toJson (uniq $op.watchNamespaces) }}
{{- else }}
{{- toJson (uniq (prepend (include "agentsaga.sidecarNamespaces" . | fromJsonArray) .Release.Namespace)) }}
{{- end }}
{{- end }}
