"""Settings read from the environment: each field declares its variable, and one loader reads them.

A settings field is declared with `variable(NAME, default, doc)`; how the text is parsed follows
the field's type:

    str, str | None      the text as given
    float / int          a number / a whole number ("... of seconds" when NAME ends in _S)
    bool                 true/false, 1/0, yes/no, on/off
    Path                 a filesystem path
    tuple[str, ...]      a comma-separated list
    Literal[...]         one of the listed words

An unset or empty variable keeps the default. A `secret=True` variable may instead name a mounted
file in `NAME_FILE` (a Kubernetes Secret), which wins. A field whose type is itself a settings
dataclass (without a variable) is a group, loaded the same way. Bad text raises
`ConfigurationError` naming the variable, what it must be and what it got.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from agentsaga.errors import ConfigurationError

T = TypeVar("T")

_KEY = "agentsaga.variable"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Variable:
    """How one settings field is set from the environment."""

    name: str
    """The environment variable, e.g. AGENTSAGA_DSN."""
    doc: str
    """What it sets, one sentence for the configuration page's table."""
    secret: bool = False
    """Also read from the file named by NAME_FILE (which wins); never shown."""
    minimum: float | None = None
    """The smallest number accepted."""
    positive: bool = False
    """Numbers must be above zero."""


def variable(name: str, default: Any, doc: str, *, secret: bool = False,
             minimum: float | None = None, positive: bool = False) -> Any:
    """A dataclass field set by the environment variable `name` (see the module docstring)."""
    meta = {_KEY: Variable(name, doc, secret, minimum, positive)}
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"{name}: use a tuple or a frozen value as the default")
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


def load(cls: type[T], env: Mapping[str, str]) -> T:
    """An instance of the settings dataclass `cls` (and its groups) from `env`."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = hints[field.name]
        var = field.metadata.get(_KEY)
        if var is None:
            if dataclasses.is_dataclass(kind):
                values[field.name] = load(kind, env)  # type: ignore[arg-type]
            continue
        raw = read(var, env)
        if raw is not None:
            values[field.name] = parse(var, kind, raw)
    return cls(**values)


def parse(var: Variable, kind: Any, raw: str) -> Any:
    """The value of `raw` for a field of type `kind`; ConfigurationError when it does not fit."""
    kind = _without_none(kind)
    if typing.get_origin(kind) is Literal:
        allowed = typing.get_args(kind)
        if raw not in allowed:
            raise _bad(var, "one of " + ", ".join(allowed), raw)
        return raw
    if kind is bool:
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        raise _bad(var, "true or false", raw)
    if kind in (int, float):
        return _number(var, kind, raw)
    if kind is Path:
        return Path(raw)
    if typing.get_origin(kind) is tuple:
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    return raw


def variables(cls: type[Any], group: str = "") -> Iterator[tuple[str, Variable, Any]]:
    """(group path, variable, default) of every variable of `cls` and its groups, in order."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        var = field.metadata.get(_KEY)
        if var is not None:
            yield group, var, field.default
        elif dataclasses.is_dataclass(hints[field.name]):
            yield from variables(hints[field.name], f"{group}.{field.name}".lstrip("."))


def name_of(cls: type[Any], field_name: str) -> str:
    """The environment variable of `cls.field_name`."""
    for field in dataclasses.fields(cls):
        if field.name == field_name and _KEY in field.metadata:
            return str(field.metadata[_KEY].name)
    raise KeyError(f"{cls.__name__}.{field_name} is not set by a variable")


def read(var: Variable, env: Mapping[str, str]) -> str | None:
    """The text of `var` in `env` (NAME_FILE first for secrets); None when unset or empty."""
    if var.secret:
        path = env.get(f"{var.name}_FILE")
        if path:
            try:
                return Path(path).read_text().strip()
            except OSError as exc:
                raise ConfigurationError(
                    f"{var.name}_FILE={path!r} cannot be read: {exc.strerror}; mount the Secret "
                    "there or unset the variable") from None
    raw = env.get(var.name)
    return raw if raw else None


def read_secret(env: Mapping[str, str], name: str) -> str | None:
    """A credential named at run time (e.g. by the HTTP tools file), from `NAME_FILE` (a mounted
    Secret) or `NAME`; never logged."""
    return read(Variable(name, "a credential", secret=True), env)


def _number(var: Variable, kind: type[Any], raw: str) -> float | int:
    seconds = var.name.endswith(("_S", "_SECONDS"))
    what = ("a whole number" if kind is int else
            "a number of seconds" if seconds else "a number")
    try:
        value = int(raw) if kind is int else float(raw)
    except ValueError:
        raise _bad(var, what, raw) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise _bad(var, what, raw)
    if var.positive and value <= 0:
        raise _bad(var, f"{what} above 0", raw)
    if var.minimum is not None and value < var.minimum:
        raise _bad(var, f"{what} of at least {var.minimum:g}", raw)
    return value


def _bad(var: Variable, what: str, raw: str) -> ConfigurationError:
    shown = "(hidden)" if var.secret else repr(raw)
    return ConfigurationError(f"{var.name} must be {what}, got {shown}")


def _without_none(kind: Any) -> Any:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return kind
