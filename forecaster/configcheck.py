"""The config parsers' strict checker: every problem is collected with its path instead of
stopping at the first (shared by forecaster.config and forecaster.workloads)."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

_DNS = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class _Checker:
    """Collects every problem with its path instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def mapping(self, value: Any, path: str, allowed: Mapping[str, str]) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, got {type(value).__name__}")
            return {}
        for k in value:
            if k not in allowed:
                self.add(
                    f"{path}.{k}" if path else str(k),
                    f"unknown key; allowed keys: {', '.join(sorted(allowed))}",
                )
        return value

    def typed(self, d: dict, key: str, path: str, kinds: tuple, default: Any, *, required=False, check=None, hint=""):
        p = f"{path}.{key}" if path else key
        if key not in d or d[key] is None:
            if required:
                self.add(p, f"is required{hint}")
            return default
        v = d[key]
        ok = isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
        if not ok:
            names = "/".join(k.__name__ for k in kinds)
            self.add(p, f"must be {names}, got {type(v).__name__} {v!r}")
            return default
        if float in kinds and isinstance(v, (int, float)) and not isinstance(v, bool) and not _finite(v):
            # NaN passes every range check below and an int past float's range raises in it
            self.add(p, f"must be a finite number, got {_short(v)}")
            return default
        if check is not None:
            msg = check(v)
            if msg:
                self.add(p, f"{v!r} {msg}")
                return default
        return v


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _positive(v) -> str | None:
    return None if v > 0 else "must be > 0"


def _non_negative(v) -> str | None:
    return None if v >= 0 else "must be >= 0"


def _dns_label(v: str) -> str | None:
    if _DNS.fullmatch(v):
        return None
    return "must be a lowercase DNS name (a-z, 0-9, '-', '.')"
