"""How agentsaga's commands log: one line per record, with the run, step, tool and key of the
record's `extra` appended, so that a sidecar's log says which call a line is about."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT = (("run_id", "run"), ("step", "step"), ("tool", "tool"), ("key", "key"))
"""(attribute set through `extra`, name printed)"""

QUIET = ("pgserver",)
"""Loggers that only speak at WARNING unless --verbose: pgserver logs initdb's and pg_ctl's
whole output at INFO."""


class ContextFormatter(logging.Formatter):
    """`... message  run=refund-1182 step=3 tool=charge_card key=3f9a…` when the record has
    them."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = [f"{label}={getattr(record, attr)}" for attr, label in CONTEXT
                   if getattr(record, attr, None) not in (None, "")]
        return f"{line}  {' '.join(context)}" if context else line


def setup(verbose: bool) -> None:
    """Root logging for a command: INFO (DEBUG with --verbose) to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
