"""Strategies the generated-input tests share: junk values of every YAML and JSON type (the
edges a parser meets in the wild: NaN, infinities, integers past float's range, bools where
numbers go, non-string keys, long and non-ASCII strings) and documents made by breaking a
valid one at a few of its paths."""

from __future__ import annotations

import copy
import os
import re
from typing import Any, Iterator

from hypothesis import HealthCheck, settings, strategies as st

# Reproducible in CI: the same examples on every run, no example database on disk.
GENERATED = settings(max_examples=int(os.environ.get("TENANT_EXAMPLES", 120)), deadline=None,
                     derandomize=not os.environ.get("TENANT_EXAMPLES"), database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

DELETE = object()  # a path to remove instead of replace

EDGES = [0, -1, 1, 0.0, -0.0, 0.5, 1e-300, 1e308, 10**400, 2**63, float("nan"), float("inf"), float("-inf"), True, False,
         None, "", " ", "0", "1.5", "nan", "inf", "-1", "true", "a" * 300, "ünïcødé", "shop/x", "bank/x", "x{",
         'up{namespace="bank"}', "p90", "mean", "p100", [], {}]
scalars = (
    st.sampled_from(EDGES) | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats()  # nan and the infinities included
    | st.text(max_size=10)
)
# keys as YAML allows them (a mapping's key may be a number, null or a bool); text keys without
# ':' or spaces, so a problem's "<path>: <message>" stays readable
KEYS = st.text(alphabet="abcxyz_-.09AZ", max_size=6) | st.integers(-3, 3) | st.none() | st.booleans()
junk = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
# numbers a float holds: for the parsers whose NaN and overflow bugs are pinned by an xfail test
# instead (test_generated_config.py, "non-finite")
FINITE_EDGES = [v for v in EDGES if not (isinstance(v, float) and v != v or v in (float("inf"), float("-inf"), 10**400))]
finite_junk = st.recursive(
    st.sampled_from(FINITE_EDGES) | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
NON_FINITE = [float("nan"), float("inf"), float("-inf"), 10**400]


def paths(obj: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path into ``obj`` (keys and list indices)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def put(obj: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(obj)
    node = out
    for p in path[:-1]:
        node = node[p]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@st.composite
def broken(draw, valid: Any, extra_keys: dict[tuple, list[str]] | None = None, finite: bool = False):
    """``valid`` with one to three of its paths replaced by junk, deleted, or a key it may have
    (``extra_keys``: parent path -> keys) added with a junk value. Returns (document, paths)."""
    out, changed = copy.deepcopy(valid), []
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        candidates = sorted(paths(out), key=repr)
        if extra_keys:
            candidates += [parent + (k,) for parent, keys in extra_keys.items() for k in keys]
        path = draw(st.sampled_from(candidates))
        try:
            values = st.sampled_from(FINITE_EDGES) | finite_junk if finite else st.sampled_from(EDGES) | junk
            out = put(out, path, draw(values | st.just(DELETE)))
        except (KeyError, IndexError, TypeError):  # an earlier change removed the parent
            continue
        changed.append(path)
    return out, changed


def number_paths(obj: Any) -> list[tuple]:
    """The paths of ``obj`` that hold a number (not a bool)."""
    return [p for p in paths(obj) if _is_number(at(obj, p))]


def at(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def dotted(path: tuple) -> str:
    """The path as the parsers print it: ``pools[0].idle_ttl.decay``."""
    out = ""
    for p in path:
        indexed = (isinstance(p, int) and not isinstance(p, bool)) or (out == "pools" and isinstance(p, str))
        out += f"[{p}]" if indexed else (f".{p}" if out else str(p))
    return out


# ``<path>: <what>``; a key of the document that is the empty string reads ``pools[0].: unknown key``
PROBLEM = re.compile(r"(<top>|<object>|[^\s:\[\].]+)(\.[^\s:\[\]]*|\[[^\]]*\])*: \S")
