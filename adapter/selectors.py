"""Kubernetes label selectors: the string syntax of ``labels.Parse`` (apimachinery).

    a=b  a==b  a!=b  a in (x,y)  a notin (x)  a  !a  a>3  a<3      (comma = AND)

Strict like the API server: keys must be qualified names, values valid label values,
``in``/``notin`` need at least one value. Any problem raises ``SelectorError`` naming the
position, which the adapter turns into a 400 Status. Matching follows Kubernetes:
``!=`` and ``notin`` also match objects that do not have the label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

__all__ = ["Requirement", "Selector", "SelectorError", "parse_selector"]

MAX_SELECTOR_LENGTH = 16384
# Values in one `in`/`notin` list: each `workload in (...)` value is a lookup the adapter
# makes for this one request, so a caller cannot make one request cost the whole store.
MAX_IN_VALUES = 100

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IDENT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")


class SelectorError(ValueError):
    """A malformed label selector (answered with 400 BadRequest)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        if not has:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if self.op == "gt" else have < want

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return f"!{self.key}"
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        sym = {"gt": ">", "lt": "<"}.get(self.op, self.op)
        return f"{self.key}{sym}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements

    def equality_values(self, key: str) -> tuple[str, ...] | None:
        """Values ``key`` must take (from ``=``/``in``), or None when unconstrained: lets the
        adapter look a workload up by name instead of scanning a namespace."""
        out: set[str] | None = None
        for r in self.requirements:
            if r.key == key and r.op in ("=", "in"):
                out = set(r.values) if out is None else out & set(r.values)
        return None if out is None else tuple(sorted(out))

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _check_key(key: str, pos: int) -> None:
    if not key:
        raise SelectorError(f"label key expected at position {pos}")
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            raise SelectorError(
                f"invalid label key {key!r} at position {pos}: the prefix must be a DNS subdomain "
                "(lower-case alphanumerics, '-', '.'), at most 253 characters"
            )
    if not name or len(name) > 63 or not _NAME.match(name):
        raise SelectorError(
            f"invalid label key {key!r} at position {pos}: the name part must be 1-63 characters, "
            "alphanumerics with '-', '_' or '.' inside"
        )


