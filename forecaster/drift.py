"""Live check that the served model still beats persistence at the serving horizon.

Selection only serves a model that beat persistence on the validation tail; this checks the
same claim on live data, over the same points for both. After a refresh, each newly observed
point that the previous forecast covered at a lead step (h <= ``lead_steps``) is scored twice:
against the model's forecast for it and against persistence's (the value last observed at that
forecast's origin). Exponentially weighted sums keep each call O(1) in time and memory.

    guard = LiveSkill(DriftSettings())
    guard.observe(actual=41.0, model_forecast=39.5, persistence_forecast=40.2)
    d = guard.decision()          # DriftDecision(drifted, ratio, points, reason)
    w = guard.move_weight()       # how much of the model's move from the last value to serve

Between "serve the model" and "fall back" the same points say how much of the model's move is
worth serving. ``move_weight`` is the least-squares factor w for ``last + w * (model - last)``
on the live points (exponentially weighted, clipped to [0, 1]): 1 when the model's moves are
right, 0 when they are noise, about 0.5 on a series where the model beats the last value by a
little and misses by a lot now and then. It is the live counterpart of the lead guard's blend
(``forecaster.models.guard``, chosen on the validation tail before the model has served), and
it is the series' evidence more than the model's: a refit inherits it (``handover``), and the
new model's own points take over at the same half-life.

A refit does not clear a fallback (``handover``): the model that replaces one the check fell
back from starts in fallback too, with no points of its own, and is served once its own live
error over ``min_points`` points is below ``recover_ratio`` x persistence's. A scheduled refit
does not change what the series is doing, and a new model has not yet shown it beats the last
value live: without the handover every refit served the new model unchecked for at least
``min_points`` steps, and the backtest's origins (each one a fresh fit) never saw the check.

Why relative to persistence and not to the backtest error: a burst raises every model's
error, so "live error > k x backtest error" fires on calm models in a busy hour and stays
silent on a model that loses to the last value all day on a flat series. Falling back to
persistence helps exactly when persistence is doing better on the same points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import UserError

__all__ = ["DriftSettings", "DriftDecision", "LiveSkill"]


@dataclass(frozen=True)
class DriftSettings:
    """``ratio``: fall back when the model's weighted live error exceeds this many times
    persistence's. ``recover_ratio``: serve the model again when it drops below this (only if
    the caller keeps scoring the model while falling back). ``min_points``: scored points
    before any decision. ``half_life_points``: weight of a point halves after this many newer
    points. ``tolerance``: errors within this many series units count as a tie (a model
    0.01% CPU off on a flat series is not worth a fallback)."""

    ratio: float = 1.5
    recover_ratio: float = 1.1
    min_points: int = 12
    half_life_points: float = 36.0
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if not self.ratio >= 1.0:
            problems.append(f"drift.ratio: {self.ratio} must be >= 1")
        if not 0 < self.recover_ratio <= self.ratio:
            problems.append(f"drift.recover_ratio: {self.recover_ratio} must be in (0, ratio={self.ratio}]")
        if self.min_points < 1:
            problems.append(f"drift.min_points: {self.min_points} must be >= 1")
        if not self.half_life_points > 0:
            problems.append(f"drift.half_life_points: {self.half_life_points} must be > 0")
        if not self.tolerance >= 0:
            problems.append(f"drift.tolerance: {self.tolerance} must be >= 0")
        if problems:
            raise UserError("; ".join(problems))


@dataclass(frozen=True)
class DriftDecision:
    drifted: bool
    ratio: float | None  # weighted live error of the model / persistence's (None before any point)
    points: int
    reason: str


class LiveSkill:
    """Exponentially weighted live absolute errors of a model and of persistence on the same
    points, with hysteresis between ``ratio`` and ``recover_ratio``, and the share of the
    model's move the same points support (``move_weight``)."""

    # class-level defaults: a checkpoint pickled before move_weight existed still loads
    _move_points, _move_gain, _move_size = 0, 0.0, 0.0

    def __init__(self, settings: DriftSettings | None = None, model_name: str = "the model") -> None:
        self.settings = settings or DriftSettings()
        self.model_name = model_name
        self._decay = 0.5 ** (1.0 / self.settings.half_life_points)
        self.model_error = 0.0
        self.persistence_error = 0.0
        self.points = 0
        self.drifted = False
        self.inherited_from = ""  # the model whose fallback this one started in (handover)
        self._move_points = 0  # points behind move_weight, inherited ones included
        self._move_gain = 0.0  # weighted sum of (actual - persistence) * (model - persistence)
        self._move_size = 0.0  # weighted sum of (model - persistence) ** 2

    def observe(self, actual: float, model_forecast: float, persistence_forecast: float) -> bool:
        """Score one point; returns whether to fall back now. Non-finite inputs (a gap in the
        data, a missing forecast) are skipped without touching the state."""
        a, m, p = float(actual), float(model_forecast), float(persistence_forecast)
        if not (math.isfinite(a) and math.isfinite(m) and math.isfinite(p)):
            return self.drifted
        tol = self.settings.tolerance
        self.model_error = self._decay * self.model_error + max(abs(a - m) - tol, 0.0)
        self.persistence_error = self._decay * self.persistence_error + max(abs(a - p) - tol, 0.0)
        self.points += 1
        move = m - p
        self._move_gain = self._decay * self._move_gain + (a - p) * move
        self._move_size = self._decay * self._move_size + move * move
        self._move_points += 1
        if self.points >= self.settings.min_points:
            r = self.ratio()
            if r is not None:
                if not self.drifted and r > self.settings.ratio:
                    self.drifted = True
                elif self.drifted and r < self.settings.recover_ratio:
                    self.drifted = False
        return self.drifted

    def handover(self, model_name: str, settings: DriftSettings | None = None) -> LiveSkill:
        """The live check of the model that replaces this one at a refit: no points (the new
        model is scored on its own forecasts), but a fallback stays in force until the new
        model's own ratio is below ``recover_ratio`` after ``min_points`` points, and the move
        weight carries over (the series' evidence), its points fading as the new model's arrive."""
        nxt = LiveSkill(settings or self.settings, model_name)
        nxt._move_points, nxt._move_gain, nxt._move_size = self._move_points, self._move_gain, self._move_size
        if self.drifted:
            nxt.drifted = True
            nxt.inherited_from = self.inherited_from or self.model_name
        return nxt

    def move_weight(self) -> float:
        """The share of the model's move from the last value that the live points support:
        ``sum((actual - last) * move) / sum(move ** 2)`` clipped to [0, 1]; 1 before
        ``min_points`` points or while the model has not moved."""
        if self._move_points < self.settings.min_points or not self._move_size > 0:
            return 1.0
        return min(max(self._move_gain / self._move_size, 0.0), 1.0)

    def ratio(self) -> float | None:
        """Model error / persistence error; inf when persistence is exact and the model is not,
        1.0 when both are exact, None before the first point."""
        if not self.points:
            return None
        if self.persistence_error > 0:
            return self.model_error / self.persistence_error
        return math.inf if self.model_error > 0 else 1.0

    def decision(self) -> DriftDecision:
        r = self.ratio()
        s = self.settings
        if self.drifted and self.points < s.min_points:
            reason = (f"the live check fell back to persistence before the refit ({self.inherited_from} lost to it "
                      f"at the serving horizon); {self.model_name} is served once its own live error is below "
                      f"{s.recover_ratio:g}x persistence's over {s.min_points} points ({self.points} scored)")
        elif self.drifted:
            shown = "inf" if r is not None and math.isinf(r) else f"{r:.2f}"
            reason = (f"live error of {self.model_name} at the serving horizon is {shown}x persistence's "
                      f"on the same {self.points} points (limit {s.ratio:g}x); using persistence "
                      f"until it is below {s.recover_ratio:g}x")
        elif self.points < s.min_points:
            reason = f"live check: {self.points} of {s.min_points} points scored"
        else:
            reason = f"live error of {self.model_name} is {r:.2f}x persistence's (limit {s.ratio:g}x)"
        return DriftDecision(self.drifted, r, self.points, reason)
