"""Canonical Kubernetes resource.Quantity strings (DecimalSI), as the API server prints them.

Kubernetes keeps at most nano precision and rounds UP below it (``0.0000000001`` -> ``1n``),
then prints the integer mantissa with the largest SI suffix that loses nothing:
0.7 -> ``700m``, 1.5 -> ``1500m``, 2 -> ``2``, 3000 -> ``3k``, 2500 -> ``2500``,
0.033333 -> ``33333u``. The HPA reads ``MilliValue()`` (ceil to 1m).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = ["format_quantity", "parse_quantity"]

_SUFFIX_BY_EXP = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_EXP_BY_SUFFIX = {v: k for k, v in _SUFFIX_BY_EXP.items()}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def format_quantity(value: float | int | Decimal) -> str:
    """Canonical DecimalSI string of a finite, non-negative value (rounded up to 1n)."""
    if type(value) is float and value >= 0 and math.isfinite(value):
        text = repr(value)
        if "e" not in text:  # exact integer arithmetic on the shortest repr (hot path)
            whole, _, frac = text.partition(".")
            nanos = int(whole) * 1_000_000_000 + int((frac[:9]).ljust(9, "0"))
            if frac[9:].strip("0"):
                nanos += 1  # below 1n: round up, as Kubernetes does
            return _canonical(nanos)
    if isinstance(value, Decimal):
        dec = value
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"quantity must be a number, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"quantity must be finite, got {value!r}; NaN/Inf are never served")
        # repr() is the shortest string that round-trips: 0.7 stays 0.7, not 0.69999...
        dec = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not dec.is_finite():
        raise ValueError(f"quantity must be finite, got {value!r}")
    if dec < 0:
        raise ValueError(f"quantity must be >= 0, got {value!r}; negative values are never served")
    return _canonical(int((dec * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)))


def _canonical(nanos: int) -> str:
    if nanos == 0:
        return "0"
    exp = -9
    while nanos % 1000 == 0 and exp < 18:
        nanos //= 1000
        exp += 3
    return f"{nanos}{_SUFFIX_BY_EXP[exp]}"


def parse_quantity(text: str) -> Decimal:
    """Parse a Quantity string (decimal SI, binary SI, or exponent forms) to a Decimal."""
    s = text.strip()
    if not s:
        raise ValueError("empty quantity")
    for suf, mult in _BINARY.items():
        if s.endswith(suf):
            return _num(s[: -len(suf)], text) * mult
    if s[-1] in "numkMGTPE":
        return _num(s[:-1], text) * Decimal(10) ** _EXP_BY_SUFFIX[s[-1]]
    return _num(s, text)


def _num(s: str, orig: str) -> Decimal:
    try:
        d = Decimal(s)
    except InvalidOperation:
        raise ValueError(f"{orig!r} is not a quantity") from None
    if not d.is_finite():
        raise ValueError(f"{orig!r} is not a finite quantity")
    return d
