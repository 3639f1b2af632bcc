"""Scores -> placement decisions: the filter rule (``split_hot``) and nodeAffinity preferences
(``preferred_node_affinity``, ``placement_affinity`` for the warm pool)."""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Sequence

from core.errors import UserError
from core.store import ForecastStore
from forecaster.nodes.inventory import is_node_series
from forecaster.nodes.scoring import (
    MAX_SCORE,
    NEUTRAL_SCORE,
    NodeLoad,
    NodeScoreSettings,
    assess_nodes,
    cpu_message,
    memory_message,
    memory_room_bytes,
    score_for_load,
)


def filter_reason(nl: NodeLoad | None, settings: NodeScoreSettings, request_bytes: float = 0.0) -> str | None:
    """Why ``nl`` is filtered out for a pod requesting ``request_bytes`` of memory, or None."""
    if nl is None:
        return None
    parts = []
    if nl.cpu_hot:
        parts.append(cpu_message(nl, settings.threshold, settings.horizon_seconds))
    room = memory_room_bytes(nl, settings.memory_threshold)
    if room is not None and request_bytes > room:
        parts.append(memory_message(nl, request_bytes, settings.memory_threshold, settings.horizon_seconds))
    return "; ".join(parts) or None


def split_hot(
    names: Sequence[str], loads: Mapping[str, NodeLoad], settings: NodeScoreSettings, request_bytes: float = 0.0
) -> tuple[list[str], dict[str, str]]:
    """Filter rule: drop nodes predicted hot (CPU) or without memory room for the pod's
    request, keep everything else in input order.

    When *every* candidate fails, nobody is dropped: a pod on a busy node beats a pod that
    cannot schedule (and the scheduler's own filters still apply)."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        why = filter_reason(loads.get(name), settings, request_bytes)
        if why is None:
            passed.append(name)
        else:
            failed[name] = why
    if not passed and failed:
        return list(names), {}
    return passed, failed


def preferred_node_affinity(
    scores: Mapping[str, int] | Iterable[tuple[str, int]],
    top_n: int = 10,
    zone_scores: Mapping[str, int] | None = None,
    avoid: Iterable[str] = (),
    min_score: int = NEUTRAL_SCORE + 1,
) -> dict[str, Any]:
    """Scores -> a ``V1NodeAffinity``-shaped dict (API JSON casing) of *preferred* terms.

    - The ``top_n`` best nodes scoring at least ``min_score`` (default: better than an unknown
      node) each get a term ``weight = 10 x score`` (the API's 1..100) selecting the node by
      ``matchFields metadata.name`` (exact node names; the API allows exactly ONE value per
      In/NotIn field requirement, hence one term per node). Order: score desc, then input
      order (stable).
    - ``avoid`` (hot nodes) adds one term of weight ``10 x NEUTRAL_SCORE`` matching every node
      *except* them (ANDed ``NotIn`` requirements), so hot nodes rank below unknown ones, the
      same order the extender's filter and scores give.
    - ``zone_scores`` add ``topology.kubernetes.io/zone In [...]`` terms per distinct score.

    Preferences only: a warm pod still schedules when every preferred node is full.
    """
    if not isinstance(top_n, int) or top_n < 0:
        raise UserError(f"top_n: {top_n!r} must be an integer >= 0")
    items = list(scores.items()) if isinstance(scores, Mapping) else list(scores)
    order = sorted(range(len(items)), key=lambda i: (-int(items[i][1]), i))
    chosen = [items[i] for i in order if int(items[i][1]) >= min_score][:top_n]

    def weight(score: int) -> int:
        return max(1, min(100, MAX_SCORE * int(score)))

    terms: list[dict[str, Any]] = [
        {"weight": weight(sc), "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [str(name)]}]}}
        for name, sc in chosen
    ]
    hot = sorted({str(n) for n in avoid})
    if hot:
        terms.append({
            "weight": weight(NEUTRAL_SCORE),
            "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in hot]},
        })
    if zone_scores:
        groups: dict[int, list[str]] = {}
        for z, sc in zone_scores.items():
            if z and int(sc) >= min_score:
                groups.setdefault(int(sc), []).append(str(z))
        for sc in sorted(groups, reverse=True):
            terms.append({
                "weight": weight(sc),
                "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": sorted(groups[sc])}]},
            })
    return {"preferredDuringSchedulingIgnoredDuringExecution": terms}


def placement_affinity(
    store: ForecastStore,
    now: float | None = None,
    settings: NodeScoreSettings | None = None,
    top_n: int = 10,
) -> dict[str, Any]:
    """One call for the warm pool's Kubernetes backend: read the published node, memory and
    zone forecasts, score them exactly as the scheduler extender does (for a pod without a
    memory request), and return the ``V1NodeAffinity``-shaped preferences (hot or memory-full
    nodes avoided, cooler zones preferred). Reads the store: call it from a controller loop,
    not from a request handler."""
    s = settings or NodeScoreSettings()
    now = time.time() if now is None else float(now)
    ids = [x for x in store.list_series() if is_node_series(x)]
    loads, zones = assess_nodes(store.latest_many(ids), now, s)
    ordered = sorted(loads.values(), key=lambda nl: nl.node)
    return preferred_node_affinity(
        {nl.node: nl.score for nl in ordered},
        top_n=top_n,
        zone_scores={z: score_for_load(v, None, 0.0) for z, v in zones.items()},
        avoid=[nl.node for nl in ordered if nl.hot],
    )
