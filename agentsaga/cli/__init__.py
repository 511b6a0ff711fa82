"""The `agentsaga` command. Each subcommand lives in its own module with `configure(parser)` and
`run(args) -> int`; this file only lists them. Other distributions add commands through the
`agentsaga.commands` entry point (a dict like `COMMANDS`): the lab's `world`, `demo`, `chaos`
and `bench` come that way, so the product never imports the lab. A product command (the
sidecar's start-up above all) neither reads the installed distributions' entry points nor their
versions: both scan every installed distribution's metadata."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from agentsaga import grpc_tuning
from agentsaga.errors import SagaError
from agentsaga.extras import MissingExtra
from agentsaga.telemetry import logformat

# name -> (module, one-line help). Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "sidecar": ("agentsaga.sidecar.main", "serve the gRPC sidecar for the agent in this pod"),
    "migrate": ("agentsaga.cli.commands", "apply the saga-log schema migrations to the database"),
    "runs": ("agentsaga.cli.runlist", "list the runs in the saga log, newest first"),
    "log": ("agentsaga.cli.commands", "print a run's saga log as a table"),
    "approve": ("agentsaga.cli.commands",
                "approve or reject a run's staged plan (no Kubernetes)"),
    "settle": ("agentsaga.cli.commands", "record whether a step no lookup can settle happened "
               "(--happened [--ref ID] | --not-happened)"),
    "corrections": ("agentsaga.cli.commands",
                    "list, approve or dismiss, and send a run's corrections"),
    "prune": ("agentsaga.cli.prune", "remove ended runs older than a cutoff from the saga log"),
    "reconcile": ("agentsaga.cli.job_commands",
                  "settle a run's unknown steps by asking the real systems"),
    "unwind": ("agentsaga.cli.job_commands",
               "reconcile, then compensate a run backwards, queue corrections"),
    "operator": ("agentsaga.operator.main", "run the Kubernetes operator (AgentRuns, orphans, "
                 "pivot approvals)"),
    "connectors": ("agentsaga.connectors.cli", "check, read-only, that each configured account "
                   "has what its connector relies on (`connectors check`)"),
    "mcp": ("agentsaga.connectors.mcp.check", "check the upstream MCP servers and their tools' "
            "saga declarations (`mcp check`)"),
}

PLUGIN_GROUP = "agentsaga.commands"

LAB_COMMANDS = ("world", "demo", "chaos", "bench")
"""The lab's commands, named here only to say where they come from when it is not installed."""


def all_commands() -> dict[str, tuple[str, str]]:
    """The product's commands and those of every installed distribution that adds some."""
    from importlib import metadata

    commands = dict(COMMANDS)
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        try:
            added = entry.load()
        except ImportError as exc:  # its metadata is here, its code is not: the rest still work
            print(f"agentsaga: the commands of {entry.value} are left out: {exc} (reinstall the "
                  "distribution that provides them)", file=sys.stderr)
            continue
        commands.update({name: added[name] for name in added if name not in COMMANDS})
    return commands


def build_parser(only: str | None = None,
                 commands: dict[str, tuple[str, str]] | None = None) -> argparse.ArgumentParser:
    """The parser of `commands` (default: `all_commands()`). Only the chosen command's module
    is imported and asked for its options: start-up stays fast, and `agentsaga --help` works
    whatever one command needs."""
    parser = argparse.ArgumentParser(
        prog="agentsaga",
        description=(
            "Sagas for LLM agents: an intent log before every side effect, idempotency keys "
            "from (run, step, tool), reconcile before compensate."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in (commands or all_commands()).items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(_module=module_name)
        if name != only:
            continue
        module = importlib.import_module(module_name)
        configure = getattr(module, f"configure_{name}", None) or module.configure
        configure(command)
    return parser


class _Version(argparse.Action):
    """`--version`, the installed version read only when asked (reading it scans the installed
    distributions' metadata)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"agentsaga {version()}")
        parser.exit()


def version() -> str:
    """The installed package's version."""
    from importlib import metadata

    try:
        return metadata.version("agentsaga")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    # before a command's module is imported: most import grpc, whose core reads
    # GRPC_EXPERIMENTS then, once
    grpc_tuning.apply()
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    # a product command needs no other distribution's: no plugin may replace one
    commands = dict(COMMANDS) if first in COMMANDS else all_commands()
    if first in LAB_COMMANDS and first not in commands:
        print(f"agentsaga {first}: this command is part of the lab, which is not installed: "
              "`make demo` in the agentsaga repository installs it with the product (its "
              "lab/ folder), or `pip install dist/agentsaga_lab-*.whl` with the wheel `make "
              "dist` builds there (agentsaga is not on an index yet)", file=sys.stderr)
        return 2
    try:
        parser = build_parser(only=first if first in commands else None, commands=commands)
    except MissingExtra as exc:  # the command's module needs an optional dependency
        print(f"agentsaga {first}: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    logformat.setup(args.verbose)
    module = importlib.import_module(args._module)
    run = getattr(module, f"run_{args.command}", None) or module.run
    try:
        return int(run(args) or 0)
    except SagaError as exc:
        print(f"agentsaga {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
