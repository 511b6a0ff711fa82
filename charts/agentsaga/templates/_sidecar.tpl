{{/*
The sidecar container, in one place. Three consumers render the very same container:
  - the ConfigMap <fullname>-sidecar-template (sidecar.json) that the operator's mutating webhook
    reads through AGENTSAGA_SIDECAR_TEMPLATE,
  - the manual alternative for clusters without webhooks: `agentsaga.sidecar` (an initContainers
    entry) and `agentsaga.sidecarVolumes` (volumes entries), included from an application chart
    that depends on this one:
        initContainers:
          {{- include "agentsaga.sidecar" (index .Subcharts "agentsaga") | nindent 10 }}
        volumes:
          {{- include "agentsaga.sidecarVolumes" (index .Subcharts "agentsaga") | nindent 10 }}
*/}}

{{/* Connector credentials mounted as files: JSON list of {volume, secret, key, dir, env}. */}}
{{- define "agentsaga.connectorFiles" -}}
{{- $c := .Values.connectors }}
{{- $files := list }}
{{- $candidates := list
  (dict "connector" "stripe" "ref" $c.stripe.apiKeySecret "env" "AGENTSAGA_STRIPE_API_KEY_FILE")
  (dict "connector" "jira" "ref" $c.jira.tokenSecret "env" "AGENTSAGA_JIRA_TOKEN_FILE")
  (dict "connector" "zendesk" "ref" $c.zendesk.tokenSecret "env" "AGENTSAGA_ZENDESK_TOKEN_FILE")
  (dict "connector" "email" "ref" $c.email.apiKeySecret "env" "AGENTSAGA_EMAIL_API_KEY_FILE") }}
{{- range $candidates }}
{{- if .ref.name }}
{{- $files = append $files (dict "volume" (printf "agentsaga-%s-credentials" .connector) "secret" .ref.name "key" .ref.key "dir" (printf "/var/run/secrets/agentsaga/%s" .connector) "env" .env) }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/* AGENTSAGA_TOOLS: the tools modules, and the upstream MCP servers' tools when there are any
(so that the reconcile and unwind Jobs, which run this same container, load them too). */}}
{{- define "agentsaga.sidecarTools" -}}
{{- $tools := .Values.sidecar.tools }}
{{- if .Values.sidecar.mcp.upstreams }}
{{- $tools = append $tools "agentsaga.connectors.mcp_tools" }}
{{- end }}
{{- join "," $tools }}
{{- end }}

{{/* Connector endpoints (non-secret): the data of the connectors ConfigMap, as YAML. A
connector given in part is refused here, as the sidecar would refuse it at start
(agentsaga/connectors/config.py). */}}
{{- define "agentsaga.connectorEndpoints" -}}
{{- $c := .Values.connectors }}
{{- if and $c.stripe.apiBase (not $c.stripe.apiKeySecret.name) }}
{{- fail "connectors.stripe.apiBase is set but connectors.stripe.apiKeySecret.name is not: name the Secret holding the Stripe API key (in every agent namespace), or leave apiBase empty" }}
{{- end }}
{{- if and $c.jira.url (not $c.jira.project) }}
{{- fail "connectors.jira.url is set but connectors.jira.project is not: name the project tickets are created in" }}
{{- end }}
{{- if and $c.email.url (not $c.email.from) }}
{{- fail "connectors.email.url is set but connectors.email.from is not: name the sender address" }}
{{- end }}
{{- $data := dict
  "AGENTSAGA_STRIPE_API_BASE" $c.stripe.apiBase
  "AGENTSAGA_JIRA_URL" $c.jira.url
  "AGENTSAGA_JIRA_EMAIL" $c.jira.email
  "AGENTSAGA_JIRA_PROJECT" $c.jira.project
  "AGENTSAGA_ZENDESK_URL" $c.zendesk.url
  "AGENTSAGA_ZENDESK_EMAIL" $c.zendesk.email
  "AGENTSAGA_EMAIL_URL" $c.email.url
  "AGENTSAGA_EMAIL_FROM" $c.email.from }}
{{- range $key := keys $data | sortAlpha }}
{{- with index $data $key }}
{{ $key }}: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when the host:port address given is loopback (127.0.0.0/8, [::1], localhost), the
addresses the sidecar serves without --allow-remote; else empty. */}}
{{- define "agentsaga.isLoopback" -}}
{{- if regexMatch "^(127\\.[0-9.]+|\\[::1\\]|localhost):[0-9]+$" . }}true{{ end }}
{{- end }}

