"""Typed arguments, checked before the intent (R2): through a real sidecar over gRPC with the
shipped connectors (the real `stripe` SDK against the world), a float where an int is annotated,
a string where a number is, a currency Stripe does not take, a missing or unknown argument are
refused as INVALID_ARGUMENT naming the argument; the world holds no charge and the log no row.
ListTools offers each tool's schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest

from agentsaga.client import Refused
from agentsaga_lab.demo.world import connector_env
from agentsaga_lab.world import World
from sagatest.sidecar_fixtures import SidecarProcess

RUN = "typed-1"
TOOLS = "agentsaga.connectors.tools"


@pytest.fixture
def sidecar(pg: str, world: World,
            sidecar_factory: Callable[..., SidecarProcess]) -> SidecarProcess:
    return sidecar_factory(pg, TOOLS, env=connector_env(world.url))


def saga_rows(pg: str) -> int:
    with psycopg.connect(pg) as conn:
        row = conn.execute("SELECT count(*) FROM saga_log").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("args", "said"), [
    ({"customer_id": "cus_1", "amount": 1999.5},
     "argument 'amount' must be an integer from 1 to 99999999, got 1999.5"),
    ({"customer_id": "cus_1", "amount": "15"},
     "argument 'amount' must be an integer from 1 to 99999999, got \"15\""),
    ({"customer_id": "cus_1", "amount": 1500, "currency": "xxx"},
     "argument 'currency' must be a currency Stripe supports, lowercase ISO 4217"),
    ({"customer_id": "cus_1", "amount": 1500, "currency": "USD"},
     "write it in lowercase: 'usd'"),
    ({"amount": 1500}, "argument 'customer_id' is missing; it must be a string"),
    ({"customer_id": "cus_1", "amount": 1500, "amount_cents": 1500},
     "argument 'amount_cents' is not an argument of this tool"),
])
def test_wrong_arguments_are_refused_before_the_intent(
        sidecar: SidecarProcess, world: World, pg: str, args: dict[str, Any],
        said: str) -> None:
    client = sidecar.client()
    client.begin_run(RUN)
    with pytest.raises(Refused) as refused:
        client.dispatch(RUN, "charge_card", args)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert said in refused.value.details()
    assert "tool 'charge_card'" in refused.value.details()
    assert world.truth()["payment_intents"] == []
    assert saga_rows(pg) == 0


def test_a_well_typed_charge_goes_through_and_list_tools_offers_the_schemas(
        sidecar: SidecarProcess, world: World, pg: str) -> None:
    client = sidecar.client()
    client.begin_run(RUN)
    charged = client.dispatch(RUN, "charge_card",
                              {"customer_id": "cus_1", "amount": 1500, "currency": "eur"})
    [pi] = world.truth()["payment_intents"]
    assert (pi["id"], pi["amount"], pi["currency"]) == (charged["id"], 1500, "eur")
    assert saga_rows(pg) == 1
    tools = {t.name: json.loads(t.input_schema_json) for t in client.list_tools()}
    charge = tools["charge_card"]
    assert charge["required"] == ["customer_id", "amount"]
    assert charge["properties"]["amount"]["type"] == "integer"
    assert "usd" in charge["properties"]["currency"]["enum"]
    assert "xxx" not in charge["properties"]["currency"]["enum"]
    assert "idempotency_key" not in charge["properties"]
    assert charge["additionalProperties"] is False
