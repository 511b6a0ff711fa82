"""R1: registration fails, naming the tool, for every declaration that breaks the rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentsaga import NO_LOOKUP, Compensation, RegistrationError, Registry
from agentsaga.errors import CompensationUnavailable, InvalidArguments, UnknownTool
from agentsaga.keys import run_id_problem
from agentsaga.saga.tool_schema import check_arguments


def effect(idempotency_key: str, **args: Any) -> dict[str, Any]:
    return {"id": idempotency_key}


def close(args: dict[str, Any], key: str) -> Compensation:
    return Compensation("close_ticket", {"by_key": key})


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({}, "has no class"),
        ({"cls": "dangerous"}, "unknown class 'dangerous'"),
        ({"cls": "compensatable", "lookup": NO_LOOKUP}, "declares no compensate"),
        ({"cls": "reversible", "lookup": NO_LOOKUP}, "declares no compensate"),
        ({"cls": "compensatable", "compensate": close}, "declares no lookup"),
        ({"cls": "irreversible"}, "declares no lookup"),
        ({"cls": "pure", "compensate": close}, "is pure"),
        ({"cls": "compensatable", "compensate": close, "lookup": NO_LOOKUP,
          "audience": "customer"}, "audience must be"),
    ],
)
def test_bad_declarations_are_refused_naming_the_tool(kwargs: dict[str, Any], says: str) -> None:
    registry = Registry()
    with pytest.raises(RegistrationError, match=says) as error:
        registry.register(effect, name="create_ticket", **kwargs)
    assert "create_ticket" in str(error.value)
    assert "create_ticket" not in registry


def test_side_effecting_tool_must_accept_the_key() -> None:
    def no_key(summary: str) -> None: ...

    with pytest.raises(RegistrationError, match="idempotency_key"):
        Registry().register(no_key, cls="irreversible", lookup=NO_LOOKUP)


class Handle:
    """A type no JSON Schema describes."""


def test_a_tool_whose_arguments_have_no_json_schema_is_refused_naming_them() -> None:
    """Registered, it would break every listing of every tool (MCP tools/list, ListTools): it
    is refused when it is registered, naming each argument at fault."""
    def transform(callback: Callable[[int], int], handle: Handle, label: str,
                  idempotency_key: str) -> None:
        return None

    registry = Registry()
    with pytest.raises(RegistrationError) as error:
        registry.register(transform, cls="irreversible", lookup=NO_LOOKUP)
    said = str(error.value)
    assert said.startswith("tool 'transform': no JSON Schema describes 'callback' (")
    assert "'handle' (Handle)" in said and "'label'" not in said
    assert "Annotate with JSON types" in said
    assert "transform" not in registry


def test_a_tool_declaring_its_own_schema_is_not_derived() -> None:
    def upstream(idempotency_key: str, **args: Any) -> None:
        return None

    upstream.input_schema = {"type": "object"}  # type: ignore[attr-defined]
    Registry().register(upstream, cls="irreversible", lookup=NO_LOOKUP)


def test_a_tools_check_of_its_arguments_together_refuses_before_the_intent() -> None:
    """`check=`: a constraint between arguments, after their types; what it says reaches the
    agent masked, naming the tool."""
    def refund(order_id: str, card: str, idempotency_key: str) -> None:
        return None

    def same_card(args: dict[str, Any]) -> None:
        if not str(args["order_id"]).startswith("O-"):
            raise ValueError(f"order {args['order_id']!r} was not paid with {args['card']}")

    registry = Registry()
    registry.register(refund, cls="irreversible", lookup=NO_LOOKUP, check=same_card)
    spec = registry.get("refund")
    check_arguments(spec, {"order_id": "O-1", "card": "4242424242424242"})
    with pytest.raises(InvalidArguments) as refused:
        check_arguments(spec, {"order_id": "X-1", "card": "4242424242424242"})
    said = str(refused.value)
    assert said.startswith("tool 'refund': order 'X-1' was not paid with [card ****4242].")
    assert "Nothing was called" in said
    with pytest.raises(InvalidArguments, match="argument 'card' must be a string"):
        check_arguments(spec, {"order_id": "X-1", "card": 4})  # the types first


def test_two_different_tools_cannot_share_a_name() -> None:
    registry = Registry()
    registry.register(effect, name="t", cls="irreversible", lookup=NO_LOOKUP)

    def other(idempotency_key: str) -> None: ...

    with pytest.raises(RegistrationError, match="already registered"):
        registry.register(other, name="t", cls="irreversible", lookup=NO_LOOKUP)


def test_decorator_registers_and_audience_is_computed_from_arguments() -> None:
    registry = Registry()

    @registry.tool(cls="compensatable", compensate=close, lookup=NO_LOOKUP,
                   audience=lambda a: ["customer"] if a.get("receipt") else ["finance"])
    def charge_card(amount: int, idempotency_key: str, receipt: bool = False) -> None: ...

    spec = registry.get("charge_card")
    assert spec.audience({"amount": 5}) == ["finance"]
    assert spec.audience({"amount": 5, "receipt": True}) == ["customer"]
    assert spec.lookup is None and spec.needs_approval is False
    with pytest.raises(UnknownTool, match="charge_card"):
        registry.get("charge")


def test_compensation_that_cannot_be_built_refuses() -> None:
    spec = Registry().register(
        effect, name="refundable", cls="compensatable", lookup=NO_LOOKUP,
        compensate=lambda args, key: Compensation("refund", {"amount": int(args["amount"])}))
    assert spec.build_compensation({"amount": "7"}, "k") == Compensation("refund", {"amount": 7})
    with pytest.raises(CompensationUnavailable, match="refundable"):
        spec.build_compensation({}, "k")


@pytest.mark.parametrize("run_id", ["", "x" * 129, "a b", "-leading", "trailing-", "runé",
                                    "a/b", "x'; DROP TABLE saga_log;--", "refund-1\n"])
def test_malformed_run_ids_are_explained(run_id: str) -> None:
    assert run_id_problem(run_id)


@pytest.mark.parametrize("run_id", ["refund-1182", "a", "run_1.2:3"])
def test_good_run_ids_pass(run_id: str) -> None:
    assert run_id_problem(run_id) is None


def test_each_malformed_run_id_is_told_what_is_wrong_and_what_to_do() -> None:
    assert run_id_problem("") == (
        "run id is empty; pass the id of the agent run (e.g. the AgentRun's name)")
    assert run_id_problem("x" * 129) == (
        "run id is 129 characters long; at most 128 are allowed")
    assert run_id_problem("x" * 128) is None
    long_and_bad = "a" * 63 + "bc d" + "e" * 10  # shown cut to its first 64 characters
    assert run_id_problem(long_and_bad) == (
        f"run id {'a' * 63 + 'b'!r} has characters outside [A-Za-z0-9._:-] or starts/ends with "
        "punctuation; use a name such as 'refund-1182'")
