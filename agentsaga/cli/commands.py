"""Small commands: `migrate`, `log --run RUN`, `approve` (the pivot), `settle` (a step no lookup
can settle) and `corrections`."""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal, overload

from agentsaga import telemetry
from agentsaga.cli.database import open_saga_log
from agentsaga.errors import ConfigurationError
from agentsaga.loading import load_tools
from agentsaga.saga import corrections, human_settlement, pivot
from agentsaga.settings import Settings
from agentsaga.store import Correction, PivotRecord, SagaLog, Step, StoreHooks, roles
from agentsaga.store.interfaces import JobStore, MaintenanceStore, OperatorStore
from agentsaga.store.postgres import Role
from agentsaga.store.timing import Attempt, Observation


def add_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", help="Postgres DSN (default: AGENTSAGA_DSN, else the embedded "
                        "Postgres under AGENTSAGA_DATA_DIR, by default "
                        "~/.local/share/agentsaga)")


@overload
def open_log_from(args: argparse.Namespace, *, check_schema: bool = ...,
                  hooks: StoreHooks | None = ...,
                  role: Literal["sidecar"] = ...) -> AbstractContextManager[JobStore]: ...
@overload
def open_log_from(args: argparse.Namespace, *, check_schema: bool = ...,
                  hooks: StoreHooks | None = ...,
                  role: Literal["operator"]) -> AbstractContextManager[OperatorStore]: ...
@overload
def open_log_from(args: argparse.Namespace, *, check_schema: bool = ...,
                  hooks: StoreHooks | None = ...,
                  role: Literal["migrate"]) -> AbstractContextManager[MaintenanceStore]: ...
def open_log_from(args: argparse.Namespace, *, check_schema: bool = True,
                  hooks: StoreHooks | None = None, role: Role = "sidecar") -> SagaLog:
    """The saga log of `--dsn` (else the role's DSN: AGENTSAGA_OPERATOR_DSN for decisions,
    AGENTSAGA_DSN, the embedded one as the role's user), waited for up to AGENTSAGA_DB_WAIT_S;
    never migrated here (only `agentsaga migrate` does, and a sidecar on the embedded one).
    Leaving the context closes it. Typed as what the role may do: AGENTSAGA_DSN's credential
    is a namespace's Job credential where a command runs as a Job (or the sidecar's, whose
    writes include a Job's): a Job's interface; the operator's role decides; the migration
    role migrates and prunes."""
    return open_saga_log(args.dsn, Settings.from_env(), check_schema=check_schema, hooks=hooks,
                         role=role)


def configure_migrate(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "--namespace", action="append", default=[], metavar="NS",
        help="an agent namespace whose credentials to provision (repeat it; with those of "
             "AGENTSAGA_NAMESPACES, comma-separated): a sidecar role agentsaga_ns_<ns> and a "
             "Job role agentsaga_job_<ns>, each seeing only that namespace's runs")
    parser.add_argument(
        "--passwords-dir", default=None,
        help="a directory holding each credential's password in a file named after its role "
             "(default: AGENTSAGA_DB_PASSWORDS_DIR; the chart mounts its Secret there); a role "
             "without a file keeps its password")
    defaults = roles.DEFAULT_LIMITS
    parser.add_argument(
        "--tenant-connection-limit", type=int, default=defaults.connections, metavar="N",
        help="connections each tenant role (agentsaga_sidecar, agentsaga_job and every "
             f"namespace's credential) may hold at once (default {defaults.connections}; a "
             "sidecar's pools hold up to 32)")
    parser.add_argument(
        "--tenant-statement-timeout", default=defaults.statement_timeout, metavar="DURATION",
        help="the longest statement of a tenant role's session (default "
             f"{defaults.statement_timeout})")
    parser.add_argument(
        "--tenant-lock-timeout", default=defaults.lock_timeout, metavar="DURATION",
        help=f"the longest lock wait of a tenant role (default {defaults.lock_timeout})")
    parser.add_argument(
        "--tenant-idle-timeout", default=defaults.idle_in_transaction_timeout,
        metavar="DURATION",
        help="how long a tenant role's transaction may sit idle before Postgres ends the "
             f"session (default {defaults.idle_in_transaction_timeout})")
    bounds = roles.RunBounds()
    parser.add_argument(
        "--runs-per-window", type=int, default=None, metavar="N",
        help="the runs each namespace named may begin in any --run-window-s seconds (enforced "
             f"by Postgres, whatever sidecar begins them; default {bounds.runs_per_window}); "
             "with --run-window-s and --namespace-open-runs, set for every --namespace given, "
             "or, with no namespace, as the default of every namespace without its own")
    parser.add_argument(
        "--run-window-s", type=int, default=None, metavar="S",
        help=f"the sliding window of --runs-per-window, seconds (default {bounds.window_s})")
    parser.add_argument(
        "--namespace-open-runs", type=int, default=None, metavar="N",
        help="the runs each namespace named may hold open at once, over all its sidecars "
             f"(default {bounds.open_runs})")


