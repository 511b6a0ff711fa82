"""`kubectl-agentsaga`: parse, run one subcommand, print its text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agentsaga.plugin.kube import Kubectl, PluginError
from agentsaga.plugin.subcommands import SUBCOMMANDS

NEEDS_RUN = ("plan", "approve", "reject", "settle", "trace")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl agentsaga",
                                     description="AgentRuns of agentsaga: list, review the "
                                     "staged plan, approve or reject it, settle a step only "
                                     "a person can, find the trace.")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for name, (_, help_text) in SUBCOMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.add_argument("-n", "--namespace", help="the AgentRun's namespace (default: "
                             "the current context's)")
        command.add_argument("--context", help="the kubeconfig context to use")
        command.add_argument("--kubeconfig", help="the kubeconfig file to use")
        if name in NEEDS_RUN:
            command.add_argument("run", metavar="RUN", help="the AgentRun's name")
        if name in ("approve", "reject"):
            command.add_argument(
                "--plan-hash", "--hash", dest="plan_hash", required=name == "approve",
                metavar="HASH",
                help="the hash of the plan you reviewed (`kubectl agentsaga plan RUN` prints it):"
                " a plan staged since is not the one you "
                + ("approve" if name == "approve" else "reject") + ", and nothing is written")
            command.add_argument("--reason", default="", help="why, for the record")
            command.add_argument("--approver", help="your username (default: `kubectl auth "
                                 "whoami`); the admission policy accepts only your own")
        if name == "settle":
            command.add_argument("step", metavar="STEP", type=int,
                                 help="the step waiting for a person (status.humanSteps)")
            said = command.add_mutually_exclusive_group(required=True)
            said.add_argument("--happened", action="store_const", dest="outcome",
                              const="Happened", help="its effect exists in the real system")
            said.add_argument("--not-happened", action="store_const", dest="outcome",
                              const="NotHappened", help="it never took effect")
            command.add_argument("--ref", help="the effect's id (with --happened)")
            command.add_argument("--reason", required=True, help="how you know, for the record")
            command.add_argument("--settler", help="your username (default: `kubectl auth "
                                 "whoami`); the admission policy accepts only your own")
        if name == "trace":
            command.add_argument("--jaeger", help="Jaeger's URL, for the link")
            command.add_argument("--grafana", help="Grafana's URL, for the Tempo link")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    kube = Kubectl(namespace=args.namespace, context=args.context, kubeconfig=args.kubeconfig)
    subcommand, _ = SUBCOMMANDS[args.subcommand]
    try:
        print(subcommand(kube, args))
    except PluginError as exc:
        print(f"kubectl agentsaga {args.subcommand}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
