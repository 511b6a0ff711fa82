"""The plugin's subcommands, one function each: `(kubectl, args) -> text to print`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentsaga.plugin.kube import Kubectl, PluginError
from agentsaga.redact import mask_cards

Subcommand = Callable[[Kubectl, argparse.Namespace], str]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [header, *rows])


def runs(kube: Kubectl, args: argparse.Namespace) -> str:
    """AgentRuns across namespaces (or in -n NAMESPACE)."""
    scope = () if kube.namespace else ("--all-namespaces",)
    items = kube.json("get", "agentruns", *scope)["items"]
    if not items:
        return "no AgentRuns" + (f" in namespace {kube.namespace}" if kube.namespace else "")
    rows = []
    for item in items:
        status, meta = item.get("status") or {}, item["metadata"]
        steps = status.get("steps") or {}
        rows.append((meta.get("namespace", ""), meta["name"], status.get("phase", "-"),
                     str(steps.get("total", 0)), str(steps.get("unknown", 0)),
                     (status.get("pivot") or {}).get("state", "-"),
                     str(len(status.get("corrections") or {})),
                     _age(meta.get("creationTimestamp", ""))))
    return table(("NAMESPACE", "NAME", "PHASE", "STEPS", "UNKNOWN", "PIVOT", "CORRECTIONS",
                  "AGE"), rows)


def plan(kube: Kubectl, args: argparse.Namespace) -> str:
    """The staged plan of RUN as an approver reads it."""
    run = kube.agentrun(args.run)
    pivot = (run.get("status") or {}).get("pivot") or {}
    if not pivot.get("planHash"):
        raise PluginError(f"agentrun {args.run} has no staged plan yet (phase "
                          f"{(run.get('status') or {}).get('phase', 'Pending')})")
    lines = [f"agentrun {run['metadata'].get('namespace', '')}/{args.run}: pivot "
             f"{pivot.get('state')}, plan hash {pivot['planHash']}"]
    done = pivot.get("steps") or []
    if done:
        lines += ["", "done before the pivot:", table(
            ("STEP", "TOOL", "CLASS", "STATUS", "AUDIENCE", "REF"),
            [(str(s.get("step", "")), s["tool"], s.get("class", ""), s.get("status") or "-",
              ",".join(s.get("audience") or []) or "-", s.get("externalRef") or "-")
             for s in done])]
    lines += ["", "commit steps to approve:", table(
        ("#", "TOOL", "CLASS", "AUDIENCE", "ARGUMENTS"),
        [(str(i), s["tool"], s.get("class", ""), ",".join(s.get("audience") or []) or "-",
          arguments(s.get("args") or {})) for i, s in enumerate(pivot.get("commit") or [])])]
    if pivot.get("decision"):
        lines += ["", f"decided: {pivot['decision']} by {pivot.get('decidedBy')} at "
                      f"{pivot.get('decidedAt')} ({pivot.get('reason') or 'no reason given'})"]
    elif pivot.get("state") == "AwaitingApproval":
        lines += ["", f"approve: kubectl agentsaga approve {args.run} --plan-hash "
                      f"{pivot['planHash']} --reason '...'",
                  f"reject:  kubectl agentsaga reject {args.run} --plan-hash "
                  f"{pivot['planHash']} --reason '...'"]
    return "\n".join(lines)


def approve(kube: Kubectl, args: argparse.Namespace) -> str:
    return _decide(kube, args, "Approved")


def reject(kube: Kubectl, args: argparse.Namespace) -> str:
    return _decide(kube, args, "Rejected")


VERB = {"Approved": "approve", "Rejected": "reject"}


def _decide(kube: Kubectl, args: argparse.Namespace, decision: str) -> str:
    """The same status patch a human writes by hand: the hash of the plan the person reviewed
    (`--plan-hash`; a reject may leave it out and reject what is staged), one's own name. The
    patch carries the reviewed hash, never one read at this moment: a plan the agent staged
    since is refused here, or by the admission policy and the operator if it comes later."""
    run = kube.agentrun(args.run)
    pivot = (run.get("status") or {}).get("pivot") or {}
    if pivot.get("state") != "AwaitingApproval":
        raise PluginError(f"agentrun {args.run} is not awaiting approval (pivot state: "
                          f"{pivot.get('state') or 'none staged'}); nothing was written")
    reviewed = args.plan_hash or pivot["planHash"]
    if reviewed != pivot["planHash"]:
        raise PluginError(
            f"agentrun {args.run} now awaits approval of plan {pivot['planHash']}, not of plan "
            f"{reviewed} that you reviewed: it was staged again since. Review it with `kubectl "
            f"agentsaga plan {args.run}` and {VERB[decision]} its hash; "
            "nothing was written")
    approver = args.approver or kube.username()
    approval = {"planHash": reviewed, "decision": decision, "approver": approver,
                "reason": args.reason}
    kube.run("patch", "agentrun", args.run, "--subresource=status", "--type=merge", "-p",
             json.dumps({"status": {"approval": approval}}))
    condition = "PivotApproved" if decision == "Approved" else "PivotRejected"
    namespace = run["metadata"].get("namespace", "")
    return (f"agentrun {namespace}/{args.run}: plan {reviewed} {decision} by "
            f"{approver}\nthe operator records it; wait with: kubectl wait agentrun/{args.run}"
            f" -n {namespace} --for=condition={condition}")


def settle(kube: Kubectl, args: argparse.Namespace) -> str:
    """The status patch a person writes by hand for a step no lookup can settle: the step's key
    as the operator shows it (status.humanSteps), one's own name."""
    run = kube.agentrun(args.run)
    status = run.get("status") or {}
    waiting = (status.get("humanSteps") or {}).get(str(args.step))
    if not waiting:
        shown = ", ".join(sorted(status.get("humanSteps") or {})) or "none"
        raise PluginError(f"step {args.step} of agentrun {args.run} is not waiting for a person "
                          f"(steps waiting: {shown}); nothing was written")
    if args.ref and args.outcome != "Happened":
        raise PluginError("--ref goes only with --happened; nothing was written")
    settler = args.settler or kube.username()
    entry = {"outcome": args.outcome, "settler": settler, "reason": args.reason,
             "stepKey": waiting["stepKey"], **({"ref": args.ref} if args.ref else {})}
    kube.run("patch", "agentrun", args.run, "--subresource=status", "--type=merge", "-p",
             json.dumps({"status": {"settlements": {str(args.step): entry}}}))
    namespace = run["metadata"].get("namespace", "")
    return (f"agentrun {namespace}/{args.run}: step {args.step} ({waiting.get('tool')}) settled "
            f"as {args.outcome} by {settler}\nthe operator records it; wait with: kubectl wait "
            f"agentrun/{args.run} -n {namespace} --for=condition=StepsSettled")


