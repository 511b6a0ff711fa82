"""The tool registry (R1): every tool has a class, and the class decides the ceremony.

    pure           no side effects: retried freely, never logged
    reversible     a delete undoes it completely (drafts): needs a compensation
    compensatable  a counter-action exists (close, refund): needs a compensation
    irreversible   people may have read it (email, SMS): its "compensation" is a correction,
                   and it needs human approval before the call (R6, R10)

A non-pure tool also declares how to find its effect by idempotency key (`lookup`), so that an
unknown outcome can be settled by asking the real system (R7); or it opts out with
`lookup=NO_LOOKUP`, and then its unknowns are settled only by a human. A tool whose system has a
consistent read that needs more than the key (a time window, a known id) also declares
`lookup_steps`: reconcile then hands it what the log knows of each step (`LookupContext`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast, get_args, overload

from agentsaga.errors import CompensationUnavailable, RegistrationError, UnknownTool
from agentsaga.saga.argument_types import schema_problem
from agentsaga.time_contract import DEFAULT as DEFAULT_TIMING
from agentsaga.time_contract import TimeContract

ToolClass: TypeAlias = Literal["pure", "reversible", "compensatable", "irreversible"]
TOOL_CLASSES: tuple[str, ...] = get_args(ToolClass)

JSON: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Effect:
    """What a tool or a lookup reports about an effect in the real system."""

    ref: str | None
    """The external id (ticket key, PaymentIntent id, message id), when there is one."""
    result: JSON = field(default_factory=dict)
    """The JSON result handed back to the agent."""


@dataclass(frozen=True)
class Compensation:
    """The counter-action of a step, written before the call (R6).

    `args` may name the forward step's idempotency key, directly (the compensating tool looks the
    effect up by key) or as `ref(key)`, which unwind replaces with the step's external id once the
    effect has been found (R8).
    """

    tool: str
    args: JSON

    def to_json(self) -> JSON:
        return {"tool": self.tool, "args": self.args}


def ref(key: str) -> JSON:
    """A placeholder for "the external id of the step with this key", resolved at unwind time."""
    return {"$ref": key}


@dataclass(frozen=True)
class LookupContext:
    """What the saga log knows of one unsettled step, for a lookup that can use more than its
    key (R7): a consistent list by a time window, or a read by a known id."""

    key: str
    """The step's idempotency key (R3), the marker its effect carries (R4)."""
    args: JSON
    """The arguments the step was first sent with (the row's)."""
    intended_at: datetime
    """When the INTENDED row was written (Postgres's clock): no effect is older."""
    deadline: datetime | None
    """The newest attempt's deadline (Postgres's clock): no call was on the wire after it.
    None for a row written before time contracts."""
    external_ref: str | None = None
    """The effect's id when the log already knows it (stored on the row, or observed by a late
    call); a consistent read by id can then replace a search."""


class NoLookup:
    """The type of NO_LOOKUP: this tool cannot be looked up by key; a human settles its unknown
    outcomes."""

    def __repr__(self) -> str:
        return "NO_LOOKUP"


NO_LOOKUP: Final = NoLookup()

