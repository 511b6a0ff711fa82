"""The outcome commit modes (`AGENTSAGA_OUTCOME_COMMIT`) that the log's tests run under: each
outcome its own statement (`async`) and outcomes written in batches (`group`)."""

from __future__ import annotations

from typing import cast

import pytest

from agentsaga.settings import OutcomeCommit
from agentsaga.store import SagaLog

MODES: tuple[OutcomeCommit, ...] = ("async", "group")


@pytest.fixture(params=MODES)
def outcome_commit(request: pytest.FixtureRequest) -> OutcomeCommit:
    return cast(OutcomeCommit, request.param)


def saga_log_for(dsn: str, mode: OutcomeCommit, *, min_size: int = 1,
                 max_size: int = 4) -> SagaLog:
    """A saga log (not opened) committing outcomes as `mode` says, as the sidecar builds it."""
    return SagaLog(dsn, min_size=min_size, max_size=max_size, async_outcomes=mode != "sync",
                   group_outcomes=mode == "group")
