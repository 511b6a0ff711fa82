"""`agentsaga chaos`: a seeded, reproducible fault-injection campaign; exits 1 on a violation."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from agentsaga.settings import Settings
from agentsaga_lab.chaos.campaign import Campaign, CampaignConfig
from agentsaga_lab.chaos.faults import FAULT_KINDS


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `least` (argparse names the option)."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(
                f"must be a whole number of at least {least}, got {text!r}")
        return value
    return whole


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=at_least(1), default=12,
                        help="how many runs, at least 1 (default 12)")
    parser.add_argument("--seed", type=int, default=7, help="the campaign's seed (default 7)")
    parser.add_argument("--only-run", type=at_least(0), default=None, metavar="INDEX",
                        help="replay one run of the seed (its index, from 0)")
    parser.add_argument("--dsn", help="Postgres DSN (default: a private embedded Postgres; "
                        "with a DSN the postgres_restart fault is not drawn), waited for up to "
                        "AGENTSAGA_DB_WAIT_S")


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    config = CampaignConfig(seed=args.seed, runs=args.runs, dsn=args.dsn, only_run=args.only_run,
                            db_wait_s=Settings.from_env().db_wait_s)
    print(f"agentsaga chaos: seed {config.seed}, {config.runs} runs", flush=True)
    result = Campaign(config, say=lambda line: print(line, flush=True)).run()
    print("faults injected, by kind:")
    for kind in FAULT_KINDS:
        extra = f"  (armed, not reached: {result.not_reached[kind]})" \
            if result.not_reached[kind] else ""
        print(f"  {kind:<26} {result.faults[kind]}{extra}")
    print("violations:" if result.violations else "violations: none")
    for violation, index in result.violations:
        replay = f"  (replay: agentsaga chaos --seed {config.seed} --only-run {index})" \
            if index >= 0 else ""
        print(f"  [{violation.invariant}] run {violation.run_id}: {violation.detail}{replay}")
    print(f"runs: {result.runs}, faults: {result.fault_count}, "
          f"violations: {len(result.violations)}", flush=True)
    sys.stdout.flush()
    return 1 if result.violations else 0
