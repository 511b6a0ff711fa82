"""`agentsaga connectors check`: run the read-only checks of `agentsaga.connectors.check` against
the systems configured in this environment (the same `AGENTSAGA_*` settings as the sidecar).

Exit status: 0 every check passed, 1 a check failed (the output says what to change), 2 the
configuration is wrong or names no system.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from agentsaga.connectors.check import check_all
from agentsaga.connectors.config import ConnectorConfig
from agentsaga.errors import ConfigurationError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="check, read-only, that each configured account has "
                           "what its connector relies on",
                           description="Send only read-only requests to each configured system "
                           "(AGENTSAGA_STRIPE_*, AGENTSAGA_JIRA_*, AGENTSAGA_ZENDESK_*, "
                           "AGENTSAGA_EMAIL_*) and report per connector what is missing.")
    check.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> int:
    config = ConnectorConfig.from_env(os.environ)
    if not any((config.stripe, config.jira, config.zendesk, config.email)):
        raise ConfigurationError(
            "no connector is configured: set AGENTSAGA_STRIPE_API_KEY, AGENTSAGA_JIRA_URL, "
            "AGENTSAGA_ZENDESK_URL or AGENTSAGA_EMAIL_URL (see `agentsaga.connectors.config`)")
    results = check_all(config)
    failed = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps([{"system": r.system, "check": r.name, "ok": r.ok, "detail": r.detail}
                          for r in results], indent=2))
    else:
        for result in results:
            print(result.line())
        systems = sorted({r.system for r in results})
        bad = sorted({r.system for r in failed})
        print(f"\n{len(results) - len(failed)}/{len(results)} checks passed"
              + (f"; fix {', '.join(bad)} before relying on it" if bad else
                 f"; {', '.join(systems)} ready"), file=sys.stdout)
    return 1 if failed else 0
