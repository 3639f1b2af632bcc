"""Configuration as typed data: frozen dataclasses whose field annotations carry their checks,
validated by pydantic, every problem at once, each with its path and what would fix it
(``pools[web].idle_ttl.decay: 1.5 must be in [0, 1)``).

A field says what it accepts where it is declared, once: ``Number`` / ``Integer`` / ``Flag`` /
``Text`` (no coercion: ``"10m"`` is not a number, ``true`` is not an integer), with ``Range``,
``Choice`` or ``Pattern`` beside it (``Annotated[Number, Range(0, 1, hi_open=True)]``). The
dataclasses stay plain to build in code; pydantic is imported only when a document is parsed
(``validate``), and the reference pages read the same annotations (``constraint_text``).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, TypeVar

import yaml

from core.errors import ConfigError

T = TypeVar("T")


def _got(v: Any) -> str:
    text = repr(v)
    return f"got {type(v).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


class Check:
    """A field's check after its type's: ``message(value)`` is None when the value is fine. It
    sees the value as written (``2``, not the float ``2.0`` it becomes), so errors quote the
    user; ``convert`` turns an accepted value into the field's (a quantity's ``1`` into "1")."""

    def message(self, value: Any) -> str | None:
        raise NotImplementedError

    def convert(self, value: Any) -> Any:
        return value

    def text(self) -> str:
        return ""

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import PydanticCustomError, core_schema

        def check(value: Any, inner: Callable[[Any], Any]) -> Any:
            typed = inner(value)  # the type's own error first: "must be a number, got str"
            msg = self.message(value)
            if msg is not None:
                raise PydanticCustomError("foresight_check", msg.replace("{", "{{").replace("}", "}}"))
            return self.convert(typed)

        return core_schema.no_info_wrap_validator_function(check, handler(source))


@dataclass(frozen=True)
class Range(Check):
    """``lo <= v <= hi`` (either end open, either absent)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def text(self) -> str:
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        hi = "inf" if self.hi is None else f"{self.hi:g}"
        return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"

    def message(self, value: Any) -> str | None:
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        return f"{value!r} must be in {self.text()}" if low or high else None


@dataclass(frozen=True)
class Choice(Check):
    values: tuple[str, ...]

    def text(self) -> str:
        return ", ".join(self.values)

    def message(self, value: Any) -> str | None:
        return None if value in self.values else f"{value!r} must be one of {self.text()}"


@dataclass(frozen=True)
class Keys(Choice):
    """The keys of a mapping field."""

    def message(self, value: Any) -> str | None:
        return None if value in self.values else f"unknown key; allowed keys: {self.text()}"


@dataclass(frozen=True)
class Pattern(Check):
    """A whole-string match; ``hint`` says what a valid value looks like."""

    regex: re.Pattern[str]
    hint: str

    def text(self) -> str:
        return self.hint.removeprefix("must be ")

    def message(self, value: Any) -> str | None:
        return None if self.regex.fullmatch(value) else f"{value!r} {self.hint}"


@dataclass(frozen=True)
class NonBlank(Check):
    """A string with something in it; ``hint`` says what."""

    hint: str

    def message(self, value: Any) -> str | None:
        return None if value.strip() else self.hint


@dataclass(frozen=True)
class NonEmpty(Check):
    example: str

    def text(self) -> str:
        return "at least one item"

    def message(self, value: Any) -> str | None:
        return None if len(value) else f"must not be empty, e.g. {self.example}"