def _check_value(value: str, pos: int) -> None:
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise SelectorError(
            f"invalid label value {value!r} at position {pos}: must be empty or 1-63 characters, "
            "alphanumerics with '-', '_' or '.' inside"
        )


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, position) with kinds ident, op, '(', ')', ',', '!'."""
    out: list[tuple[str, str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r":
            i += 1
        elif c in "(),":
            out.append((c, c, i))
            i += 1
        elif c == "!":
            if i + 1 < n and text[i + 1] == "=":
                out.append(("op", "!=", i))
                i += 2
            else:
                out.append(("!", "!", i))
                i += 1
        elif c == "=":
            if i + 1 < n and text[i + 1] == "=":
                out.append(("op", "=", i))
                i += 2
            else:
                out.append(("op", "=", i))
                i += 1
        elif c in "<>":
            out.append(("op", "gt" if c == ">" else "lt", i))
            i += 1
        elif c in _IDENT_CHARS:
            j = i
            while j < n and text[j] in _IDENT_CHARS:
                j += 1
            word = text[i:j]
            out.append(("ident", word, i))
            i = j
        else:
            raise SelectorError(f"unexpected character {c!r} at position {i}")
    return out


_SIMPLE = re.compile(r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def parse_selector(text: str | None) -> Selector:
    """Parse a selector string; empty or None selects everything."""
    if text is None:
        return Selector()
    m = _SIMPLE.match(text)
    if m is not None:  # the HPA's usual `deployment=checkout`: skip the tokenizer
        key, op, value = m.groups()
        _check_key(key, m.start(1))
        _check_value(value, m.start(3))
        return Selector((Requirement(key, "!=" if op == "!=" else "=", (value,)),))
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"label selector is {len(text)} characters long; the limit is {MAX_SELECTOR_LENGTH}")
    return _Parser(text).selector()


class _Parser:
    """Recursive descent over ``_tokens``: requirements separated by commas."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.end = ("end", "", len(text))
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else self.end

    def selector(self) -> Selector:
        reqs: list[Requirement] = []
        while self.i < len(self.toks):
            reqs.append(self.requirement())
            kind, word, pos = self.peek()
            if kind == ",":
                self.i += 1
                if self.peek()[0] == "end":
                    raise SelectorError(f"requirement expected after ',' at position {pos}")
            elif kind != "end":
                raise SelectorError(f"',' expected at position {pos}, found {word!r}")
        return Selector(tuple(reqs))

    def requirement(self) -> Requirement:
        kind, word, pos = self.peek()
        if kind == "!":
            self.i += 1
            kind, word, pos = self.peek()
            if kind != "ident":
                raise SelectorError(f"label key expected after '!' at position {pos}")
            _check_key(word, pos)
            self.i += 1
            return Requirement(word, "!")
        if kind != "ident":
            raise SelectorError(f"label key expected at position {pos}, found {word!r}")
        _check_key(word, pos)
        self.i += 1
        key, kpos = word, pos
        kind, word, pos = self.peek()
        if kind in (",", "end"):
            return Requirement(key, "exists")
        if kind == "op":
            self.i += 1
            return self.comparison(key, word)
        if kind == "ident" and word in ("in", "notin"):
            self.i += 1
            return self.set_membership(key, word, kpos)
        raise SelectorError(f"'=', '==', '!=', 'in', 'notin', ',' or end expected after key {key!r} at position {pos}")

    def comparison(self, key: str, op: str) -> Requirement:
        """``key=v``, ``key!=v``, ``key>3``, ``key<3`` (the operator already read)."""
        vkind, value, vpos = self.peek()
        if vkind == "ident":
            self.i += 1
        elif vkind in (",", "end") and op in ("=", "!="):
            value = ""  # `a=` selects an empty value, as in Kubernetes
        else:
            raise SelectorError(f"label value expected after {op!r} at position {vpos}")
        _check_value(value, vpos)
        if op in ("gt", "lt"):
            try:
                int(value)
            except ValueError:
                raise SelectorError(f"'>' and '<' need an integer value at position {vpos}, got {value!r}") from None
        return Requirement(key, op, (value,))

    def set_membership(self, key: str, op: str, kpos: int) -> Requirement:
        """``key in (a,b)`` / ``key notin (a)`` (``in``/``notin`` already read)."""
        pk, _, ppos = self.peek()
        if pk != "(":
            raise SelectorError(f"'(' expected after {op!r} at position {ppos}")
        self.i += 1
        values = self.value_list()
        if values == [""]:
            raise SelectorError(f"{op!r} needs at least one value (key {key!r} at position {kpos})")
        if len(set(values)) > MAX_IN_VALUES:
            raise SelectorError(
                f"{key} {op} (...) lists {len(set(values))} values; at most {MAX_IN_VALUES} per "
                "request: split the labelSelector across several requests"
            )
        return Requirement(key, op, tuple(dict.fromkeys(values)))

    def value_list(self) -> list[str]:
        """The values up to and including ``)``; an empty slot is the empty value."""
        values: list[str] = []
        while True:
            vk, vw, vpos = self.peek()
            if vk == "ident":
                _check_value(vw, vpos)
                values.append(vw)
                self.i += 1
                vk, vw, vpos = self.peek()
            elif vk in (",", ")"):
                values.append("")  # `a in (x,)` includes the empty value
            else:
                raise SelectorError(f"value, ',' or ')' expected at position {vpos}")
            self.i += 1
            if vk == ")":
                return values
            if vk != ",":
                raise SelectorError(f"',' or ')' expected at position {vpos}")
