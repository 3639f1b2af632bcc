"""The trainer between the backtest's origins: what ``auto`` serves at an origin, live check
included, and what it serves one step ahead at every sample in between.

``foresight train`` does not only fit: between fits it refreshes the fitted model at every
new sample, scores its one-step forecast against persistence's (``forecaster.drift``) and
serves persistence while the model loses live (a refit keeps that fallback until the new model
recovers); and when the model's live error drifts far above its backtest error it refits at
once. The walk-forward backtest fits at each origin; this replays the rest with the production
``Trainer`` itself: the state fitted at the previous origin goes through ``step_workload`` (a
refit when the trainer says one is due, then ``Trainer.refresh``) at every sample up to this
origin, the origin's fit is installed (``Trainer.adopt``, which hands a fallback over) and the
forecast is the trainer's refresh at the origin. Where the check has not fallen back that is
the fitted model's forecast with its lead steps' moves scaled by the live move weight (the
check's points carry over the refit).

    replay = LiveReplay("s1", candidates, SelectionSettings(), horizon=12, quantiles=(0.5, 0.9),
                        train_points=4032)
    mean, quantiles, fell_back = replay.serve(y, ts, origin, model, score, mae_by_h)  # origins in order
    steps = replay.take_steps()   # (t, one-step forecast served at t, value at t) since the last call

Not replayed: the daily scheduled refit (``retrain_interval_seconds``); the origins, every 12 h,
are the scheduled refits here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from forecaster.drift import LiveSkill
from forecaster.models import Model
from forecaster.selection import SelectionSettings
from forecaster.training import SeriesState, Trainer, step_workload

__all__ = ["LiveReplay"]


class LiveReplay:
    """One series' trainer over a walk-forward backtest (its origins in increasing order).
    ``candidates`` and ``selection`` are ``auto``'s, ``prototypes`` its trained global models:
    a refit between origins chooses as the origins' fits do."""

    def __init__(self, series_id: str, candidates: Sequence[str], selection: SelectionSettings, *, horizon: int,
                 quantiles: Sequence[float], train_points: int, prototypes: Mapping[str, Model] | None = None) -> None:
        self.series_id = series_id
        # the shipped live check and drift settings; fits as auto's
        self.trainer = Trainer(None, models=tuple(candidates), horizon=horizon, quantiles=quantiles,
                               selection=selection, prototypes=prototypes)
        self.train_points = int(train_points)
        self.last_origin: int | None = None
        self.refits = 0  # fits the trainer asked for between origins (its drift check)
        self._steps: list[tuple[int, float, float]] = []

    def serve(self, y: np.ndarray, ts: np.ndarray, origin: int, model: Model, score: float | None,
              mae_by_h: np.ndarray, fallback: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray], bool]:
        """Run the trainer at every sample since the previous origin, install ``model`` (fitted
        on data up to ``origin``; ``fallback``: the fit itself fell back to persistence) and
        return the mean and quantiles the trainer serves at ``origin``, and whether that is
        persistence although the fit chose a model."""
        if self.last_origin is not None:
            for t in range(self.last_origin + 1, origin):
                self._step(y, ts, t)
        self.last_origin = origin
        st = SeriesState(self.series_id, model, model.name, float(ts[origin]), score,
                         np.asarray(mae_by_h, dtype="float64"), status="fallback" if fallback else "ok")
        st.skill = LiveSkill(self.trainer.live_skill, st.model_name)
        self.trainer.adopt(st)
        fc = self._step(y, ts, origin)
        fell_back = st.status == "ok" and fc.model != st.model_name
        quantiles = {k: np.asarray(v, dtype="float64") for k, v in fc.quantiles.items()}
        return np.asarray(fc.mean, dtype="float64"), quantiles, fell_back

    def take_steps(self) -> np.ndarray:
        """What the trainer served one step ahead at every sample since the last call, as rows
        (t, forecast for t + 1, value observed at t): the forecast as an autoscaler reads it at
        every sample, not only at the origins."""
        out = np.asarray(self._steps, dtype="float64").reshape(-1, 3)
        self._steps = []
        return out

    def _step(self, y: np.ndarray, ts: np.ndarray, t: int):
        lo = max(0, t + 1 - self.train_points)
        window, wts = y[lo : t + 1], ts[lo : t + 1]
        finite = np.flatnonzero(np.isfinite(window))
        if not len(finite):
            return None  # the trainer has nothing to refresh from (it raises); nothing is scored
        now = float(ts[t])
        due = self.trainer.due(self.series_id, now)
        fc = step_workload(self.trainer, self.series_id, wts, window, now, meta={})
        self.refits += bool(due)
        self._steps.append((t, fc.mean[0], float(window[finite[-1]])))
        return fc