def trace(kube: Kubectl, args: argparse.Namespace) -> str:
    """The run's trace id (from the `agentsaga.io/traceparent` annotation) and where to open
    it."""
    run = kube.agentrun(args.run)
    traceparent = ((run["metadata"].get("annotations") or {})
                   .get("agentsaga.io/traceparent", ""))
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        raise PluginError(f"agentrun {args.run} carries no trace (annotation "
                          "agentsaga.io/traceparent); is OpenTelemetry enabled (otel.enabled)?")
    trace_id = parts[1]
    jaeger = (args.jaeger or "http://<jaeger>").rstrip("/")
    grafana = (args.grafana or "http://<grafana>").rstrip("/")
    return "\n".join([
        f"trace id: {trace_id}",
        f"Jaeger:   {jaeger}/trace/{trace_id}",
        f"Tempo:    {grafana}/explore (Tempo data source, TraceQL): {trace_id}",
        f'          or {{ span.agentsaga.run_id = "{args.run}" }}',
    ])


def arguments(args: dict[str, Any]) -> str:
    """A commit step's arguments as one line, whole: what the approver approves. Card numbers
    are masked to their last four (the operator wrote them so; masked again here in case a
    status was written by hand); nothing else is hidden or cut. A value that is not a one-line
    string is shown as JSON."""
    shown = []
    for name, value in args.items():
        plain = isinstance(value, str) and value.isprintable()
        text = value if plain else json.dumps(value, ensure_ascii=False)
        shown.append(f"{name}={mask_cards(text)}")
    return " ".join(shown) or "-"


def _age(stamp: str) -> str:
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


SUBCOMMANDS: dict[str, tuple[Subcommand, str]] = {
    "runs": (runs, "list AgentRuns across namespaces (or in -n NAMESPACE)"),
    "plan": (plan, "show a run's staged plan: commit steps, tools, their whole arguments "
                   "(card numbers masked), audiences, plan hash"),
    "approve": (approve, "approve the staged plan you reviewed (--plan-hash HASH, as you)"),
    "reject": (reject, "reject a run's staged plan (the run is unwound)"),
    "settle": (settle, "settle a step no lookup can settle: --happened [--ref ID] or "
                       "--not-happened, with --reason (as you)"),
    "trace": (trace, "print a run's trace id and links for Jaeger and Tempo"),
}
