"""`agentsaga demo [--json] [--dsn DSN]`: exit 0 only when agentsaga got the incident exactly
right and the naive harness reproduced the essay's failures."""

from __future__ import annotations

import argparse
import json
import logging

from agentsaga.demo import story
from agentsaga.demo.incident import run_both
from agentsaga.demo.report import EXPECTED_AGENTSAGA, EXPECTED_NAIVE, log_table, table


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    parser.add_argument("--dsn", help="Postgres for the saga log (default: an embedded one in "
                        "a temporary directory)")


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    naive, saga = run_both(args.dsn)
    ok = saga.outcome == EXPECTED_AGENTSAGA and naive.outcome == EXPECTED_NAIVE
    if args.json:
        print(json.dumps({"naive": naive.outcome, "agentsaga": saga.outcome, "ok": ok,
                          "agentsaga_log": saga.steps, "agentsaga_unwind": saga.unwind,
                          "naive_rollback": naive.notes, "agentsaga_notes": saga.notes},
                         indent=2, default=str))
        return 0 if ok else 1
    corrections = saga.unwind.get("corrections", [])
    print(story.SETUP, "\n")
    print(story.naive_story(naive.outcome, naive.notes), "\n")
    print(story.agentsaga_story(saga.outcome, saga.notes, corrections), "\n")
    print(table(naive.outcome, saga.outcome), "\n")
    print("agentsaga saga log:")
    print(log_table(saga.steps), "\n")
    for c in corrections:
        print(f"correction for step {c['step_idx']} {c['tool']}: {c['state']} "
              f"(audience {','.join(c['audience'])})")
    print()
    print(story.LEGEND)
    print("\nagentsaga outcome is exactly right" if saga.outcome == EXPECTED_AGENTSAGA
          else "\nagentsaga outcome is NOT right")
    if naive.outcome != EXPECTED_NAIVE:
        print("the naive harness did not reproduce the essay's failures")
    print()
    print(story.NEXT)
    return 0 if ok else 1
