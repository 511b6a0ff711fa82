"""Test tools whose effects land in a `ledger` table of a Postgres database (LEDGER_DSN).

The ledger is the ground truth the core tests assert on: it survives the sidecar being killed.
Faults are rows in `ledger_faults`, consumed one per call:
    unknown_after_commit  the effect is committed, then the tool raises OutcomeUnknown
    reset_after_commit    the effect is committed, then the tool raises ConnectionResetError
                          (a surprise: no connector said what it means)
    kill_after_commit     the effect is committed, then the process SIGKILLs itself
    cut_db_after_commit   the effect is committed, then every other connection to the database
                          is terminated (the saga log loses its connections mid-call)
    held_commit           the effect is committed only once the test calls `release(dsn, tool)`
                          (a slow real system; the call fails after 30 s without it)
    reject                nothing happens; the tool raises Rejected
    lost                  nothing happens; the tool raises OutcomeUnknown (a request lost on
                          its way: the caller cannot tell it from unknown_after_commit)
    hide_lookups          the next N lookups find nothing (a lagging index)
    fail_lookups          the next N lookups raise (the system cannot be asked)
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from agentsaga import NO_LOOKUP, Compensation, OutcomeUnknown, Registry, Rejected

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    id SERIAL PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, body JSONB NOT NULL,
    closed BOOLEAN NOT NULL DEFAULT false, created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS ledger_faults (
    id SERIAL PRIMARY KEY, tool TEXT NOT NULL, mode TEXT NOT NULL, remaining INT NOT NULL);
CREATE TABLE IF NOT EXISTS ledger_calls (
    id SERIAL PRIMARY KEY, tool TEXT NOT NULL, key TEXT NOT NULL, what TEXT NOT NULL);
"""


def _conn() -> psycopg.Connection[dict[str, Any]]:
    dsn = os.environ.get("LEDGER_DSN")
    if not dsn:
        raise RuntimeError("LEDGER_DSN is not set in this process: the ledger tools write to the "
                           "database it names (the `ledger` fixture, or the cluster's DSN)")
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)


def add_fault(dsn: str, tool: str, mode: str, times: int = 1) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger_faults (tool, mode, remaining) VALUES (%s, %s, %s)",
                     (tool, mode, times))


def release(dsn: str, tool: str) -> None:
    """Let a `held_commit` call of `tool` go on."""
    add_fault(dsn, tool, "release")


HELD_COMMIT_DEADLINE_S = 30.0


def _wait_for_release(conn: psycopg.Connection[dict[str, Any]], tool: str) -> None:
    deadline = time.monotonic() + HELD_COMMIT_DEADLINE_S
    while not _take_fault(conn, tool, ("release",)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tool}: held_commit was never released (release(dsn, tool))")
        time.sleep(0.02)


