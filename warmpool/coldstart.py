"""Cold-start model: T_cold = T_runtime + T_image + T_sandbox, per runtime class.

Each component keeps the last ``window`` observed durations (a sliding window: streaming,
bounded memory, and it follows a machine that gets slower); its p50/p90/p99 are read from the
window once it holds ``min_observations`` values and from the seed before that. The total's
quantiles come from the window of observed totals (a quantile of a sum is not the sum of
quantiles), seeded with the seed figures' totals.

Seeds (ms, p50/p90/p99): crun 82/136/214 and Kata 487/623/891 in total (the seed's figures).
The split into components is ours: a container runtime spends most of a crun start preparing
the rootfs and namespaces; Kata's VM (the sandbox) dominates. runc has no published seed: it
starts from crun's figures and learns.

What the local backends measure: image = bundle (rootfs) preparation, sandbox = ``create``
(namespaces, mounts, the paused process), runtime = ``start`` (exec of the user process).
"""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from warmpool.policy import RuntimeProfile

COMPONENTS = ("runtime", "image", "sandbox")
QUANTILES = (0.5, 0.9, 0.99)

SEED_PROFILES: dict[str, RuntimeProfile] = {
    # totals 82 / 136 / 214
    "crun": RuntimeProfile(runtime_ms=(12.0, 20.0, 32.0), image_ms=(40.0, 66.0, 104.0), sandbox_ms=(30.0, 50.0, 78.0)),
    # totals 487 / 623 / 891
    "kata": RuntimeProfile(runtime_ms=(12.0, 20.0, 32.0), image_ms=(40.0, 66.0, 104.0), sandbox_ms=(435.0, 537.0, 755.0)),
    "runc": RuntimeProfile(runtime_ms=(12.0, 20.0, 32.0), image_ms=(40.0, 66.0, 104.0), sandbox_ms=(30.0, 50.0, 78.0)),
}


def _seed_total(p: RuntimeProfile) -> tuple[float, float, float]:
    return tuple(a + b + c for a, b, c in zip(p.runtime_ms, p.image_ms, p.sandbox_ms))  # type: ignore[return-value]


class _Stream:
    def __init__(self, seed: tuple[float, float, float], window: int, min_obs: int):
        self.seed = seed
        self.values: deque[float] = deque(maxlen=window)
        self.min_obs = min_obs
        self.count = 0

    def add(self, v: float) -> None:
        self.values.append(float(v))
        self.count += 1

    def learned(self) -> bool:
        return len(self.values) >= self.min_obs

    def quantiles(self) -> tuple[float, float, float]:
        if not self.learned():
            return self.seed
        q = np.quantile(np.fromiter(self.values, float), QUANTILES)
        return (float(q[0]), float(q[1]), float(q[2]))


@dataclass(frozen=True)
class ColdStartEstimate:
    runtime_class: str
    source: str  # "seed" or "observed"
    observations: int
    total_ms: tuple[float, float, float]
    components_ms: Mapping[str, tuple[float, float, float]]

    def as_dict(self) -> dict:
        keys = ("p50", "p90", "p99")
        return {
            "runtime_class": self.runtime_class,
            "source": self.source,
            "observations": self.observations,
            "total_ms": dict(zip(keys, self.total_ms)),
            "components_ms": {c: dict(zip(keys, v)) for c, v in self.components_ms.items()},
        }


class ColdStartModel:
    """Thread-safe; one per controller."""

    def __init__(self, extra_profiles: Mapping[str, RuntimeProfile] | None = None, window: int = 512, min_observations: int = 20):
        self.profiles = dict(SEED_PROFILES)
        self.profiles.update(extra_profiles or {})
        self.window = window
        self.min_observations = min_observations
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, str], _Stream] = {}

    def _stream(self, rc: str, comp: str) -> _Stream:
        key = (rc, comp)
        s = self._streams.get(key)
        if s is None:
            prof = self.profiles.get(rc) or self.profiles["crun"]
            seed = _seed_total(prof) if comp == "total" else getattr(prof, f"{comp}_ms")
            s = self._streams[key] = _Stream(seed, self.window, self.min_observations)
        return s

    def observe(self, runtime_class: str, runtime_ms: float | None = None, image_ms: float | None = None, sandbox_ms: float | None = None) -> None:
        """Record one start. Components not measured (None) are left out; the total is
        recorded only when all three were measured (a full cold start)."""
        vals = {"runtime": runtime_ms, "image": image_ms, "sandbox": sandbox_ms}
        given = {k: float(v) for k, v in vals.items() if v is not None}
        if any(not (v >= 0 and v < float("inf")) for v in given.values()):
            raise ValueError(f"cold-start components must be finite and >= 0, got {given}")
        with self._lock:
            for comp, v in given.items():
                self._stream(runtime_class, comp).add(v)
            if len(given) == 3:
                self._stream(runtime_class, "total").add(sum(given.values()))

    def estimate(self, runtime_class: str) -> ColdStartEstimate:
        with self._lock:
            total = self._stream(runtime_class, "total")
            comps = {c: self._stream(runtime_class, c).quantiles() for c in COMPONENTS}
            return ColdStartEstimate(
                runtime_class=runtime_class,
                source="observed" if total.learned() else "seed",
                observations=total.count,
                total_ms=total.quantiles(),
                components_ms=comps,
            )

    def p90_seconds(self, runtime_class: str) -> float:
        return self.estimate(runtime_class).total_ms[1] / 1000.0

    def sample_ms(self, runtime_class: str, rng: random.Random) -> float:
        """A start latency drawn from the model (for the sim backend): piecewise-linear
        inverse CDF through (0, 0.5*p50), (0.5, p50), (0.9, p90), (0.99, p99), (1, 1.2*p99)."""
        p50, p90, p99 = self.estimate(runtime_class).total_ms
        xs = (0.0, 0.5, 0.9, 0.99, 1.0)
        ys = (0.5 * p50, p50, p90, p99, 1.2 * p99)
        return float(np.interp(rng.random(), xs, ys))

    def runtime_classes(self) -> list[str]:
        with self._lock:
            return sorted(set(self.profiles) | {rc for rc, _ in self._streams})