def run_migrate(args: argparse.Namespace) -> int:
    """The schema and the roles' privileges, as the migration role (AGENTSAGA_MIGRATE_DSN),
    and one credential of each kind per agent namespace."""
    settings = Settings.from_env()
    named = list(dict.fromkeys([*settings.namespaces, *args.namespace]))
    directory = args.passwords_dir or settings.db_passwords_dir
    namespaces = {ns: _passwords(ns, directory) for ns in named}
    limits = roles.TenantLimits(
        connections=args.tenant_connection_limit, statement_timeout=args.tenant_statement_timeout,
        lock_timeout=args.tenant_lock_timeout,
        idle_in_transaction_timeout=args.tenant_idle_timeout)
    bounds = _bounds(args)
    with open_log_from(args, check_schema=False, role="migrate") as saga_log:
        applied = saga_log.migrate(namespaces, limits, bounds)
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    print("privileges set for " + ", ".join(roles.ROLES))
    for ns in namespaces:
        print(f"namespace {ns}: " + ", ".join(
            f"{kind} {role}" for kind, role in roles.namespace_roles(ns).items()))
    if bounds is not None:
        print(f"run bounds of {', '.join(namespaces) or 'every namespace without its own'}: "
              f"{bounds.runs_per_window} runs per {bounds.window_s} s, "
              f"{bounds.open_runs} open at once")
    return 0


def _bounds(args: argparse.Namespace) -> roles.RunBounds | None:
    """The run bounds the flags give (the defaults for those not given); None without any."""
    given = {"runs_per_window": args.runs_per_window, "window_s": args.run_window_s,
             "open_runs": args.namespace_open_runs}
    if all(value is None for value in given.values()):
        return None
    return roles.RunBounds(**{k: v for k, v in given.items() if v is not None})


def _passwords(namespace: str, directory: str | Path | None) -> dict[str, str]:
    """kind -> password of the namespace's credentials found in `directory`."""
    found = {}
    for kind, role in roles.namespace_roles(namespace).items():
        path = Path(directory) / role if directory else None
        if path is not None and path.is_file():
            found[kind] = path.read_text().strip()
    return found


def configure_log(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--run", required=True, help="the run id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_log(args: argparse.Namespace) -> int:
    with open_log_from(args) as saga_log:
        run = saga_log.require_run(args.run)
        steps = saga_log.steps(args.run)
        attempts = saga_log.attempts(args.run)
        observations = saga_log.observations(args.run)
    if args.json:
        record = run.pivot
        print(json.dumps({"run_id": run.run_id, "state": run.state, "owner_epoch":
                          run.owner_epoch,
                          "irreversible_before_pivot": run.irreversible_before_pivot,
                          "plan_hash": None if record is None else record.plan_hash,
                          "pivot": None if record is None else record.to_json(with_key=False),
                          "steps": [_step_json(s) for s in steps],
                          "attempts": [vars(a) for a in attempts],
                          "observations": [vars(o) for o in observations]},
                         default=str, indent=2))
        return 0
    print(f"run {run.run_id}  state={run.state}  epoch={run.owner_epoch}  "
          f"irreversible_before_pivot={run.irreversible_before_pivot}")
    print(format_steps(steps))
    if attempts:
        print(format_attempts(steps, attempts))
    if observations:
        print(format_observations(observations))
    if run.pivot:
        print(format_pivot(run.pivot))
    return 0


def _step_json(step: Step) -> dict[str, object]:
    return {k: getattr(step, k) for k in (
        "step_idx", "tool", "tool_class", "idempotency_key", "status", "external_ref",
        "audience", "args", "result", "compensation", "comp_status", "error")}


def format_attempts(steps: list[Step], attempts: list[Attempt]) -> str:
    """Re-sent steps: the arguments first sent (kept in the row), then each later attempt's."""
    lines = ["re-sent steps (the row keeps the arguments first sent):"]
    for step in steps:
        mine = [a for a in attempts if a.step_idx == step.step_idx]
        if not mine:
            continue
        lines.append(f"  step {step.step_idx} {step.tool}  attempt 1 (first sent): "
                     f"{json.dumps(step.args, sort_keys=True)}")
        lines += [f"  step {step.step_idx} {step.tool}  attempt {a.attempt} at "
                  f"{a.created_at:%Y-%m-%d %H:%M:%S}: {json.dumps(a.args, sort_keys=True)}"
                  for a in mine]
    return "\n".join(lines)


def format_observations(observations: list[Observation]) -> str:
    """What calls saw after their writer was fenced or their row settled by someone else."""
    lines = ["observed by calls that returned too late to write their outcome:"]
    lines += [f"  step {o.step_idx}  {o.outcome}  ref={o.external_ref or '-'}  "
              f"epoch={o.writer_epoch}  at {o.observed_at:%Y-%m-%d %H:%M:%S}"
              + (f"  ({o.error})" if o.error else "") for o in observations]
    return "\n".join(lines)


def format_pivot(record: PivotRecord) -> str:
    """The staged plan as an approver reads it."""
    lines = [f"pivot: {record.state}  planHash={record.plan_hash}"]
    for item in record.commit:
        lines.append(f"  commit {item['tool']}({json.dumps(item['args'])})  class={item['class']}"
                     f"  audience={','.join(item['audience'])}")
    if record.decision:
        lines.append(f"  decided {record.decision} by {record.decided_by} at "
                     f"{record.decided_at}: {record.reason or '-'}")
    return "\n".join(lines)


def format_steps(steps: list[Step]) -> str:
    """The saga log as a fixed-width table."""
    header = ("step", "tool", "class", "status", "key", "external ref", "audience")
    rows = [(str(s.step_idx), s.tool, s.tool_class, s.status, s.idempotency_key[:12] + "…",
             s.external_ref or "-", ",".join(s.audience) or "-") for s in steps]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [header, *rows]]
    if not rows:
        lines.append("(no side-effecting steps)")
    return "\n".join(lines)