class _Strict:
    """The value must already be of the field's type (YAML's ``"10"`` stays a string)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        schema = handler(source)
        schema["strict"] = True
        if schema.get("type") == "float":  # YAML's .nan and .inf are floats too
            schema["allow_inf_nan"] = False
        return schema


STRICT = _Strict()
Number = Annotated[float, STRICT]  # an int is a number too
Integer = Annotated[int, STRICT]
Flag = Annotated[bool, STRICT]
Text = Annotated[str, STRICT]


def constraint_text(cls: type, name: str) -> str:
    """What a dataclass field allows beyond its type (for the reference pages): ``[0, 1)``."""
    hint = typing.get_type_hints(cls, include_extras=True).get(name)
    return "; ".join(m.text() for m in getattr(hint, "__metadata__", ()) if isinstance(m, Check) and m.text())


# -- pydantic's errors in the house's words ----------------------------------------------------

_TYPE_WORDS = {
    "float_type": "must be a number", "float_parsing": "must be a number", "finite_number": "must be a finite number",
    "int_type": "must be an integer", "int_parsing": "must be an integer", "int_from_float": "must be an integer",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be a string", "dataclass_type": "must be a mapping", "dict_type": "must be a mapping",
    "model_type": "must be a mapping", "tuple_type": "must be a list", "list_type": "must be a list",
}


def _fields_at(root: type, loc: tuple[Any, ...]) -> list[str]:
    """The keys the dataclass at ``loc`` (below ``root``) accepts."""
    t: Any = root
    for part in loc:
        if not isinstance(part, str) or not dataclasses.is_dataclass(t):
            t = _unwrap(t, part)
            continue
        t = _unwrap(typing.get_type_hints(t).get(part), None)
    if not dataclasses.is_dataclass(t):
        return []
    # a class whose document spells some fields differently lists its keys in __config_keys__
    return list(getattr(t, "__config_keys__", None) or (f.name for f in dataclasses.fields(t)))


def _unwrap(t: Any, part: Any) -> Any:
    """The dataclass inside ``X | None``, ``tuple[X, ...]`` or ``Mapping[str, X]``."""
    for arg in reversed(typing.get_args(t) or (t,)):
        if dataclasses.is_dataclass(arg):
            return arg
    return t


def problem(err: Any, root: type, path: Callable[[tuple[Any, ...]], str]) -> str:
    """One pydantic error -> ``path: what is wrong and what would be right``."""
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    if kind == "foresight_check":
        return f"{path(loc)}: {err['msg']}"
    if kind == "missing" and loc and isinstance(loc[-1], int):  # a fixed-length list came short
        return f"{path(loc[:-1])}: too few items (item [{loc[-1]}] is missing; see the documented length)"
    if kind == "missing":
        return f"{path(loc)}: is required"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{path(loc)}: unknown key; allowed keys: {', '.join(_fields_at(root, loc[:-1]))}"
    if kind == "too_short":
        return f"{path(loc)}: must not be empty"
    if kind in _TYPE_WORDS:
        return f"{path(loc)}: {_TYPE_WORDS[kind]}, {_got(value)}"
    return f"{path(loc)}: {err['msg']}"


def dotted(prefix: str) -> Callable[[tuple[Any, ...]], str]:
    """``("idle_ttl", "decay")`` -> ``prefix.idle_ttl.decay``; list indices as ``[i]``."""

    def path(loc: tuple[Any, ...]) -> str:
        out = prefix
        for part in loc:
            if part == "[key]":  # a mapping's key failed its check: the path already names it
                continue
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out or "<top>"

    return path


def validate(cls: type[T], data: Any, path: Callable[[tuple[Any, ...]], str], problems: list[str]) -> tuple[T | None, set[str]]:
    """``data`` as a ``cls`` (None if invalid; every problem appended), and the top-level keys of
    ``data`` that failed, so cross-field rules can still look at the ones that did not."""
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(data), set()
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems.extend(problem(e, cls, path) for e in errors)
        return None, {str(e["loc"][0]) for e in errors if e["loc"]}


_ADAPTERS: dict[type, Any] = {}  # building one costs milliseconds; the operator parses per object


def _adapter(cls: type) -> Any:
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def partial(cls: type, data: Any, failed: set[str]) -> dict[str, Any]:
    """Each field of ``cls``: its value in ``data`` unless that failed (or is absent), else its
    default (None when it has none). Cross-field rules read this, so a pool whose lead_seconds
    is wrong is still told that its min_warm exceeds max_warm."""
    raw = data if isinstance(data, dict) else {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in raw and f.name not in failed:
            out[f.name] = raw[f.name]
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def drop_nulls(data: Any) -> Any:
    """``key: null`` (or an empty ``key:``) in a mapping means the key's default, as if absent."""
    if isinstance(data, dict):
        return {k: drop_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [drop_nulls(v) for v in data]
    return data


FORBID_EXTRA = {"extra": "forbid"}  # a dataclass's ``__pydantic_config__``: unknown keys are errors


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file for a config parser; unreadable or non-YAML files are a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}"]) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"not valid YAML: {exc}"]) from exc