{{/* "true" when the sidecar listens (gRPC or MCP) on an address other than loopback, so that it
must be started with AGENTSAGA_ALLOW_REMOTE; else empty. */}}
{{- define "agentsaga.sidecarListensRemotely" -}}
{{- $sidecar := .Values.sidecar }}
{{- if not (include "agentsaga.isLoopback" $sidecar.listen) }}true
{{- else if and $sidecar.mcp.listen (not (include "agentsaga.isLoopback" $sidecar.mcp.listen)) }}true
{{- end }}
{{- end }}

{{/* With the webhook, every injected sidecar needs tools, or it exits at start ("no tools"):
agentsaga.connectors.tools registers only the connectors that are configured
(agentsaga/connectors/config.py). Refused unless sidecar.tools names another module, a shipped
connector is configured (in connectors or by sidecar.extraEnv), or sidecar.mcp.upstreams
declares upstream tools. */}}
{{- define "agentsaga.requireSidecarTools" -}}
{{- $sidecar := .Values.sidecar }}
{{- $c := .Values.connectors }}
{{- $ownModules := without $sidecar.tools "agentsaga.connectors.tools" }}
{{- $configured := or $c.stripe.apiKeySecret.name $c.jira.url $c.zendesk.url $c.email.url }}
{{- $connectorVariables := list "AGENTSAGA_STRIPE_API_KEY" "AGENTSAGA_STRIPE_API_KEY_FILE" "AGENTSAGA_JIRA_URL" "AGENTSAGA_ZENDESK_URL" "AGENTSAGA_EMAIL_URL" "AGENTSAGA_WAREHOUSE_URL" "AGENTSAGA_HTTP_TOOLS" }}
{{- range $sidecar.extraEnv }}
{{- if has .name $connectorVariables }}
{{- $configured = true }}
{{- end }}
{{- end }}
{{- if not (or $ownModules $configured $sidecar.mcp.upstreams) }}
{{- fail (printf "the injected sidecar would have no tools and exit at start: sidecar.tools is %s, which registers only the shipped connectors that are configured, and none is. Configure one (connectors.stripe.apiKeySecret.name, connectors.zendesk.url, connectors.jira.url with connectors.jira.project, or connectors.email.url with connectors.email.from; credentials from existing Secrets in the agent namespaces), or declare upstream MCP servers in sidecar.mcp.upstreams, or name your own tools module in sidecar.tools (built into the sidecar image)" (toJson $sidecar.tools)) }}
{{- end }}
{{- end }}

{{- define "agentsaga.sidecarProbeHandler" -}}
{{- $probe := .Values.sidecar.probe }}
{{- $port := regexFind "[0-9]+$" .Values.sidecar.listen | int }}
{{- if eq $probe.type "grpc" }}
{{- if include "agentsaga.isLoopback" .Values.sidecar.listen }}
{{- fail (printf "sidecar.probe.type=grpc needs a sidecar.listen address the kubelet can reach (it dials the pod IP), not loopback (%s): set sidecar.listen=0.0.0.0:%d (the chart then sets AGENTSAGA_ALLOW_REMOTE=true: the sidecar serves the pod's IP), or use sidecar.probe.type=exec" .Values.sidecar.listen $port) }}
{{- end }}
grpc:
  port: {{ $port }}
{{- else }}
exec:
  command:
    - python
    - -c
    - >-
      import sys, grpc;
      from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g;
      r = g.HealthStub(grpc.insecure_channel(sys.argv[1])).Check(h.HealthCheckRequest(), timeout=float(sys.argv[2]));
      sys.exit(0 if r.status == h.HealthCheckResponse.SERVING else 1)
    - {{ .Values.sidecar.listen | quote }}
    - {{ sub $probe.timeoutSeconds 1 | max 1 | quote }}
{{- end }}
{{- end }}

