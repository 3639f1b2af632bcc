"""The dashboard's words: a workload's serving policy in one plain sentence.

The numbers come from the policy the trainer published (``forecaster.servingpolicy``
``to_dict``); the headroom applied right now comes from the served value (forecaster/served.py
through adapter/core.py), never recomputed here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def _plus(m: float) -> str:
    if abs(m - 1.0) < 1e-9:
        return "as is"
    pct = (m - 1.0) * 100.0
    return f"plus {pct:.3g}%" if pct > 0 else f"minus {-pct:.3g}%"


def _pct(x: float) -> str:
    return f"{x * 100:.2g}%"


def _by_gap(ms: Sequence[float], edges: Sequence[float]) -> str:
    """"plus 5% when demand sits more than 5.6% below its recent peak, else as is": the states
    of the gap below the recent peak, neighbours with the same headroom merged."""
    if not edges or len(ms) != len(edges) + 1:
        return ""
    segs: list[list[Any]] = []  # [multiplier, lower edge or None, upper edge or None]
    for i, m in enumerate(ms):
        lo, hi = (edges[i - 1] if i else None), (edges[i] if i < len(edges) else None)
        if segs and abs(segs[-1][0] - m) < 1e-9:
            segs[-1][2] = hi
        else:
            segs.append([m, lo, hi])
    if len(segs) == 1:
        return _plus(segs[0][0])

    def where(lo, hi):
        if lo is None:
            return f"when demand is within {_pct(hi)} of its recent peak"
        if hi is None:
            return f"when demand sits more than {_pct(lo)} below its recent peak"
        return f"when demand sits {_pct(lo)}–{_pct(hi)} below its recent peak"

    # the state that adds headroom is the news; "as is" states go last as "otherwise"
    said = [(m, lo, hi) for m, lo, hi in segs if abs(m - 1.0) >= 1e-9]
    plain = [s for s in segs if abs(s[0] - 1.0) < 1e-9]
    if len(said) > 1:  # more than one step reads as a range, not a table
        first = segs[0][2]
        near = ("" if abs(segs[0][0] - 1.0) >= 1e-9 or first is None
                else " (as is at the peak)" if first <= 0 else f" (as is within {_pct(first)} of it)")
        lo_m, hi_m = min(m for m, _, _ in said), max(m for m, _, _ in said)
        return f"{_plus(lo_m)} to {_plus(hi_m)[5:]} depending on how far demand sits below its recent peak{near}"
    return ", ".join(f"{_plus(m)} {where(lo, hi)}" for m, lo, hi in said) + (", otherwise as is" if plain else "")


def _hold(k: Any) -> str:
    return f" (the highest of the last {k} samples)" if isinstance(k, int) and k > 1 else ""


def policy_sentence(pol: Mapping[str, Any] | None, default_quantile: str, headroom_now: float | None = None) -> str:
    """One sentence a platform engineer reads at a glance, e.g. "Serves the p90 forecast plus 15%
    when demand sits more than 30% below its recent peak, otherwise as is."."""
    if not pol:
        return (f"Serves the {default_quantile} forecast as is (the trainer published no serving policy), "
                "or the last observed value when there is no fresh forecast.")
    edges = list(pol.get("gap_edges") or [])
    ms = list(pol.get("headrooms") or [])
    how = _by_gap(ms, edges) or _plus(float(pol.get("headroom", 1.0)))
    if pol.get("source") == "persistence":
        what = f"the last observed value{_hold(pol.get('hold'))}"
        why = " (the forecast did not pay for itself on recent history)"
    else:
        what = f"the {pol.get('quantile') or default_quantile} forecast{_hold(pol.get('hold'))}"
        why = ""
    fms = [float(m) for m in pol.get("fallback_headrooms") or []]
    # the fallback is the second thing a reader needs: its largest headroom, not its table
    fb = (_plus(max(fms)) if fms and len(set(fms)) == 1 else f"with up to {_plus(max(fms))[5:]} headroom" if fms
          else _plus(float(pol.get("fallback_headroom", 1.0))))
    s = f"Serves {what} {how}{why}."
    if pol.get("source") != "persistence":
        s += f" Without a fresh forecast: the last observed value{_hold(pol.get('fallback_hold'))} {fb}."
    if headroom_now is not None and edges:
        s += " Right now: " + ("no headroom." if abs(headroom_now - 1.0) < 1e-9 else f"{_plus(headroom_now)}.")
    return s