ToolFn: TypeAlias = Callable[..., Any]
LookupFn: TypeAlias = Callable[[str], "Effect | JSON | None"]
LookupManyFn: TypeAlias = Callable[[Sequence[str]], "Mapping[str, Effect | JSON]"]
LookupStepsFn: TypeAlias = Callable[[Sequence[LookupContext]], "Mapping[str, Effect | JSON]"]
CompensateFn: TypeAlias = Callable[[JSON, str], "Compensation | None"]
ArgumentsCheck: TypeAlias = Callable[[JSON], None]
"""A check of a tool's arguments together (a constraint between them), after their types:
raises ValueError saying what is wrong and what it must be."""
AudienceSpec: TypeAlias = "Sequence[str] | Callable[[JSON], Iterable[str]]"


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its function, class and the R1/R6/R7/R9 declarations."""

    name: str
    fn: ToolFn
    cls: ToolClass
    compensate: CompensateFn | None
    lookup: LookupFn | None
    lookup_many: LookupManyFn | None
    audience_spec: AudienceSpec
    description: str
    commit_step: bool = False
    """An authorise-then-commit tool that is only allowed after the pivot (capture, send)."""
    timing: TimeContract = DEFAULT_TIMING
    """R7: its time contract (the connector's defaults, overridden by configuration)."""
    lookup_steps: LookupStepsFn | None = None
    """R7: the lookup reconcile prefers, given each step's `LookupContext` (keyed by key)."""
    check: ArgumentsCheck | None = None
    """R2: the arguments checked together before the intent (after their types)."""

    @property
    def logged(self) -> bool:
        """R2: every tool but a pure one goes through the saga log."""
        return self.cls != "pure"

    def audience(self, args: JSON) -> list[str]:
        """R9: who could see this step's effect, computed from the arguments."""
        spec = self.audience_spec
        found = spec(args) if callable(spec) else spec
        return sorted({str(a) for a in found})

    def build_compensation(self, args: JSON, key: str) -> Compensation | None:
        """R6: the compensation for these arguments; refuses the call when it cannot be built."""
        if self.compensate is None:
            return None
        try:
            built = self.compensate(args, key)
        except (KeyError, TypeError, ValueError) as exc:
            raise CompensationUnavailable(
                f"tool {self.name!r}: cannot build its compensation for these arguments "
                f"({type(exc).__name__}: {exc}); the call was refused and nothing was sent"
            ) from exc
        if built is None and self.cls in ("reversible", "compensatable"):
            raise CompensationUnavailable(
                f"tool {self.name!r}: its compensate function returned no compensation for these "
                "arguments; the call was refused and nothing was sent"
            )
        if built is not None and not isinstance(built, Compensation):
            raise CompensationUnavailable(
                f"tool {self.name!r}: compensate must return agentsaga.Compensation, "
                f"got {type(built).__name__}"
            )
        return built

    @property
    def needs_approval(self) -> bool:
        """R6: irreversible steps, and non-pure steps with no compensation, need a human first."""
        return self.cls == "irreversible" or (self.cls != "pure" and self.compensate is None)


F = TypeVar("F", bound=ToolFn)


class Registry:
    """Tools by name. `agentsaga.tool` registers into the default registry."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(sorted(self._tools.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._tools)

    def merge(self, other: Registry) -> None:
        """Add every tool of `other` (the same tool may come twice; two different ones not)."""
        for spec in other:
            current = self._tools.get(spec.name)
            if current is not None and current.fn is not spec.fn:
                raise RegistrationError(f"two different tools are named {spec.name!r}")
            self._tools[spec.name] = spec

    def override_timing(self, overrides: Mapping[str, Mapping[str, float]]) -> None:
        """Configuration's time contracts (`AGENTSAGA_TIME_CONTRACTS`) over the connectors'."""
        for name, changes in overrides.items():
            spec = self._tools.get(name)
            if spec is not None:
                self._tools[name] = replace(spec, timing=spec.timing.with_overrides(changes))

    def get(self, name: str) -> ToolSpec:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownTool(
                f"no tool named {name!r} is registered (registered: {known})"
            ) from None

    def register(
        self,
        fn: ToolFn,
        *,
        cls: str | None = None,
        name: str | None = None,
        audience: AudienceSpec = ("agent",),
        compensate: CompensateFn | None = None,
        lookup: LookupFn | NoLookup | None = None,
        lookup_many: LookupManyFn | None = None,
        description: str | None = None,
        commit_step: bool = False,
        timing: TimeContract = DEFAULT_TIMING,
        lookup_steps: LookupStepsFn | None = None,
        check: ArgumentsCheck | None = None,
    ) -> ToolSpec:
        """Register `fn` as a tool; every R1 violation raises `RegistrationError` naming it."""
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or not isinstance(tool_name, str):
            raise RegistrationError(f"cannot name the tool {fn!r}: pass name=")
        if cls is None:
            raise RegistrationError(
                f"tool {tool_name!r} has no class: pass cls= one of {', '.join(TOOL_CLASSES)} (R1)"
            )
        if cls not in TOOL_CLASSES:
            raise RegistrationError(
                f"tool {tool_name!r} has unknown class {cls!r}: use one of "
                f"{', '.join(TOOL_CLASSES)} (R1)"
            )
        if cls in ("reversible", "compensatable") and compensate is None:
            raise RegistrationError(
                f"tool {tool_name!r} is {cls} but declares no compensate= function; write the "
                "counter-action now, not during an incident (R1, R6)"
            )
        if cls != "pure" and lookup is None:
            raise RegistrationError(
                f"tool {tool_name!r} is {cls} but declares no lookup= to find its effect by "
                "idempotency key; pass lookup=fn, or lookup=agentsaga.NO_LOOKUP to have a human "
                "settle its unknown outcomes (R7)"
            )
        if lookup_steps is not None and (lookup is None or isinstance(lookup, NoLookup)):
            raise RegistrationError(
                f"tool {tool_name!r} declares lookup_steps= but no lookup= by key: pass both "
                "(lookup= answers for one key when no step context is at hand)"
            )
        if cls == "pure" and (compensate is not None or lookup not in (None, NO_LOOKUP)):
            raise RegistrationError(
                f"tool {tool_name!r} is pure: it has nothing to compensate or look up; "
                "drop compensate=/lookup= or give it the class it really has"
            )
        if not callable(fn):
            raise RegistrationError(f"tool {tool_name!r}: {fn!r} is not callable")
        if cls != "pure" and not _accepts_keyword(fn, "idempotency_key"):
            raise RegistrationError(
                f"tool {tool_name!r} must accept the keyword argument idempotency_key= (R4): the "
                "key has to reach the real system"
            )
        untyped = (None if isinstance(getattr(fn, "input_schema", None), dict)  # declared
                   else schema_problem(fn, cls == "pure"))
        if untyped is not None:
            raise RegistrationError(f"tool {tool_name!r}: {untyped} (R2)")
        if not (callable(audience) or isinstance(audience, (list, tuple))):
            raise RegistrationError(
                f"tool {tool_name!r}: audience must be a list of names or a function of the "
                f"arguments, got {type(audience).__name__}"
            )
        if tool_name in self._tools and self._tools[tool_name].fn is not fn:
            raise RegistrationError(f"a different tool named {tool_name!r} is already registered")
        spec = ToolSpec(
            name=tool_name,
            fn=fn,
            cls=cast(ToolClass, cls),
            compensate=compensate,
            lookup=None if isinstance(lookup, NoLookup) else lookup,
            lookup_many=lookup_many,
            audience_spec=audience,
            description=description or inspect.getdoc(fn) or "",
            commit_step=commit_step,
            timing=timing,
            lookup_steps=lookup_steps,
            check=check,
        )
        self._tools[tool_name] = spec
        return spec

    @overload
    def tool(self, fn: F, *, cls: str | None = None, name: str | None = None,
             audience: AudienceSpec = ("agent",), compensate: CompensateFn | None = None,
             lookup: LookupFn | NoLookup | None = None,
             lookup_many: LookupManyFn | None = None, description: str | None = None,
             commit_step: bool = False, timing: TimeContract = DEFAULT_TIMING,
             lookup_steps: LookupStepsFn | None = None,
             check: ArgumentsCheck | None = None) -> F: ...

    @overload
    def tool(self, fn: None = None, *, cls: str | None = None, name: str | None = None,
             audience: AudienceSpec = ("agent",), compensate: CompensateFn | None = None,
             lookup: LookupFn | NoLookup | None = None,
             lookup_many: LookupManyFn | None = None, description: str | None = None,
             commit_step: bool = False, timing: TimeContract = DEFAULT_TIMING,
             lookup_steps: LookupStepsFn | None = None,
             check: ArgumentsCheck | None = None) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        *,
        cls: str | None = None,
        name: str | None = None,
        audience: AudienceSpec = ("agent",),
        compensate: CompensateFn | None = None,
        lookup: LookupFn | NoLookup | None = None,
        lookup_many: LookupManyFn | None = None,
        description: str | None = None,
        commit_step: bool = False,
        timing: TimeContract = DEFAULT_TIMING,
        lookup_steps: LookupStepsFn | None = None,
        check: ArgumentsCheck | None = None,
    ) -> F | Callable[[F], F]:
        """Decorator form of `register`: `@registry.tool(cls="compensatable", ...)`, or
        `registry.tool(fn, cls=...)`; returns the function unchanged."""

        def decorate(f: F) -> F:
            self.register(
                f,
                cls=cls,
                name=name,
                audience=audience,
                compensate=compensate,
                lookup=lookup,
                lookup_many=lookup_many,
                description=description,
                commit_step=commit_step,
                timing=timing,
                lookup_steps=lookup_steps,
                check=check,
            )
            return f

        if fn is not None:
            return decorate(fn)
        return decorate


def _accepts_keyword(fn: ToolFn, keyword: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # builtins and C callables: trust the declaration
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == keyword and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in params
    )


def as_effect(value: Effect | JSON | None) -> Effect | None:
    """Normalise what a tool or lookup returned: an Effect, a JSON object with an id, or None."""
    if value is None or isinstance(value, Effect):
        return value
    if isinstance(value, Mapping):
        result = dict(value)
        raw_ref = result.get("id")
        return Effect(ref=None if raw_ref is None else str(raw_ref), result=result)
    raise TypeError(f"expected an Effect, a JSON object or None, got {type(value).__name__}")


default_registry = Registry()
tool = default_registry.tool
register = default_registry.register
