{{/* Prometheus alerting rules (alerts.*): one rules file, shipped as a PrometheusRule or in a
ConfigMap (alerts.yaml). docs/observability.md says what each alert means and what to do first.
Thresholds are seconds; the metrics are those of agentsaga.telemetry.METRICS. */}}

{{/* A step without a known outcome past its tool's certainty window plus a margin. */}}
{{- define "agentsaga.alerts.stepUnknownExpr" -}}
{{- $margin := int .marginSeconds -}}
{{- $tools := keys .toolWindowSeconds | sortAlpha -}}
max by (agentsaga_run_id, agentsaga_tool) (agentsaga_step_open_age_seconds
{{- if $tools }}{agentsaga_tool!~"{{ join "|" $tools }}"}{{ end }}) > {{ add (int .certaintyWindowSeconds) $margin }}
{{- range $tools }}
or max by (agentsaga_run_id, agentsaga_tool) (agentsaga_step_open_age_seconds{agentsaga_tool="{{ . }}"}) > {{ add (int (get $.toolWindowSeconds .)) $margin }}
{{- end }}
{{- end }}

{{- define "agentsaga.alerts.labels" -}}
severity: {{ .severity }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "agentsaga.alertRules" -}}
{{- $a := .Values.alerts -}}
{{- $x := $a.ruleLabels -}}
groups:
  - name: agentsaga
    rules:
      - alert: AgentsagaStepOutcomeUnknown
        expr: |-
          {{- include "agentsaga.alerts.stepUnknownExpr" $a.stepUnknown | nindent 10 }}
        for: 5m
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "warning" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`Run {{ $labels.agentsaga_run_id }}: a {{ $labels.agentsaga_tool }} step has had no known outcome for {{ $value | humanizeDuration }}, past its certainty window. Ask the real system by key: agentsaga reconcile --run {{ $labels.agentsaga_run_id }} ; if it stays unknown, check that system by hand and read agentsaga log --run {{ $labels.agentsaga_run_id }}`}}
      - alert: AgentsagaWaitingForHuman
        expr: |-
          max by (agentsaga_run_id, agentsaga_wait_kind) (agentsaga_human_wait_age_seconds) > {{ int $a.humanWaitSeconds }}
        for: 5m
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "warning" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`Run {{ $labels.agentsaga_run_id }}: a {{ $labels.agentsaga_wait_kind }} has waited {{ $value | humanizeDuration }} for a human. Read agentsaga corrections --run {{ $labels.agentsaga_run_id }} ; approve or dismiss a correction: agentsaga corrections --run {{ $labels.agentsaga_run_id }} --approve STEP (or --dismiss STEP, or status.corrections of its AgentRun); for a failed compensation fix its cause, then agentsaga unwind --run {{ $labels.agentsaga_run_id }}`}}
      - alert: AgentsagaPivotAwaitingApproval
        expr: |-
          max by (agentsaga_run_id) (agentsaga_pivot_awaiting_age_seconds) > {{ int $a.pivotWaitSeconds }}
        for: 5m
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "warning" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`Run {{ $labels.agentsaga_run_id }} has waited {{ $value | humanizeDuration }} for approval of its staged plan. Review status.pivot: kubectl get agentrun {{ $labels.agentsaga_run_id }} -o yaml ; then approve or reject its planHash: agentsaga approve --run {{ $labels.agentsaga_run_id }} --plan-hash HASH --decision Approved (or Rejected), or kubectl patch agentrun {{ $labels.agentsaga_run_id }} --subresource=status --type=merge with status.approval`}}
      - alert: AgentsagaCardAuthorisationExpiring
        expr: |-
          max by (agentsaga_run_id) (agentsaga_pivot_authorisation_age_seconds) > {{ int $a.authorisationAgeSeconds }}
        for: 5m
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "critical" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`Run {{ $labels.agentsaga_run_id }} waits at the pivot holding a card authorisation {{ $value | humanizeDuration }} old; authorisations expire after about 7 days and the capture then fails. Decide today: kubectl get agentrun {{ $labels.agentsaga_run_id }} -o yaml ; agentsaga approve --run {{ $labels.agentsaga_run_id }} --plan-hash HASH --decision Approved (Rejected unwinds the run and releases the hold)`}}
      - alert: AgentsagaIrreversibleBeforePivot
        expr: |-
          sum by (agentsaga_tool) (increase(agentsaga_irreversible_before_pivot_total[15m])) > 0
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "critical" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`{{ $labels.agentsaga_tool }} ran before the pivot, without approval (R10: never). Find the run: kubectl get agentruns -A -o custom-columns=NAME:.metadata.name,BEFORE_PIVOT:.status.irreversibleBeforePivot ; read agentsaga log --run RUN ; correct what the customer saw and set spec.irreversibleBeforePivot: refuse on its AgentRuns`}}
      - alert: AgentsagaOrphanNotUnwound
        expr: |-
          max by (k8s_namespace_name, agentsaga_agentrun, agentsaga_run_id) (agentsaga_run_orphaned_age_seconds - agentsaga_run_orphan_grace_seconds) > {{ add (int .Values.operator.jobDeadlineSeconds) (int $a.orphanMarginSeconds) }}
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "critical" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`Run {{ $labels.agentsaga_run_id }} (AgentRun {{ $labels.k8s_namespace_name }}/{{ $labels.agentsaga_agentrun }}) has been orphaned {{ $value | humanizeDuration }} past its grace period and is not unwound. Read status.job and the conditions: kubectl -n {{ $labels.k8s_namespace_name }} get agentrun {{ $labels.agentsaga_agentrun }} -o yaml ; the Job's log: kubectl -n {{ $labels.k8s_namespace_name }} logs job/JOB ; then agentsaga unwind --run {{ $labels.agentsaga_run_id }}`}}
      - alert: AgentsagaSagaLogUnreachable
        expr: |-
          min by (namespace, pod, job, instance) (agentsaga_log_up) == 0
        for: {{ int $a.logUnreachableSeconds }}s
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "critical" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`{{ $labels.job }} {{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }} cannot query the saga log: no side-effecting call can be recorded or run. Check Postgres and the DSN Secret; read kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }} ; run agentsaga migrate if the schema is missing`}}
      - alert: AgentsagaOperatorNotResyncing
        expr: |-
          max(agentsaga_operator_resync_age_seconds) > {{ int $a.resyncStaleSeconds }}
          or absent(agentsaga_operator_resync_age_seconds)
        for: 5m
        labels:
          {{- include "agentsaga.alerts.labels" (dict "severity" "critical" "extra" $x) | nindent 10 }}
        annotations:
          summary: >-
            {{`No agentsaga operator replica has resynced its AgentRuns in time (or none reports metrics): orphaned runs are not unwound and approvals are not recorded. Check kubectl -n `}}{{ .Release.Namespace }}{{` get pods -l app.kubernetes.io/component=operator ; their logs ; the peering: kubectl get clusterkopfpeering,kopfpeering -A`}}
{{- end }}
