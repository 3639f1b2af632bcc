"""KEDA's activation question, answered ahead of the load: one pure step with the clock and
the state passed in (no gRPC, no store), so it is tested directly and both ``IsActive`` and
``StreamIsActive`` ask it.

Active when the forecast over the activation lead (pod start-up plus KEDA's polling interval:
a workload at zero replicas must be woken that long before its load) or the demand observed now
is above the activation threshold. Inactive only once both have stayed at or below it for the
cooldown: a forecast that dips for one poll must not let KEDA scale a busy workload to zero.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Activation", "ActivationState", "decide"]


@dataclass(frozen=True)
class ActivationState:
    """What one ScaledObject's decision remembers: when demand (forecast or observed) was last
    above the threshold (None: never seen above)."""

    last_above: float | None = None


@dataclass(frozen=True)
class Activation:
    active: bool
    state: ActivationState
    reason: str


def decide(state: ActivationState, now: float, forecast: float | None, observed: float | None,
           threshold: float, cooldown_seconds: float) -> Activation:
    """The activation at ``now``. ``forecast``: the served value over the activation lead from
    the forecast (None when no forecast is being served); ``observed``: the observed demand now
    in the same unit (None when unknown). Both are compared with ``threshold`` as KEDA compares
    a metric with ``activationThreshold`` (strictly above activates)."""
    ahead = forecast is not None and forecast > threshold
    seen = observed is not None and observed > threshold
    if ahead or seen:
        why = " and ".join(([f"forecast {forecast:.4g} over the activation lead"] if ahead else [])
                           + ([f"observed {observed:.4g}"] if seen else []))
        return Activation(True, ActivationState(now), f"{why} above the threshold {threshold:g}")
    if state.last_above is not None and now - state.last_above < cooldown_seconds:
        left = cooldown_seconds - (now - state.last_above)
        return Activation(True, state, f"below the threshold {threshold:g} for {now - state.last_above:.0f} s; "
                                       f"cooling down {left:.0f} s more before deactivating")
    return Activation(False, state, f"forecast and observed demand at or below the threshold {threshold:g}"
                      + (f" for the {cooldown_seconds:g} s cooldown" if state.last_above is not None else ""))
