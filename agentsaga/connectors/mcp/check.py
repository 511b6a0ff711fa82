"""`agentsaga mcp check --upstreams FILE`: connect to every upstream and list each tool with
its declaration, or the reason it is hidden. Exit 0 when the file is valid and every upstream
answered."""

from __future__ import annotations

import argparse
import json

from agentsaga.connectors.mcp import declarations
from agentsaga.connectors.mcp.registration import Listed, plan_upstream
from agentsaga.connectors.mcp.upstream import Upstream
from agentsaga.errors import ConfigurationError
from agentsaga.settings import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="connect to the upstreams and list every tool with "
                           "its declaration or why it is hidden")
    check.add_argument("--upstreams", help="the upstreams file (default: AGENTSAGA_MCP_UPSTREAMS)")
    check.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    path = args.upstreams or Settings.from_env().mcp.upstreams
    if not path:
        raise ConfigurationError("name the upstreams file: --upstreams FILE (or set "
                                 "AGENTSAGA_MCP_UPSTREAMS)")
    doc = declarations.load(path)
    rows: list[Listed] = []
    failed: list[str] = []
    for name, decl in doc.upstreams.items():
        upstream = Upstream(name, decl)
        try:
            rows += plan_upstream(upstream)[1]
        except ConfigurationError as exc:
            failed.append(str(exc))
        finally:
            upstream.close()
    if args.json:
        print(json.dumps({"tools": [r.__dict__ for r in rows], "errors": failed}, indent=2))
    else:
        width = max([len(r.name) for r in rows] + [4])
        print(f"{'upstream':<12} {'tool':<{width}}  {'offered':<7}  {'class':<13}  why")
        for r in rows:
            print(f"{r.upstream:<12} {r.name:<{width}}  {'yes' if r.offered else 'no':<7}  "
                  f"{r.cls:<13}  {r.reason}")
        for line in failed:
            print(f"error: {line}")
    return 1 if failed else 0
