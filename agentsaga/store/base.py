"""What every part of the store shares: the database, the run cursors and the hooks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from agentsaga.redact import redact_plan, redact_text, redact_value
from agentsaga.store.connections import Database
from agentsaga.store.cursors import Cursors
from agentsaga.store.group_commit import GroupCommit
from agentsaga.store.hooks import StoreHooks


class StoreBase:
    db: Database
    hooks: StoreHooks
    async_outcomes: bool
    group_commit: GroupCommit | None
    _cursors: Cursors

    def forget(self, run_id: str) -> None:
        """Drop the run's cursor (the next dispatch reads the run and its newest step again)."""
        self._cursors.forget(run_id)


def to_json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps=_dumps)


_CONTRACTS: dict[str, str] = {}
_MOST_CONTRACTS = 256


def to_contract_json(contract: Any, contract_hash: str | None) -> Jsonb | None:
    """A tool's contract (`agentsaga.saga.contracts`) as stored with every intent: its text made
    once per contract hash (the hash is of the contract itself), not masked and serialised again
    at every dispatch (a contract holds some thirty strings, each masked twice)."""
    if contract is None or contract_hash is None:
        return to_json(contract)
    text = _CONTRACTS.get(contract_hash)
    if text is None:
        if len(_CONTRACTS) >= _MOST_CONTRACTS:  # contracts are one per registered tool
            _CONTRACTS.clear()
        text = _CONTRACTS[contract_hash] = _dumps(contract)
    return Jsonb(text, dumps=_as_is)


def to_plan_json(plan: Any) -> Jsonb:
    """A staged plan (`PivotRecord.to_json()`) as stored: masked like every value, except the
    commit steps' arguments, which keep all but their card numbers (`redact_plan`): a person
    approves them."""
    return Jsonb(json.dumps(redact_plan(plan), default=str, separators=(",", ":")),
                 dumps=_as_is)


def to_stored_json(value: Any) -> tuple[Jsonb | None, Any]:
    """`to_json(value)`, and the value the log hands back for it once stored (the same JSON
    parsed again: masked, tuples as lists, keys as strings), without reading it back."""
    if value is None:
        return None, None
    text = _dumps(value)
    return Jsonb(text, dumps=_as_is), json.loads(text)


def _as_is(text: str) -> str:
    return text


def _dumps(value: Any) -> str:
    """Every JSON value the log stores; card numbers and secrets are masked here, once, for all
    of them (`agentsaga.redact`)."""
    return redact_text(json.dumps(redact_value(value), default=str, separators=(",", ":")))


def text_array(values: Sequence[str]) -> str:
    """A Postgres text[] literal (cast with ::text[]): a string adapts much faster than a
    list."""
    if not values:
        return "{}"
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"
