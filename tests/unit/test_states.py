"""The states of `agentsaga.states` are the only ones: the proto enum, the CRD's enums and the
mappings between states agree with them (the SQL CHECK lists: tests/integration/
test_schema_states.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import yaml

from agentsaga import TOOL_CLASSES
from agentsaga.client.codec import ERROR_CODES
from agentsaga.errors import ErrorCode
from agentsaga.saga.wording import REFUSALS
from agentsaga.sidecar.grpc_adapter import STATUS
from agentsaga.states import (
    COMPENSATION_METRIC,
    CORRECTIONS_SHOWN,
    DECIDED,
    ENDED_PHASE,
    FINAL_PHASES,
    JOB_PHASES,
    LIVE_PHASES,
    OPEN_RUN_STATES,
    RECONCILE_RESULT,
    RUN_STATE_AFTER_DECISION,
    STEP_COUNT_FIELD,
    UNSETTLED,
    CompensationStatus,
    CorrectionState,
    DispatchOutcome,
    PivotState,
    RunPhase,
    RunState,
    StepStatus,
)
from agentsaga.v1 import sidecar_pb2 as pb

CRD = Path(__file__).resolve().parents[2] / "crds" / "agentruns.agentsaga.io.yaml"


def status_schema() -> dict[str, Any]:
    [version] = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema["properties"]  # type: ignore[no-any-return]


def test_the_proto_outcomes_are_the_dispatch_outcomes() -> None:
    assert set(pb.Outcome.keys()) - {"OUTCOME_UNSPECIFIED"} == {str(o) for o in DispatchOutcome}


def test_the_crd_phases_are_the_run_phases() -> None:
    assert status_schema()["phase"]["enum"] == [str(p) for p in RunPhase]
    assert LIVE_PHASES | JOB_PHASES | FINAL_PHASES | {RunPhase.ORPHANED} == set(RunPhase)
    assert not (LIVE_PHASES & JOB_PHASES or JOB_PHASES & FINAL_PHASES
                or LIVE_PHASES & FINAL_PHASES)


def test_the_crd_pivot_and_correction_states_are_the_enums() -> None:
    status = status_schema()
    assert set(status["pivot"]["properties"]["state"]["enum"]) == {
        "None", *(str(s) for s in PivotState)}
    shown = status["corrections"]["additionalProperties"]["properties"]["state"]["enum"]
    assert set(shown) == {str(s) for s in CORRECTIONS_SHOWN}
    commit_class = status["pivot"]["properties"]["commit"]["items"]["properties"]["class"]
    assert commit_class["enum"] == list(TOOL_CLASSES)


def test_the_crd_step_counts_are_one_per_step_status() -> None:
    counts = set(status_schema()["steps"]["properties"])
    assert counts == {"total", *STEP_COUNT_FIELD.values()}
    assert set(STEP_COUNT_FIELD) == set(StepStatus)


def test_every_mapping_covers_its_enum() -> None:
    assert set(COMPENSATION_METRIC) == set(CompensationStatus)
    assert set(RECONCILE_RESULT) == {StepStatus.CONFIRMED, StepStatus.NOT_EXECUTED,
                                     StepStatus.UNKNOWN}
    assert set(RUN_STATE_AFTER_DECISION) == DECIDED
    assert set(ENDED_PHASE) | OPEN_RUN_STATES | {RunState.UNWINDING} == set(RunState)
    assert set(StepStatus) > UNSETTLED
    assert CorrectionState.SILENT not in CORRECTIONS_SHOWN


def test_every_error_code_has_a_grpc_status() -> None:
    assert set(STATUS) == set(ErrorCode)
    assert STATUS[ErrorCode.TAKEN_OVER] is grpc.StatusCode.ABORTED


def test_the_client_reads_every_grpc_status_back_as_its_error_code() -> None:
    assert {status: code for code, status in STATUS.items()} == ERROR_CODES


def test_every_error_code_has_an_mcp_refusal() -> None:
    assert set(REFUSALS) == set(ErrorCode)
    assert REFUSALS[ErrorCode.TAKEN_OVER].startswith("RUN TAKEN OVER")
