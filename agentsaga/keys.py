"""Step identity (R3): the idempotency key comes from the run and the step, never the model."""

from __future__ import annotations

import hashlib
import re

# A run id is also a Kubernetes object name and a Jira label suffix: keep it to a safe alphabet.
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,126}[A-Za-z0-9]$|^[A-Za-z0-9]$")
MAX_RUN_ID_LENGTH = 128


def step_key(run_id: str, step_idx: int, tool: str) -> str:
    """R3: `sha256(f"{run_id}:{step_idx}:{tool}")[:32]`, the same for every wording of the call."""
    return hashlib.sha256(f"{run_id}:{step_idx}:{tool}".encode()).hexdigest()[:32]


def compensation_key(run_id: str, step_idx: int, tool: str) -> str:
    """R8: a compensation runs under its own key, derived the same way."""
    return step_key(run_id, step_idx, "compensate:" + tool)


def run_id_problem(run_id: str) -> str | None:
    """Why `run_id` is not acceptable, or None when it is."""
    if not run_id:
        return "run id is empty; pass the id of the agent run (e.g. the AgentRun's name)"
    if len(run_id) > MAX_RUN_ID_LENGTH:
        return f"run id is {len(run_id)} characters long; at most {MAX_RUN_ID_LENGTH} are allowed"
    if not RUN_ID_PATTERN.fullmatch(run_id):  # `$` alone would let a final newline in
        return (
            f"run id {run_id[:64]!r} has characters outside [A-Za-z0-9._:-] or starts/ends with "
            "punctuation; use a name such as 'refund-1182'"
        )
    return None


NAMESPACE_SEPARATOR = "/"
"""Between a run's namespace and its id in the saga log: never in a run id nor a namespace."""


def log_run_id(namespace: str, run_id: str) -> str:
    """The run's id in the saga log: `namespace/run-id` for a run of a Kubernetes namespace, the
    bare id outside Kubernetes. A run id is unique within its namespace, not across them: two
    namespaces may both run `refund-1`, as two runs under two sets of keys (R3), and neither
    can reach the other's. Idempotent: an id already qualified with `namespace` is returned as
    it is."""
    if not namespace or run_id.startswith(namespace + NAMESPACE_SEPARATOR):
        return run_id
    return f"{namespace}{NAMESPACE_SEPARATOR}{run_id}"


def split_log_run_id(log_id: str) -> tuple[str, str]:
    """(namespace, run id) of a saga-log run id; the namespace is empty outside Kubernetes."""
    namespace, qualified, run_id = log_id.partition(NAMESPACE_SEPARATOR)
    return (namespace, run_id) if qualified else ("", log_id)