{{/* The container (a map). */}}
{{- define "agentsaga.sidecarContainer" -}}
{{- $files := include "agentsaga.connectorFiles" . | fromJsonArray }}
{{- $probe := .Values.sidecar.probe }}
name: agentsaga-sidecar
image: {{ include "agentsaga.sidecarImage" . }}
imagePullPolicy: {{ .Values.sidecar.image.pullPolicy }}
args: [sidecar]
# a native sidecar: an init container that keeps running next to the app containers
restartPolicy: Always
env:
  {{- include "agentsaga.podEnv" . | nindent 2 }}
  {{- include "agentsaga.sidecarDsnEnv" . | nindent 2 }}
  - name: AGENTSAGA_TOOLS
    value: {{ include "agentsaga.sidecarTools" . | quote }}
  - name: AGENTSAGA_LISTEN
    value: {{ .Values.sidecar.listen | quote }}
  {{- if include "agentsaga.sidecarListensRemotely" . }}
  # not loopback: the sidecar serves the pod's IP (which it refuses unless allowed), and whatever
  # reaches the pod may call its tools
  - name: AGENTSAGA_ALLOW_REMOTE
    value: "true"
  {{- end }}
  # the sidecar writes only the saga log (it has no Kubernetes client at all): its pod mounts no
  # token and its ServiceAccount has no role; the operator is the only writer of AgentRuns
  {{- with .Values.sidecar.mcp.listen }}
  - name: AGENTSAGA_MCP_LISTEN
    value: {{ . | quote }}
  {{- end }}
  {{- if .Values.sidecar.mcp.upstreams }}
  - name: AGENTSAGA_MCP_UPSTREAMS
    value: /etc/agentsaga/mcp/upstreams.yaml
  {{- end }}
  # the pod's access token: required of every request when the sidecar listens on a non-loopback
  # address (an agent container mounts the volume agentsaga-access-token and sets the same
  # variable; the client sends it)
  - name: AGENTSAGA_ACCESS_TOKEN_FILE
    value: /var/run/secrets/agentsaga/access/token
  - name: AGENTSAGA_POD_RUN_ID
    valueFrom:
      fieldRef:
        fieldPath: metadata.annotations['agentsaga.io/run-id']
  {{- range $files }}
  - name: {{ .env }}
    value: {{ printf "%s/%s" .dir .key | quote }}
  {{- end }}
  {{- include "agentsaga.otelEnv" (dict "root" . "component" "sidecar") | nindent 2 }}
  {{- with .Values.sidecar.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
envFrom:
  - configMapRef:
      name: {{ include "agentsaga.connectorsConfigMap" . }}
startupProbe:
  {{- include "agentsaga.sidecarProbeHandler" . | nindent 2 }}
  periodSeconds: 2
  timeoutSeconds: {{ $probe.timeoutSeconds }}
  failureThreshold: {{ div $probe.startupSeconds 2 | max 1 }}
readinessProbe:
  {{- include "agentsaga.sidecarProbeHandler" . | nindent 2 }}
  periodSeconds: {{ $probe.periodSeconds }}
  timeoutSeconds: {{ $probe.timeoutSeconds }}
  failureThreshold: {{ $probe.failureThreshold }}
resources:
  {{- toYaml .Values.sidecar.resources | nindent 2 }}
securityContext:
  {{- include "agentsaga.containerSecurityContext" . | nindent 2 }}
volumeMounts:
  - name: agentsaga-sidecar-tmp
    mountPath: /tmp
  - name: agentsaga-access-token
    mountPath: /var/run/secrets/agentsaga/access
    readOnly: true
  {{- if .Values.sidecar.mcp.upstreams }}
  - name: agentsaga-mcp-upstreams
    mountPath: /etc/agentsaga/mcp
    readOnly: true
  {{- end }}
  {{- range $files }}
  - name: {{ .volume }}
    mountPath: {{ .dir }}
    readOnly: true
  {{- end }}
{{- end }}

{{/* The volumes the container needs (a list). */}}
{{- define "agentsaga.sidecarVolumes" -}}
- name: agentsaga-sidecar-tmp
  emptyDir:
    sizeLimit: 64Mi
- name: agentsaga-access-token
  secret:
    secretName: {{ include "agentsaga.accessTokenSecret" . }}
    defaultMode: 0444
    items:
      - key: token
        path: token
{{- if .Values.sidecar.mcp.upstreams }}
- name: agentsaga-mcp-upstreams
  configMap:
    name: {{ include "agentsaga.connectorsConfigMap" . }}-mcp
{{- end }}
{{- range include "agentsaga.connectorFiles" . | fromJsonArray }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0444
    items:
      - key: {{ .key }}
        path: {{ .key }}
{{- end }}
{{- end }}

{{/* The manual alternative: one initContainers entry. */}}
{{- define "agentsaga.sidecar" -}}
- {{ include "agentsaga.sidecarContainer" . | nindent 2 | trim }}
{{- end }}
