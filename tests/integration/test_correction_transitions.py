"""Postgres lets each role move a correction only along its own edges: the sidecar's and the
Jobs' roles send what was approved (Approved -> Sending -> Sent), the operator's role decides
what was proposed (Proposed -> Approved | Dismissed); any other move by any (Sent -> Approved
would send it again, Proposed -> Silent would skip the person) is refused (real Postgres,
migrations 010 and 014)."""

from __future__ import annotations

import psycopg
import pytest

from agentsaga.states import CorrectionState as C
from agentsaga.store import roles
from agentsaga.store.connections import with_user

DECIDED = {C.APPROVED, C.SENDING, C.SENT, C.DISMISSED}


@pytest.fixture
def corrections(pg: str) -> str:
    """A run with one correction in each state (step i holds the i-th state), written by the
    migration role."""
    with psycopg.connect(pg) as conn:
        conn.execute("INSERT INTO saga_runs (run_id) VALUES ('fix')")
        for idx, state in enumerate(C):
            conn.execute(
                "INSERT INTO saga_log (run_id, step_idx, tool, tool_class, idempotency_key, args,"
                " status, writer_epoch) VALUES ('fix', %s, 'send_email', 'irreversible', %s,"
                " '{}', 'CONFIRMED', 1)", (idx, f"fix-{idx}"))
            conn.execute(
                "INSERT INTO corrections (run_id, step_idx, tool, audience, rank, state, approver)"
                " VALUES ('fix', %s, 'send_correction', '{customer}', 1, %s, %s)",
                (idx, str(state), "alice" if state in DECIDED else None))
    return pg


def _move(dsn: str, role: str, old: C, new: C) -> None:
    step = list(C).index(old)
    with psycopg.connect(with_user(dsn, role)) as conn:
        if role == roles.OPERATOR:
            conn.execute("UPDATE corrections SET state = %s, approver = 'alice' WHERE run_id"
                         " = 'fix' AND step_idx = %s", (str(new), step))
        else:
            conn.execute("UPDATE corrections SET state = %s WHERE run_id = 'fix' AND step_idx"
                         " = %s", (str(new), step))


def _state(dsn: str, old: C) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM corrections WHERE run_id = 'fix' AND step_idx = %s",
                           (list(C).index(old),)).fetchone()
    assert row is not None
    return str(row[0])


ALLOWED = [(roles.SIDECAR, C.APPROVED, C.SENDING), (roles.SIDECAR, C.SENDING, C.SENT),
           (roles.JOB, C.APPROVED, C.SENDING), (roles.JOB, C.SENDING, C.SENT),
           (roles.OPERATOR, C.PROPOSED, C.APPROVED), (roles.OPERATOR, C.PROPOSED, C.DISMISSED)]


@pytest.mark.parametrize(("role", "old", "new"), ALLOWED)
def test_each_role_moves_a_correction_along_its_own_edges(
        corrections: str, role: str, old: C, new: C) -> None:
    _move(corrections, role, old, new)
    assert _state(corrections, old) == new


@pytest.mark.parametrize("role", roles.ROLES)
def test_postgres_refuses_every_other_move(corrections: str, role: str) -> None:
    """Every (from, to) pair of states but the role's own edges, each tried on its own."""
    refused = []
    for old in C:
        for new in C:
            if old == new or (role, old, new) in ALLOWED:
                continue
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match=f"may not move correction fix/.* from {old} -> {new}"):
                _move(corrections, role, old, new)
            refused.append((old, new))
    assert len(refused) == 6 * 5 - 2  # each role has two edges
    assert [_state(corrections, state) for state in C] == list(C)  # nothing moved


def test_the_migration_role_is_not_restricted(corrections: str) -> None:
    with psycopg.connect(corrections) as conn:
        conn.execute("UPDATE corrections SET state = 'Approved' WHERE run_id = 'fix'"
                     " AND step_idx = %s", (list(C).index(C.SENT),))
    assert _state(corrections, C.SENT) == C.APPROVED
