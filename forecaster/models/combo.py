"""A combination: the (weighted) mean of several models' mean forecasts.

Averaging a model that follows the recent level (moving average) with one that follows the
dynamics (AR) is often better than either on bursty CPU series; ``forecaster.selection``
builds combinations of fitted candidates per series, and the registry offers ``ar_ma``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from forecaster.models.base import Model, ModelError


class Combination(Model):
    name = "combination"

    def __init__(self, members: Sequence[str | Model] = ("ar", "moving_average"), weights: Sequence[float] | None = None, **params):
        super().__init__(members=tuple(members), weights=None if weights is None else tuple(weights), **params)
        from forecaster.models.registry import get_model

        built: list[Model] = []
        for m in members:
            if isinstance(m, Model):
                built.append(m)
            else:
                kw = {"season": params["season"]} if params.get("season") else {}
                built.append(get_model(m, **kw))
        if not built:
            raise ModelError("a combination needs at least one member")
        self.members_ = built
        w = np.ones(len(built)) if weights is None else np.asarray(weights, dtype="float64")
        if len(w) != len(built) or not np.all(w >= 0) or w.sum() <= 0:
            raise ModelError(f"combination weights {weights!r} must be >= 0, one per member, not all 0")
        self.weights_ = w / w.sum()

    def new(self) -> "Combination":
        clone = Combination(members=[m.new() for m in self.members_], weights=self.weights_, **{k: v for k, v in self.params.items() if k not in ("members", "weights")})
        clone.name = self.name
        return clone

    @classmethod
    def of_fitted(cls, members: Sequence[Model], weights: Sequence[float] | None = None, name: str | None = None) -> "Combination":
        """Wrap already-fitted members (no refit)."""
        c = cls(members=list(members), weights=weights)
        c.name = name or "+".join(m.name for m in members)
        c.fitted_ = True
        c.season = members[0].season
        c.nonneg_ = all(m.nonneg_ for m in members)
        c.hist_ = members[0].hist_
        c._default_offsets_src = getattr(members[0], "_default_offsets_src", c.hist_)
        c.degraded_ = ""
        return c

    def fit(self, y, timestamps=None):
        for m in self.members_:
            if m.season == 0 and self.season:
                m.season = self.season
            m.fit(y, timestamps)
        return super().fit(y, timestamps)

    def update(self, y, timestamps=None):
        for m in self.members_:
            m.update(y, timestamps)
        return super().update(y, timestamps)

    def _mean_from(self, y, h):
        # members forecast from their own remembered history (same data as y)
        return sum(w * m._safe_mean(m.hist_, h) for w, m in zip(self.weights_, self.members_))

    def _rolling_means(self, y, origins, h):
        return sum(w * m.rolling_means(y, origins, h) for w, m in zip(self.weights_, self.members_))
