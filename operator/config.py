"""What the operator needs to know besides Kubernetes itself: one frozen value, built once by
`agentsaga operator` and handed to every handler through kopf's `memo`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentsaga.settings import Settings

GROUP = "agentsaga.io"
VERSION = "v1alpha1"
PLURAL = "agentruns"
AGENTRUNS = (GROUP, VERSION, PLURAL)

RUN_LABEL = "agentsaga.io/run"
"""On agent pods (value: the AgentRun's name) and on the operator's Jobs."""
JOB_KIND_LABEL = "agentsaga.io/job-kind"
JOB_POD_LABEL = "agentsaga.io/job"
"""On the pods of a reconcile/unwind Job (never `agentsaga.io/run`: they are not agent pods)."""
FINALIZER = "agentsaga.io/finalizer"
FORCE_DELETE = "agentsaga.io/force-delete"
PREFIX = "agentsaga.io"
DEFAULT_ORPHAN_GRACE_SECONDS = 60
"""spec.orphanGracePeriodSeconds when the AgentRun does not set it."""


@dataclass(frozen=True)
class OperatorConfig:
    dsn: str | None = None
    """The saga log (AGENTSAGA_DSN); None: the operator reflects nothing from Postgres."""
    sidecar_image: str = ""
    """Image of the reconcile/unwind Jobs when no sidecar template is mounted
    (AGENTSAGA_SIDECAR_IMAGE)."""
    sidecar_template: str | None = None
    """JSON file with the sidecar container (AGENTSAGA_SIDECAR_TEMPLATE, rendered by the chart);
    Jobs reuse its image, environment (the DSN Secret, connector settings) and mounts."""
    job_service_account: str = ""
    """ServiceAccount of the Jobs (AGENTSAGA_JOB_SERVICE_ACCOUNT)."""
    dsn_secret: str = ""
    """`name[:key]` of the Secret with the DSN, for Jobs built without a template
    (AGENTSAGA_DSN_SECRET; key defaults to `dsn`)."""
    resync_seconds: float = 10.0
    """How often the unfinished AgentRuns' saga log is checked for changes (one query per
    batch), and how often orphaned runs and runs a Job drives are resynced;
    AGENTSAGA_OPERATOR_RESYNC_SECONDS or `--resync-interval`."""
    full_resync_seconds: float = 1800.0
    """How often each unfinished AgentRun is fully resynced without a change to wake it (what
    no event reports), and each open run's AgentRun bound again: walks of a few runs per resync
    interval; AGENTSAGA_OPERATOR_FULL_RESYNC_SECONDS or `--full-resync-interval`."""
    resync_batch: int = 500
    """Runs per change-check query (AGENTSAGA_OPERATOR_RESYNC_BATCH)."""
    job_backoff_limit: int = 3
    job_deadline_seconds: int | None = None
    """activeDeadlineSeconds of the reconcile/unwind Jobs (AGENTSAGA_JOB_DEADLINE_SECONDS): a Job
    still running then fails, and its run shows it (the orphan alert counts on this)."""
    job_ttl_seconds: int | None = None
    """ttlSecondsAfterFinished of the Jobs (AGENTSAGA_JOB_TTL_SECONDS)."""
    watch_timeout_seconds: int = 300
    """Server-side timeout of each watch request (kopf re-watches from the last version)."""
    webhook_port: int | None = None
    """Serve the sidecar-injection webhook on this port (`--webhook-port`)."""
    webhook_cert_dir: str | None = None
    """tls.crt, tls.key and ca.crt of the webhook (`--webhook-cert-dir`); none: plain HTTP on
    127.0.0.1, for development."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        return cls.from_settings(Settings.from_env(env))

    @classmethod
    def from_settings(cls, settings: Settings) -> OperatorConfig:
        group = settings.operator
        return cls(
            dsn=settings.operator_dsn or settings.dsn,
            sidecar_image=group.sidecar_image,
            sidecar_template=group.sidecar_template,
            job_service_account=group.job_service_account,
            dsn_secret=group.dsn_secret,
            resync_seconds=group.resync_seconds,
            full_resync_seconds=group.full_resync_seconds,
            resync_batch=group.resync_batch,
            job_deadline_seconds=group.job_deadline_seconds,
            job_ttl_seconds=group.job_ttl_seconds,
        )
