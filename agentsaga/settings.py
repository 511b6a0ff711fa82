"""The settings root: every `AGENTSAGA_*` variable, declared once, read once, passed explicitly.

    Settings                      the saga log, the sidecar and the Jobs (the fields below)
    ├── connectors: ConnectorSettings   endpoints and credentials of the real systems
    ├── mcp: McpSettings                the sidecar's MCP endpoint and its upstream MCP servers
    ├── operator: OperatorSettings      the operator's Jobs and resync
    ├── telemetry: TelemetrySettings    what goes on spans (OTEL_* configures the export)
    └── debug: DebugSettings            crash points for tests, the demo and the chaos runner

`Settings.from_env()` reads them all (`agentsaga.environment` parses, with errors that name the
variable); each field carries its variable, default and description, from which the documentation's
configuration table is generated (`tools/gen_config_table.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from agentsaga import grpc_tuning
from agentsaga.environment import load, read_secret, variable

__all__ = ["ConnectorSettings", "DebugSettings", "McpSettings", "OperatorSettings",
           "OutcomeCommit", "Settings", "TelemetrySettings", "read_secret"]

OutcomeCommit = Literal["sync", "async", "group"]


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory (XDG base directories): `$XDG_DATA_HOME/agentsaga`, else
    `~/.local/share/agentsaga`."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "agentsaga"


@dataclass(frozen=True)
class ConnectorSettings:
    """The real systems' endpoints and credentials. A system whose URL is unset is not
    configured and its tools are not registered (`agentsaga.connectors.config` checks the rest).
    """

    stripe_api_key: str | None = variable(
        "AGENTSAGA_STRIPE_API_KEY", None, "Stripe secret key", secret=True)
    stripe_api_base: str | None = variable(
        "AGENTSAGA_STRIPE_API_BASE", None, "Stripe's address (unset: Stripe's own)")
    jira_url: str | None = variable("AGENTSAGA_JIRA_URL", None, "Jira Cloud site")
    jira_project: str | None = variable(
        "AGENTSAGA_JIRA_PROJECT", None, "the Jira project tickets are created in")
    jira_email: str = variable("AGENTSAGA_JIRA_EMAIL", "", "the Jira account's email")
    jira_token: str = variable("AGENTSAGA_JIRA_TOKEN", "", "the Jira API token", secret=True)
    jira_issue_type: str = variable("AGENTSAGA_JIRA_ISSUE_TYPE", "Task", "the Jira issue type")
    zendesk_url: str | None = variable(
        "AGENTSAGA_ZENDESK_URL", None, "Zendesk site (tickets go there when Jira is unset)")
    zendesk_email: str = variable("AGENTSAGA_ZENDESK_EMAIL", "", "the Zendesk agent's email")
    zendesk_token: str = variable(
        "AGENTSAGA_ZENDESK_TOKEN", "", "the Zendesk API token", secret=True)
    email_url: str | None = variable("AGENTSAGA_EMAIL_URL", None, "the email API's address")
    email_api_key: str = variable(
        "AGENTSAGA_EMAIL_API_KEY", "", "the email API's key", secret=True)
    email_from: str | None = variable(
        "AGENTSAGA_EMAIL_FROM", None, "the sender address of customer emails")
    warehouse_url: str | None = variable(
        "AGENTSAGA_WAREHOUSE_URL", None, "the warehouse API's address")
    http_tools: str | None = variable(
        "AGENTSAGA_HTTP_TOOLS", None, "a YAML/JSON file declaring generic HTTP tools")
    timeout_s: float | None = variable(
        "AGENTSAGA_CONNECTOR_TIMEOUT_S", None,
        "every connector request's timeout, and so each tool's `call_timeout_s` (R7); unset: "
        "each connector's own, Stripe's client default (80 s) for Stripe and 10 s for the others",
        positive=True)
    time_contracts: str = variable(
        "AGENTSAGA_TIME_CONTRACTS", "",
        "R7: per-tool time contract overrides, JSON: "
        '`{"create_ticket": {"call_timeout_s": 10, "visible_within_s": 90, "dedupes_for_s": 0}}`'
        " (unset: each connector's documented defaults)")
    search_rate: float = variable(
        "AGENTSAGA_SEARCH_RATE", 20.0,
        "lookups per second this process allows itself against search APIs", positive=True)


@dataclass(frozen=True)
class McpSettings:
    """The sidecar's MCP front end (`agentsaga.sidecar.mcp_endpoint`) and the upstream MCP
    servers whose declared tools it offers (`agentsaga.connectors.mcp`)."""

    listen: str = variable(
        "AGENTSAGA_MCP_LISTEN", "",
        "the sidecar's MCP endpoint (Streamable HTTP at `/mcp`): host:port, loopback unless "
        "`--allow-remote` or `AGENTSAGA_ALLOW_REMOTE`; unset: off")
    upstreams: str | None = variable(
        "AGENTSAGA_MCP_UPSTREAMS", None,
        "the upstreams file: upstream MCP servers and their tools' saga declarations (the "
        "sidecar and the Jobs load its tools)")
    pod_run_id: str = variable(
        "AGENTSAGA_POD_RUN_ID", "",
        "the run of an MCP request without an `Agentsaga-Run-Id` header (the chart passes the "
        "pod's annotation `agentsaga.io/run-id`)")
    allowed_hosts: tuple[str, ...] = variable(
        "AGENTSAGA_MCP_ALLOWED_HOSTS", (),
        "host names (besides the listen address, and the loopback names when it is loopback) "
        "that MCP requests may name in `Host` and `Origin`; any other is refused with 421/403 "
        "(DNS rebinding), comma-separated, e.g. `agent.ns.svc,10.1.2.3`")


@dataclass(frozen=True)
class OperatorSettings:
    """The operator's configuration, the one value every handler is handed (through kopf's
    `memo`): its Jobs and resync from the environment, its watch and webhook from
    `agentsaga operator`'s options, which may also override the resync intervals. Its saga log
    is the root's (`AGENTSAGA_OPERATOR_DSN`, else `AGENTSAGA_DSN`, or `--dsn`)."""

    sidecar_image: str = variable(
        "AGENTSAGA_SIDECAR_IMAGE", "", "image of the reconcile/unwind Jobs without a template")
    sidecar_template: str | None = variable(
        "AGENTSAGA_SIDECAR_TEMPLATE", None,
        "JSON file with the sidecar container (rendered by the chart): the Jobs' image, "
        "environment and mounts, and what the injection webhook adds")
    job_service_account: str = variable(
        "AGENTSAGA_JOB_SERVICE_ACCOUNT", "", "ServiceAccount of the Jobs")
    dsn_secret: str = variable(
        "AGENTSAGA_DSN_SECRET", "",
        "`name[:key]` of the Secret with the DSN, for Jobs built without a template "
        "(key defaults to `dsn`)")
    resync_seconds: float = variable(
        "AGENTSAGA_OPERATOR_RESYNC_SECONDS", 10.0,
        "how often the saga log of the unfinished AgentRuns is checked for changes (one query "
        "per batch of runs; orphaned runs and runs a Job drives are resynced this often)",
        positive=True)
    full_resync_seconds: float = variable(
        "AGENTSAGA_OPERATOR_FULL_RESYNC_SECONDS", 1800.0,
        "how often, besides events, each unfinished AgentRun is fully resynced against its pod "
        "and the log, and each open run's AgentRun bound again (a walk of a few runs per "
        "resync interval); finished runs are never resynced", positive=True)
    resync_batch: int = variable(
        "AGENTSAGA_OPERATOR_RESYNC_BATCH", 500,
        "runs whose saga log one change-check query reads", positive=True)
    job_deadline_seconds: int | None = variable(
        "AGENTSAGA_JOB_DEADLINE_SECONDS", None,
        "`activeDeadlineSeconds` of the reconcile/unwind Jobs (unset: no deadline); the orphan "
        "alert waits for the grace period plus this", positive=True)
    job_ttl_seconds: int | None = variable(
        "AGENTSAGA_JOB_TTL_SECONDS", None,
        "`ttlSecondsAfterFinished` of the reconcile/unwind Jobs: a finished Job (and its pod) is "
        "removed this long after (unset: kept until deleted); its outcome is already in the "
        "AgentRun", positive=True)
    job_backoff_limit: int = 3
    """`backoffLimit` of the reconcile/unwind Jobs (not configurable: a Job retried more only
    repeats what its run's log already says)."""
    approval_ttl_seconds: int = variable(
        "AGENTSAGA_APPROVAL_TTL_SECONDS", 86400,
        "how long after a plan was staged it may be approved, for AgentRuns whose "
        "spec.pivot.approvalTtlSeconds is unset (copied into each run's policy in the log)",
        positive=True)
    setup_plan: str | None = variable(
        "AGENTSAGA_GENERATED_SECRETS", None,
        "the chart's setup hook Job's plan (JSON, rendered by the chart): the Secrets it makes "
        "once and never changes, and the CRDs it applies")
    watch_timeout_seconds: int = 300
    """Server-side timeout of each watch request (`--watch-timeout`; kopf re-watches from the
    last version)."""
    webhook_port: int | None = None
    """Serve the sidecar-injection webhook on this port (`--webhook-port`)."""
    webhook_cert_dir: str | None = None
    """tls.crt, tls.key and ca.crt of the webhook (`--webhook-cert-dir`); none: plain HTTP on
    127.0.0.1, for development."""


