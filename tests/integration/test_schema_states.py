"""The saga log's CHECK lists are the enums of `agentsaga.states` (and the tool classes)."""

from __future__ import annotations

import re

import psycopg

from agentsaga import TOOL_CLASSES
from agentsaga.states import CompensationStatus, CorrectionState, RunState, StepStatus
from agentsaga.store import schema


def allowed(definition: str) -> set[str]:
    """The quoted values of a CHECK (x IN (...)) as Postgres prints it."""
    return set(re.findall(r"'([^']*)'::text", definition))


def test_check_lists_are_the_enums(pg: str) -> None:
    with psycopg.connect(pg) as conn:
        checks = schema.check_constraints(conn)
    assert allowed(checks["saga_log_status_check"]) == {str(s) for s in StepStatus}
    assert allowed(checks["saga_log_comp_status_check"]) == {str(s) for s in CompensationStatus}
    assert allowed(checks["corrections_state_check"]) == {str(s) for s in CorrectionState}
    assert allowed(checks["saga_runs_state_check"]) == {str(s) for s in RunState}
    assert allowed(checks["saga_log_tool_class_check"]) == set(TOOL_CLASSES) - {"pure"}