def effects(dsn: str, kind: str | None = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        if kind is None:
            return conn.execute("SELECT * FROM ledger ORDER BY id").fetchall()
        return conn.execute("SELECT * FROM ledger WHERE kind = %s ORDER BY id", (kind,)).fetchall()


def calls(dsn: str, tool: str | None = None) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT * FROM ledger_calls ORDER BY id").fetchall()
    return [r for r in rows if tool is None or r["tool"] == tool]


def _take_fault(conn: psycopg.Connection[dict[str, Any]], tool: str, modes: tuple[str, ...]) -> str:
    row = conn.execute(
        "UPDATE ledger_faults SET remaining = remaining - 1 WHERE id = ("
        " SELECT id FROM ledger_faults WHERE tool = %s AND mode = ANY(%s) AND remaining > 0"
        " ORDER BY id LIMIT 1 FOR UPDATE) RETURNING mode",
        (tool, list(modes)),
    ).fetchone()
    return "" if row is None else str(row["mode"])


def _effect(tool: str, kind: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    with _conn() as conn:
        conn.execute("INSERT INTO ledger_calls (tool, key, what) VALUES (%s, %s, 'call')",
                     (tool, key))
        fault = _take_fault(conn, tool, ("unknown_after_commit", "kill_after_commit", "reject",
                                         "cut_db_after_commit", "held_commit", "lost",
                                         "reset_after_commit"))
        if fault == "held_commit":
            _wait_for_release(conn, tool)
        if fault == "reject":
            raise Rejected(f"{tool}: rejected by the ledger", status=422)
        if fault == "lost":
            raise OutcomeUnknown(f"{tool}: 504 Gateway Timeout (the request never arrived)")
        row = conn.execute(
            "INSERT INTO ledger (kind, key, body) VALUES (%s, %s, %s) RETURNING id",
            (kind, key, Jsonb(body)),
        ).fetchone()
        assert row is not None
        if fault == "unknown_after_commit":
            raise OutcomeUnknown(f"{tool}: 504 Gateway Timeout (after the effect was committed)")
        if fault == "reset_after_commit":
            raise ConnectionResetError(f"{tool}: connection reset by peer")
        if fault == "kill_after_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "cut_db_after_commit":  # each waited for: gone before the tool returns
            conn.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                         " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    return {"id": f"{kind.upper()}-{row['id']}", **body}


def _lookup(tool: str, kind: str, key: str) -> dict[str, Any] | None:
    with _conn() as conn:
        conn.execute("INSERT INTO ledger_calls (tool, key, what) VALUES (%s, %s, 'lookup')",
                     (tool, key))
        fault = _take_fault(conn, tool, ("hide_lookups", "fail_lookups"))
        if fault == "fail_lookups":
            raise OutcomeUnknown(f"{tool}: lookup failed (503)")
        if fault == "hide_lookups":
            return None
        row = conn.execute("SELECT * FROM ledger WHERE kind = %s AND key = %s", (kind, key)
                           ).fetchone()
    if row is None:
        return None
    return {"id": f"{kind.upper()}-{row['id']}", **row["body"]}


def build_registry() -> Registry:
    registry = Registry()

    @registry.tool(cls="pure")
    def search_orders(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "status": "delivered"}

    @registry.tool(
        cls="compensatable",
        audience=["support_team"],
        compensate=lambda args, key: Compensation("close_ticket", {"by_key": key}),
        lookup=lambda key: _lookup("create_ticket", "ticket", key),
    )
    def create_ticket(summary: str, order_id: str, idempotency_key: str) -> dict[str, Any]:
        return _effect("create_ticket", "ticket", idempotency_key,
                       {"summary": summary, "order_id": order_id})

    @registry.tool(cls="compensatable", audience=["support_team"],
                   compensate=lambda args, key: Compensation("reopen_ticket", {"by_key": key}),
                   lookup=NO_LOOKUP)
    def close_ticket(by_key: str, idempotency_key: str) -> dict[str, Any]:
        with _conn() as conn:
            conn.execute("UPDATE ledger SET closed = true WHERE key = %s", (by_key,))
        return {"closed": by_key}

    def refund_for(args: dict[str, Any], key: str) -> Compensation:
        return Compensation("refund", {"charge_key": key, "amount": int(args["amount"])})

    @registry.tool(
        cls="compensatable",
        audience=lambda a: ["customer"] if a.get("receipt") else ["finance"],
        compensate=refund_for,
        lookup=lambda key: _lookup("charge_card", "charge", key),
    )
    def charge_card(customer_id: str, amount: int, idempotency_key: str,
                    receipt: bool = False) -> dict[str, Any]:
        return _effect("charge_card", "charge", idempotency_key,
                       {"customer_id": customer_id, "amount": amount})

    @registry.tool(cls="compensatable", audience=["finance"], commit_step=True,
                   compensate=lambda args, key: Compensation("refund", {"charge_key": key}),
                   lookup=lambda key: _lookup("capture_charge", "capture", key))
    def capture_charge(charge_ref: str, idempotency_key: str) -> dict[str, Any]:
        return _effect("capture_charge", "capture", idempotency_key, {"charge_ref": charge_ref})

    @registry.tool(cls="reversible", audience=["agent"],
                   compensate=lambda args, key: Compensation("delete_draft", {"by_key": key}),
                   lookup=lambda key: _lookup("create_draft", "draft", key))
    def create_draft(body: str, idempotency_key: str) -> dict[str, Any]:
        return _effect("create_draft", "draft", idempotency_key, {"body": body})

    @registry.tool(cls="irreversible", audience=["customer"], lookup=NO_LOOKUP,
                   compensate=lambda args, key: Compensation(
                       "send_correction", {"to": args["to"], "body": "Please disregard it."}))
    def send_email(to: str, body: str, idempotency_key: str) -> dict[str, Any]:
        return _effect("send_email", "email", idempotency_key, {"to": to, "body": body})

    @registry.tool(cls="irreversible", audience=["customer"],
                   lookup=lambda key: _lookup("send_correction", "correction", key))
    def send_correction(to: str, body: str, idempotency_key: str) -> dict[str, Any]:
        return _effect("send_correction", "correction", idempotency_key, {"to": to, "body": body})

    # the compensations named above: every compensation names a registered tool (R6)
    @registry.tool(cls="irreversible", audience=["support_team"], lookup=NO_LOOKUP)
    def reopen_ticket(by_key: str, idempotency_key: str) -> dict[str, Any]:
        with _conn() as conn:
            conn.execute("UPDATE ledger SET closed = false WHERE key = %s", (by_key,))
        return {"reopened": by_key}

    @registry.tool(cls="irreversible", audience=["finance"], lookup=NO_LOOKUP)
    def refund(charge_key: str, idempotency_key: str, amount: int | None = None
               ) -> dict[str, Any]:
        with _conn() as conn:
            conn.execute("UPDATE ledger SET closed = true WHERE key = %s", (charge_key,))
        return {"refunded": charge_key, "amount": amount}

    @registry.tool(cls="irreversible", audience=["agent"], lookup=NO_LOOKUP)
    def delete_draft(by_key: str, idempotency_key: str) -> dict[str, Any]:
        with _conn() as conn:
            conn.execute("UPDATE ledger SET closed = true WHERE key = %s", (by_key,))
        return {"deleted": by_key}

    return registry


registry = build_registry()
