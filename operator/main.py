"""`agentsaga operator`: run the kopf operator (AgentRun lifecycle, orphan Jobs, pivot approval,
the deletion finalizer and, with `--webhook-port`, the sidecar-injection webhook).

Several replicas may run: kopf peering (`--peering NAME`, the chart ships the peering CRDs and
objects) lets the one with the highest priority act while the others stand by. Without
`--priority`, each replica picks a random one, so two replicas never tie (a tie pauses both).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
from pathlib import Path

import kopf

from agentsaga import telemetry
from agentsaga.cli.database import is_embedded, resolve_dsn
from agentsaga.errors import ConfigurationError
from agentsaga.operator.ca_bundle import inject_ca_bundle
from agentsaga.operator.context import Context
from agentsaga.operator.injection import load_template
from agentsaga.operator.kube import KubeApi, api_client
from agentsaga.operator.watch_recovery import install as recover_unreadable_watches
from agentsaga.settings import OperatorSettings, Settings
from agentsaga.store import SagaLog

logger = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="watch this namespace (repeatable; globs as in kopf)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="watch every namespace (the default when no --namespace is given)")
    parser.add_argument("--peering", default="agentsaga", metavar="NAME",
                        help="kopf peering object shared by the replicas (default: agentsaga)")
    parser.add_argument("--standalone", action="store_true",
                        help="no peering: this process acts alone (development, tests)")
    parser.add_argument("--priority", type=int, default=None,
                        help="peering priority (default: random, so replicas never tie)")
    parser.add_argument("--liveness", metavar="URL",
                        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--webhook-port", type=int, default=None,
                        help="serve the sidecar-injection admission webhook on this port")
    parser.add_argument("--webhook-cert-dir", default=None,
                        help="directory with tls.crt, tls.key and ca.crt for the webhook")
    parser.add_argument("--webhook-configuration", default=None, metavar="NAME",
                        help="at start, set the caBundle of this MutatingWebhookConfiguration "
                        "to the ca.crt of --webhook-cert-dir (the chart's generated certificate)")
    parser.add_argument("--dsn", help="Postgres DSN of the saga log as the operator's role "
                        "(default: AGENTSAGA_OPERATOR_DSN, else AGENTSAGA_DSN)")
    parser.add_argument("--resync-interval", type=float, default=None, metavar="SECONDS",
                        help="how often the unfinished AgentRuns' saga log is checked for changes "
                        "(default: AGENTSAGA_OPERATOR_RESYNC_SECONDS, else 10)")
    parser.add_argument("--full-resync-interval", type=float, default=None, metavar="SECONDS",
                        help="how often each unfinished AgentRun is fully resynced when nothing "
                        "changed, and each open run's AgentRun bound again: a few per resync "
                        "interval (default: AGENTSAGA_OPERATOR_FULL_RESYNC_SECONDS, else 1800)")
    parser.add_argument("--watch-timeout", type=int, default=None, metavar="SECONDS",
                        help="server-side timeout of each watch request (default: 300)")


def build_config(args: argparse.Namespace,
                 settings: Settings | None = None) -> tuple[OperatorSettings, str | None]:
    """The operator's configuration, read from the environment once (`settings`, else this
    process's), with the command line's options over it; and its saga log's DSN (`--dsn`, else
    AGENTSAGA_OPERATOR_DSN, else AGENTSAGA_DSN; None: no saga log, never the embedded one)."""
    settings = Settings.from_env() if settings is None else settings
    changes: dict[str, object] = {"webhook_port": args.webhook_port,
                                  "webhook_cert_dir": args.webhook_cert_dir}
    for option, name, value in (
            ("--resync-interval", "resync_seconds", args.resync_interval),
            ("--full-resync-interval", "full_resync_seconds", args.full_resync_interval),
            ("--watch-timeout", "watch_timeout_seconds", args.watch_timeout)):
        if value is None:
            continue
        if value <= 0:
            raise ConfigurationError(f"{option} must be a positive number of seconds, "
                                     f"got {value}")
        changes[name] = value
    dsn = None if is_embedded(args.dsn, settings, "operator") else resolve_dsn(
        args.dsn, settings, "operator")
    return dataclasses.replace(settings.operator, **changes), dsn  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    config, dsn = build_config(args)
    template = None
    if config.sidecar_template:
        try:
            template = load_template(config.sidecar_template)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"AGENTSAGA_SIDECAR_TEMPLATE: {exc}") from exc
    if dsn is None:
        logger.warning("no AGENTSAGA_DSN: step counts, the finalizer and pivot decisions cannot "
                    "consult the saga log")
    telemetry.setup("agentsaga-operator")  # OTEL_* environment; off when none is set
    # the operator's database role: it records decisions; the schema is the migration's
    saga_log = None if dsn is None else SagaLog(dsn, min_size=1, max_size=4).open(migrate=False)
    if saga_log is not None:
        saga_log.require_schema()
    api = api_client()
    if args.webhook_configuration:
        if not config.webhook_cert_dir:
            raise ConfigurationError("--webhook-configuration needs --webhook-cert-dir: the "
                                     "caBundle set is that directory's ca.crt")
        inject_ca_bundle(api, args.webhook_configuration,
                         Path(config.webhook_cert_dir) / "ca.crt")
    context = Context(config, KubeApi(api), saga_log, template)
    instruments = telemetry.current().instruments
    telemetry.zero_operator_counters(instruments)
    context.gauges.register(instruments.meter)
    if saga_log is not None:  # the log-wide gauges the alerts watch
        telemetry.observe_log(saga_log)
        telemetry.observe_waits(saga_log)
    import agentsaga.operator  # noqa: F401  (registers the handlers)

    recover_unreadable_watches()  # one undecodable list or event: logged, listed again
    priority = args.priority if args.priority is not None else random.randint(1, 1_000_000)
    try:
        kopf.run(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            standalone=True if args.standalone else None,
            peering_name=None if args.standalone else args.peering,
            priority=priority,
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(context=context),
        )
    finally:
        if saga_log is not None:
            saga_log.close()
        telemetry.shutdown()
    return 0
