"""Collects every problem of a policy document at once, each with its path and value, so a
user fixes a file in one pass (``pools[web].idle_ttl.decay: 1.5 must be in [0, 1)``)."""

from __future__ import annotations

from typing import Any


class Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if value is None:
            for k in required:
                self.add(f"{path}.{k}" if path else k, "is required")
            return {}
        if not isinstance(value, dict):
            self.add(path or "<top>", f"must be a mapping, got {type(value).__name__} {value!r}")
            return {}
        for k in value:
            if k not in allowed:
                self.add(f"{path}.{k}" if path else str(k), f"unknown key; allowed keys: {', '.join(allowed)}")
        for k in required:
            if value.get(k) is None:
                self.add(f"{path}.{k}" if path else k, "is required")
        return value

    def number(self, d: dict, key: str, path: str, default: float, *, lo=None, lo_open=False, hi=None, hi_open=False, integer=False):
        p = f"{path}.{key}"
        if key not in d or d[key] is None:
            return default
        v = d[key]
        kinds = (int,) if integer else (int, float)
        if isinstance(v, bool) or not isinstance(v, kinds):
            self.add(p, f"must be {'an integer' if integer else 'a number'}, got {type(v).__name__} {v!r}")
            return default
        bad = (
            (lo is not None and (v <= lo if lo_open else v < lo))
            or (hi is not None and (v >= hi if hi_open else v > hi))
        )
        if bad:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            rng = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"
            self.add(p, f"{v!r} must be in {rng}")
            return default
        return v

    def boolean(self, d: dict, key: str, path: str, default: bool) -> bool:
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if not isinstance(v, bool):
            self.add(f"{path}.{key}", f"must be true or false, got {type(v).__name__} {v!r}")
            return default
        return v

    def string(self, d: dict, key: str, path: str, default: str | None, *, pattern=None, choices=None, hint=""):
        p = f"{path}.{key}"
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if not isinstance(v, str):
            self.add(p, f"must be a string, got {type(v).__name__} {v!r}")
            return default
        if pattern is not None and not pattern.fullmatch(v):
            self.add(p, f"{v!r} {hint or 'is not valid'}")
            return default
        if choices is not None and v not in choices:
            self.add(p, f"{v!r} must be one of {', '.join(choices)}")
            return default
        return v