def configure_approve(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--run", required=True, help="the run id")
    parser.add_argument("--plan-hash", required=True,
                        help="the hash of the staged plan you reviewed (see `agentsaga log`)")
    parser.add_argument("--decision", required=True, type=_decision, metavar="DECISION",
                        help="Approved (the commit steps may run) or Rejected (the run will be "
                        "unwound); any case, approve/reject too")
    parser.add_argument("--approver", default=None,
                        help="who decides (default: the current user)")
    parser.add_argument("--reason", default="", help="why, for the record")


def _person(given: str | None, flag: str) -> str:
    """Who records a decision: `given`, else the current user, looked up only when a person's
    input is recorded (a container's uid may have no name, and no other command needs one)."""
    if given:
        return given
    try:
        return getpass.getuser()
    except (OSError, KeyError) as e:
        raise ConfigurationError(f"this user has no name ({e}); say who decides with "
                                 f"{flag} NAME") from None


def _decision(text: str) -> str:
    """'approved', 'APPROVE', 'reject' ... -> Approved / Rejected."""
    word = text.strip().lower()
    if word in ("approved", "approve"):
        return "Approved"
    if word in ("rejected", "reject"):
        return "Rejected"
    raise argparse.ArgumentTypeError(f"{text!r}: use Approved or Rejected")


def run_approve(args: argparse.Namespace) -> int:
    """The pivot decision without Kubernetes, through the same validation as the operator's,
    as the operator's database role (the only one that may record it)."""
    with open_log_from(args, role="operator") as saga_log:
        record = pivot.record_decision(saga_log, args.run, args.plan_hash, args.decision,
                                       _person(args.approver, "--approver"), args.reason)
    print(f"run {args.run}: plan {record.plan_hash} {record.decision} by "
          f"{record.decided_by} at {record.decided_at}")
    if record.decision == "Rejected":
        print(rejected_next(args.run, args.dsn, Settings.from_env().tools))
    return 0


def rejected_next(run: str, dsn: str | None, tools: tuple[str, ...]) -> str:
    """What follows a rejection: the agent waiting at the pivot unwinds the run itself (under
    Kubernetes the operator does); else `agentsaga unwind`."""
    return ("the run will not commit: an agent waiting at the pivot unwinds it itself; with "
            "none left, unwind it with " + unwind_command(run, dsn, tools))


def unwind_command(run: str, dsn: str | None, tools: tuple[str, ...]) -> str:
    """The `agentsaga unwind` of `run` that works from here: it must load the run's tools to
    look its steps up, which AGENTSAGA_TOOLS names (the unwind reads it too), else --tools."""
    command = f"agentsaga unwind --run {shlex.quote(run)}"
    if dsn:
        command += f" --dsn {shlex.quote(dsn)}"
    if tools:
        return f"`{command}`"
    return (f"`{command} --tools MODULE`, MODULE being the tools your sidecar loaded (its "
            "--tools or AGENTSAGA_TOOLS, e.g. ./refund_tools.py)")


def configure_settle(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--run", required=True, help="the run id")
    parser.add_argument("--step", required=True, type=int, help="the step to settle (see "
                        "`agentsaga log --run RUN`)")
    said = parser.add_mutually_exclusive_group(required=True)
    said.add_argument("--happened", action="store_const", dest="outcome", const="Happened",
                      help="its effect exists in the real system")
    said.add_argument("--not-happened", action="store_const", dest="outcome",
                      const="NotHappened", help="it never took effect")
    parser.add_argument("--ref", default=None, help="the effect's id in the real system "
                        "(with --happened; an unwind uses it)")
    parser.add_argument("--reason", required=True, help="how you know, for the record")
    parser.add_argument("--settler", "--by", default=None,
                        help="who settles (default: the current user)")
    parser.add_argument("--key", default=None, help="the step's idempotency key, checked "
                        "against the log (guards against settling the wrong step)")


def run_settle(args: argparse.Namespace) -> int:
    """A person's settlement of an UNKNOWN step, through the same validation as the
    operator's `status.settlements`, as the operator's database role (the only one that may
    record it)."""
    with open_log_from(args, hooks=telemetry.TelemetryHooks(), role="operator") as saga_log:
        done = human_settlement.settle(
            saga_log, args.run, args.step, human_settlement.outcome(args.outcome),
            settler=_person(args.settler, "--settler"), reason=args.reason, ref=args.ref,
            step_key=args.key)
    item, step = done.settlement, done.step
    verb = "settled" if done.recorded else "was settled before (nothing changed)"
    print(f"run {args.run} step {step.step_idx} {step.tool}: {verb} as {item.outcome} by "
          f"{item.settler}; the step is {step.status}"
          + (f" (ref {step.external_ref})" if step.external_ref else ""))
    print(f"continue with {unwind_command(args.run, args.dsn, Settings.from_env().tools)} (or "
          "let the agent call again)")
    return 0


def configure_corrections(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--run", required=True, help="the run id")
    decide = parser.add_mutually_exclusive_group()
    decide.add_argument("--approve", type=int, metavar="STEP", help="approve this step's "
                        "proposed correction")
    decide.add_argument("--dismiss", type=int, metavar="STEP", help="dismiss it: say nothing")
    parser.add_argument("--approver", default=None,
                        help="who decides (default: the current user)")
    parser.add_argument("--reason", default="", help="why, for the record")
    parser.add_argument("--send", action="store_true",
                        help="send every approved correction (needs --tools)")
    parser.add_argument("--tools", help="tools modules (default: AGENTSAGA_TOOLS)")


def run_corrections(args: argparse.Namespace) -> int:
    """List a run's corrections (internal first), decide one, or send the approved ones. A
    decision is recorded as the operator's database role (the only one that may); sending, as
    AGENTSAGA_DSN's (a Job's or the sidecar's: the senders), which the operator's may not."""
    step = args.approve if args.approve is not None else args.dismiss
    if step is not None:
        decision = "Approved" if args.approve is not None else "Rejected"
        with open_log_from(args, hooks=telemetry.TelemetryHooks(), role="operator") as decider:
            decider.require_run(args.run)
            approver = _person(args.approver, "--approver")
            decided = corrections.decide(decider, args.run, step, decision, approver,
                                         args.reason)
            listed = decider.corrections(args.run)
        print(f"correction for step {step}: {decided.state} by {approver}")
        if not args.send:
            _print_corrections(listed)
            return 0
    unsent = 0
    with open_log_from(args, hooks=telemetry.TelemetryHooks()) as saga_log:
        saga_log.require_run(args.run)
        if args.send:
            modules = args.tools.split(",") if args.tools else Settings.from_env().tools
            registry = load_tools(modules)
            for result in corrections.send_approved(saga_log, registry, args.run):
                unsent += not result["sent"]
                print(f"step {result['step_idx']} {result['tool']}: "
                      + ("sent" if result["sent"] else f"not sent: {result['why']}"))
        listed = saga_log.corrections(args.run)
    _print_corrections(listed)
    return 1 if unsent else 0


def _print_corrections(listed: list[Correction]) -> None:
    for item in listed:
        print(f"step {item.step_idx:>3}  {item.tool:<24} {item.state:<9} rank={item.rank:<3} "
              f"audience={','.join(item.audience)}")