@dataclass(frozen=True)
class TelemetrySettings:
    """What goes on spans; the export itself is configured by the standard OTEL_* variables."""

    trace_payloads: bool = variable(
        "AGENTSAGA_TRACE_PAYLOADS", False,
        "put redacted arguments and results on the dispatch spans")
    trace_redact: str = variable(
        "AGENTSAGA_TRACE_REDACT", "",
        "`module:function` applied to payloads after the built-in redaction")


@dataclass(frozen=True)
class DebugSettings:
    """Named crash points (`agentsaga.crashpoints`), read where each point is reached."""

    crash_at: tuple[str, ...] = variable(
        "AGENTSAGA_CRASH_AT", (),
        "crash points at which the process SIGKILLs itself, e.g. `after_call:charge_card`")


@dataclass(frozen=True)
class Settings:
    """The root: the saga log, the sidecar and the Jobs, with the other parts as groups."""

    dsn: str | None = variable(
        "AGENTSAGA_DSN", None,
        "the saga log's Postgres; unset: an embedded Postgres under `AGENTSAGA_DATA_DIR` "
        "(needs `agentsaga[embedded]`). The sidecar's database role (`agentsaga_sidecar`): the "
        "sidecar, the Jobs and the commands that read", secret=True)
    operator_dsn: str | None = variable(
        "AGENTSAGA_OPERATOR_DSN", None,
        "the saga log as the operator's database role (`agentsaga_operator`, the only one that "
        "records decisions): the operator, `agentsaga approve` and `corrections --approve`; "
        "unset: `AGENTSAGA_DSN`, or the embedded Postgres as that role", secret=True)
    migrate_dsn: str | None = variable(
        "AGENTSAGA_MIGRATE_DSN", None,
        "the saga log as the migration role (DDL, creates the other roles): `agentsaga "
        "migrate` only; unset: `AGENTSAGA_DSN`, or the embedded Postgres's superuser",
        secret=True)
    namespaces: tuple[str, ...] = variable(
        "AGENTSAGA_NAMESPACES", (),
        "agent namespaces whose database credentials `agentsaga migrate` provisions (a sidecar "
        "role `agentsaga_ns_<ns>` and a Job role `agentsaga_job_<ns>` each, seeing only that "
        "namespace's runs), comma-separated; `--namespace` adds to them")
    db_passwords_dir: Path | None = variable(
        "AGENTSAGA_DB_PASSWORDS_DIR", None,
        "a directory with each namespace credential's password in a file named after its role "
        "(`agentsaga migrate`; the chart mounts its Secret there)")
    data_dir: Path | None = variable(
        "AGENTSAGA_DATA_DIR", None,
        "where the embedded Postgres keeps its files, whatever the current directory; unset: "
        "the per-user `$XDG_DATA_HOME/agentsaga` (`~/.local/share/agentsaga`)")
    db_wait_s: float = variable(
        "AGENTSAGA_DB_WAIT_S", 30.0, "how long every command waits for Postgres at start",
        minimum=0)
    pool_min: int = variable(
        "AGENTSAGA_POOL_MIN", 2, "the saga log's smallest connection pool", minimum=1)
    pool_max: int = variable(
        "AGENTSAGA_POOL_MAX", 16, "the saga log's largest connection pool", minimum=1)
    outcome_commit: OutcomeCommit = variable(
        "AGENTSAGA_OUTCOME_COMMIT", "group",
        "`async` skips the WAL flush wait for outcome rows (a lost outcome leaves the INTENDED "
        "row, which reconcile settles); `group` does too, and writes concurrent dispatches' "
        "outcomes as one statement, each dispatch answered once its own row is committed; "
        "`sync` waits for the flush; INTENDED rows are always durable (R2)")
    listen: str = variable(
        "AGENTSAGA_LISTEN", "127.0.0.1:50051", "the sidecar's address: host:port or unix:/path")
    allow_remote: bool = variable(
        "AGENTSAGA_ALLOW_REMOTE", False,
        "let the sidecar listen (gRPC and MCP) on a non-loopback address, as `--allow-remote` "
        "does: whoever reaches the pod's IP can then call its tools; the chart sets it when "
        "`sidecar.listen` or `sidecar.mcp.listen` is not loopback")
    access_token: str | None = variable(
        "AGENTSAGA_ACCESS_TOKEN", None,
        "the per-pod bearer token every request to a non-loopback listener (gRPC or MCP) must "
        "carry (`authorization: Bearer ...`); read from `AGENTSAGA_ACCESS_TOKEN_FILE` (the "
        "chart mounts it from a Secret); a non-loopback listener without it refuses to start; "
        "the client and the adapters send it when it is set", secret=True)
    max_open_runs: int = variable(
        "AGENTSAGA_MAX_OPEN_RUNS", 100,
        "the most runs one sidecar holds open at once (begun or adopted, not yet ended); one "
        "more BeginRun is refused with RESOURCE_EXHAUSTED until a run ends", minimum=1)
    tools: tuple[str, ...] = variable(
        "AGENTSAGA_TOOLS", (),
        "the tools modules: dotted names (the current directory is searched too) or files such "
        "as ./mytools.py, comma-separated")
    workers: int = variable(
        "AGENTSAGA_WORKERS", 32,
        "the most RPCs a sidecar runs at once, each on its own thread (a tool call holds one "
        "for its whole length)", minimum=1)
    hot_workers: int = variable(
        "AGENTSAGA_HOT_WORKERS", 8,
        "how many threads run RPCs at once while they work; a call beyond them gets a thread "
        "of its own (up to AGENTSAGA_WORKERS) once busy ones have waited 5 ms on a real "
        "system (a tool's call, a lookup, a decision)", minimum=1)
    grpc_experiments: str = variable(
        "AGENTSAGA_GRPC_EXPERIMENTS", grpc_tuning.DEFAULT,
        "`GRPC_EXPERIMENTS` for the processes the `agentsaga` command runs (the sidecar, the "
        "operator, the Jobs, the bench and demo clients) when it is not set (empty: grpc's "
        "defaults); the default turns off the EventEngine paths, −0.3 ms a dispatch. An agent "
        "process gets the same by calling `agentsaga.grpc_tuning.apply()` before it imports "
        "grpc")
    recheck_pause_s: float = variable(
        "AGENTSAGA_RECHECK_PAUSE_S", 2.0, "R7: the pause before re-checking an empty lookup",
        minimum=0)
    max_args_bytes: int = variable(
        "AGENTSAGA_MAX_ARGS_BYTES", 1 << 20,
        "the largest accepted arguments JSON: of a tool call, and of each step of a staged plan",
        minimum=2)
    max_plan_bytes: int = variable(
        "AGENTSAGA_MAX_PLAN_BYTES", 8 << 20,
        "the largest accepted commit plan JSON, all its steps together (ReachPivot; a gRPC "
        "request carries at most 8 MiB); keep it above AGENTSAGA_MAX_ARGS_BYTES", minimum=2)
    max_calls_per_s: float = variable(
        "AGENTSAGA_MAX_CALLS_PER_S", 50.0,
        "tool calls one run may make per second through a sidecar (more: RESOURCE_EXHAUSTED, "
        "nothing written); 0 turns it off", minimum=0)
    max_rpcs_per_s: float = variable(
        "AGENTSAGA_MAX_RPCS_PER_S", 100.0,
        "requests of any kind one run may make per second through a sidecar (more: "
        "RESOURCE_EXHAUSTED); 0 turns it off", minimum=0)
    max_total_rpcs_per_s: float = variable(
        "AGENTSAGA_MAX_TOTAL_RPCS_PER_S", 1000.0,
        "requests of any kind the sidecar serves per second over all runs (health checks "
        "excepted); 0 turns it off", minimum=0)
    await_decision_max_s: float = variable(
        "AGENTSAGA_AWAIT_DECISION_MAX_S", 300.0,
        "the longest one AwaitDecision call waits, whatever timeout it asks for (the agent "
        "calls again)", positive=True)
    max_json_depth: int = variable(
        "AGENTSAGA_MAX_JSON_DEPTH", 64,
        "the deepest nesting of arguments and plans accepted (checked before parsing)",
        minimum=2)
    irreversible_before_pivot: Literal["refuse", "count"] = variable(
        "AGENTSAGA_IRREVERSIBLE_BEFORE_PIVOT", "refuse",
        "R10: `refuse` makes irreversible calls before the pivot wait for approval; `count` "
        "only counts them")
    pod_name: str = variable(
        "AGENTSAGA_POD_NAME", "", "the pod this sidecar serves (downward API, set by the "
        "injection): the runs it begins are bound to this pod (the operator binds their "
        "AgentRuns)")
    pod_namespace: str = variable(
        "AGENTSAGA_POD_NAMESPACE", "", "that pod's namespace (downward API)")
    pod_uid: str = variable("AGENTSAGA_POD_UID", "", "that pod's UID (downward API)")
    connectors: ConnectorSettings = field(default_factory=ConnectorSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    operator: OperatorSettings = field(default_factory=OperatorSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    debug: DebugSettings = field(default_factory=DebugSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every setting from `env` (default: this process's environment)."""
        return load(cls, os.environ if env is None else env)

    @property
    def embedded_dir(self) -> Path:
        """The embedded Postgres's folder: `AGENTSAGA_DATA_DIR/pg`, else the per-user one."""
        return Path(self.data_dir or default_data_dir()) / "pg"

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]
