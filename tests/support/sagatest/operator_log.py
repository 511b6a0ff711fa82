"""`operator_log`: the test's database (`pg`) as the operator's database role sees it, typed
as what that role may do (`OperatorStore`). A test that acts as the operator or as a person
(the pivot decision, a correction's approval, a person's settlement, the run's policy as its
AgentRun says) writes through this handle, and Postgres holds it to the operator's grants; the
sidecar's store (`SagaService.saga_log`) offers none of those writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentsaga.store import SagaLog, roles
from agentsaga.store.connections import with_user
from agentsaga.store.interfaces import OperatorStore


@pytest.fixture
def operator_log(pg: str) -> Iterator[OperatorStore]:
    """Its own pool (up to four connections: two approvers may decide at once)."""
    with SagaLog(with_user(pg, roles.OPERATOR), min_size=1, max_size=4).open(
            migrate=False) as saga_log:
        yield saga_log
