"""One WarmPool -> its status, from the warm-pool controller's own view (pure).

The controller reports each pool at ``GET /api/v1/pools`` (warm, claimed, target, TTL decay
counter) and counts claims at ``/metrics`` (``foresight_warmpool_claims_total{pool,result}``);
the runner reads both and hands them here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kubeoperator.reconcile import condition
from kubeoperator.spec import parse_warmpool


def claim_counts(metrics_text: str) -> dict[str, tuple[float, float]]:
    """pool -> (warm claims, cold claims) from the controller's Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[float]] = {}
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name != "foresight_warmpool_claims_total":
                continue
            pair = out.setdefault(s.labels.get("pool", ""), [0.0, 0.0])
            pair[0 if s.labels.get("result") == "warm" else 1] += s.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def warmpool_status(obj: Mapping[str, Any], view: Mapping[str, Any] | None, counts: tuple[float, float] | None,
                    problems: Sequence[str], controller_error: str | None, now: float) -> dict:
    wp = parse_warmpool(obj)
    prev = (obj.get("status") or {}).get("conditions") or []
    status: dict[str, Any] = {"observedGeneration": wp.generation}
    if view is not None:
        for src, dst in (("warm", "warm"), ("claimed", "claimed"), ("creating", "creating"),
                         ("target_warm", "targetWarm"), ("ttl_decay_k", "ttlDecayStep")):
            if view.get(src) is not None:
                status[dst] = int(view[src])
        if view.get("next_idle_ttl_seconds") is not None:
            status["nextIdleTTLSeconds"] = round(float(view["next_idle_ttl_seconds"]), 3)
        if view.get("reason"):
            status["reason"] = str(view["reason"])[:1024]
    if counts is not None:
        warm, cold = counts
        status["claims"], status["coldStarts"] = int(warm + cold), int(cold)
        if warm + cold > 0:
            status["hitRate"] = round(warm / (warm + cold), 4)
    if problems:
        ready = ("False", "InvalidPool", "; ".join(problems))
    elif controller_error:
        ready = ("False", "ControllerUnreachable", controller_error)
    elif view is None:
        ready = ("False", "NotInController", f"the warm-pool controller does not run pool {wp.pool_name} yet")
    elif view.get("degraded"):
        ready = ("False", "CreationFailing", str(view.get("reason") or "container creation keeps failing"))
    else:
        ready = ("True", "Running", f"pool {wp.pool_name} runs in the warm-pool controller")
    status["conditions"] = [condition(prev, "Ready", *ready, now, wp.generation)]
    return status
