"""How agentsaga's commands log: one line per record, with the run, step, tool and key of the
record's `extra` appended, so that a sidecar's log says which call a line is about; and every
record masked when it is made (`agentsaga.redact`), whoever logs it and whichever handler
writes it: its message with its arguments, its exception's text and its stack. A tool's
exception that quotes a card number or a `Bearer` token is logged as `[card ****4242]` and
`Bearer [redacted]`, as the saga log stores it."""

from __future__ import annotations

import logging
from typing import Any

from agentsaga.redact import redact_text

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT = (("run_id", "run"), ("step", "step"), ("tool", "tool"), ("key", "key"))
"""(attribute set through `extra`, name printed)"""

QUIET = ("pgserver",)
"""Loggers that only speak at WARNING unless --verbose: pgserver logs initdb's and pg_ctl's
whole output at INFO."""

_EXCEPTIONS = logging.Formatter()


class ContextFormatter(logging.Formatter):
    """`... message  run=refund-1182 step=3 tool=charge_card key=3f9a…` when the record has
    them."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = [f"{label}={getattr(record, attr)}" for attr, label in CONTEXT
                   if getattr(record, attr, None) not in (None, "")]
        # the record was masked when it was made (`MaskedRecords`): its context, from the
        # caller's `extra`, is what is left
        return f"{line}  {redact_text(' '.join(context))}" if context else line


class MaskedRecords:
    """A log record factory: the record the previous factory makes, masked. Installed once
    per process (`setup`); records are made only for enabled levels, so a masked debug line
    costs nothing when debug is off."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.make(*args, **kwargs)
        return mask(record)


def mask(record: logging.LogRecord) -> logging.LogRecord:
    """`record` with its message (arguments merged in), exception text and stack masked."""
    try:
        message = record.getMessage()
    except (TypeError, ValueError):  # a bad format: its parts masked one by one
        message = " ".join(str(part) for part in (record.msg, *(record.args or ())))
    record.msg, record.args = redact_text(message), None
    if record.exc_info and record.exc_info[0] is not None:
        record.exc_text = redact_text(_EXCEPTIONS.formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)
    return record


def install() -> None:
    """Mask every log record this process makes (idempotent)."""
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, MaskedRecords):
        logging.setLogRecordFactory(MaskedRecords(factory))


def setup(verbose: bool) -> None:
    """Root logging for a command: INFO (DEBUG with --verbose) to stderr, every record
    masked."""
    install()
    # a handler that fails to write would print the failure's traceback, and with it the
    # record's own exception unmasked: dropped instead
    logging.raiseExceptions = False
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
