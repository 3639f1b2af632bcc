"""Cold-start model: how long a start takes, per kind of start and runtime class.

A start is what the pool's backend makes (``Backend.start_kind``):
- ``container``: a local OCI container (backends crun and runc; sim unless told otherwise).
  T_cold = T_runtime + T_image + T_sandbox: image = bundle (rootfs) preparation, sandbox =
  ``create`` (namespaces, mounts, the paused process), runtime = ``start`` (exec of the user
  process). The total is recorded when all three were measured (a cold start).
- ``pod``: a Kubernetes pod, create -> Ready (backend kubernetes): API server, scheduler,
  kubelet, CNI, the runtime's sandbox and the container, seconds where a container takes
  milliseconds. Recorded as a total only: the backend reports each pod's start once it is
  Ready (``backends/kubernetes.py``), and the controller records each pod it created once.

Each stream keeps the last ``window`` observed durations (a sliding window: streaming, bounded
memory, and it follows a machine that gets slower); its p50/p90/p99 are read from the window
once it holds ``min_observations`` values and from the seed before that. The total's quantiles
come from the window of observed totals (a quantile of a sum is not the sum of quantiles).

Seeds: one registry, ``SEEDS``, keyed by (kind, runtime class); each seed's ``source`` says
where its figures come from, and an estimate shows it until the stream has learned.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Mapping

import numpy as np

from core.typedconfig import FORBID_EXTRA, Check, Number

CONTAINER, POD = "container", "pod"
START_KINDS = (CONTAINER, POD)
COMPONENTS = ("runtime", "image", "sandbox")
QUANTILES = (0.5, 0.9, 0.99)

Triple = tuple[float, float, float]


class _PercentilesMs(Check):
    """A policy's ``[p50, p90, p99]`` in ms."""

    def message(self, value: Any) -> str | None:
        if not (isinstance(value, (list, tuple)) and len(value) == 3
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in value)):
            return f"must be [p50, p90, p99] in ms (three numbers >= 0), got {value!r}"
        if not value[0] <= value[1] <= value[2]:
            return f"{list(value)!r} must be non-decreasing (p50 <= p90 <= p99)"
        return None

    def convert(self, value: Any) -> Triple:
        return (float(value[0]), float(value[1]), float(value[2]))


_Ms = Annotated[tuple[Number, Number, Number], _PercentilesMs()]


@dataclass(frozen=True)
class RuntimeProfile:
    """Seed container-start components (ms, as (p50, p90, p99)) of a runtime class."""

    __pydantic_config__ = FORBID_EXTRA

    runtime_ms: _Ms
    image_ms: _Ms
    sandbox_ms: _Ms


@dataclass(frozen=True)
class Seed:
    total_ms: Triple
    source: str  # shown as the estimate's source until the stream has learned
    components_ms: Mapping[str, Triple] = field(default_factory=dict)  # empty: not measured apart (pods)


def _add(a: Triple, b: Triple, sign: float = 1.0) -> Triple:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])


def container_seed(p: RuntimeProfile, source: str) -> Seed:
    comps = {"runtime": p.runtime_ms, "image": p.image_ms, "sandbox": p.sandbox_ms}
    return Seed(_add(_add(p.runtime_ms, p.image_ms), p.sandbox_ms), source, comps)


SEED_TABLE = "seed (the project's seed table: not measured here)"
NO_KATA = "seed (not measured: no Kata runtime here)"
NODE_MEASURED = "seed (measured on this project's 2-core node: bench/real_node.py)"
FROM_POLICY = "seed (the policy's runtime_classes)"
POD_DERIVED = "seed (not measured: crun's measured pod start + this class's container start over crun's)"

# Container starts (ms, p50/p90/p99): the seed table's totals, crun 82/136/214 and Kata
# 487/623/891. The split into components is ours: crun spends most of a start preparing the
# rootfs and namespaces; Kata's VM (the sandbox) dominates. runc has no published figure: it
# starts from crun's and learns. (bench/warmpool_crun.py measured a real crun cold
# create + start here at p50 47.2 ms: the seed is on the safe side for this machine.)
_CRUN = RuntimeProfile(runtime_ms=(12.0, 20.0, 32.0), image_ms=(40.0, 66.0, 104.0), sandbox_ms=(30.0, 50.0, 78.0))
_KATA = RuntimeProfile(runtime_ms=(12.0, 20.0, 32.0), image_ms=(40.0, 66.0, 104.0), sandbox_ms=(435.0, 537.0, 755.0))
_CRUN_CONTAINER = container_seed(_CRUN, SEED_TABLE)

# Pod starts (create -> Ready, ms), measured on this project's node, a 2-core machine shared
# with CI (containerd 1.6, kubelet v1.35.4, busybox httpd with a 1-s readiness probe, 100 pods
# per class in batches of 10): `sudo .venv/bin/python -m bench.real_node`,
# bench/results/real_node.json. Another cluster's pods start differently: these are seeds,
# and a pool learns its own from its first min_observations pods.
_POD_MEASURED: dict[str, Triple] = {
    "crun": (3284.0, 3693.0, 4422.0),
    "runc": (3398.0, 4203.0, 4386.0),
    "gvisor": (4764.0, 6499.0, 6893.0),
}


def derived_pod_seed(container: Seed, source: str) -> Seed:
    """A pod start for a class whose pods were never measured: crun's measured pod start plus
    the class's container start over crun's (per quantile; for Kata, the VM's extra time)."""
    extra = _add(container.total_ms, _CRUN_CONTAINER.total_ms, -1.0)
    return Seed(_add(_POD_MEASURED["crun"], extra), source)


SEEDS: dict[tuple[str, str], Seed] = {
    (CONTAINER, "crun"): _CRUN_CONTAINER,
    (CONTAINER, "runc"): container_seed(_CRUN, "seed (crun's figures from the seed table: runc has none)"),
    (CONTAINER, "kata"): container_seed(_KATA, NO_KATA),
    **{(POD, rc): Seed(q, NODE_MEASURED) for rc, q in _POD_MEASURED.items()},
    # a Kata pod: 3689 / 4180 / 5099 ms (crun's pod + 405 / 487 / 677 ms of Kata's VM)
    (POD, "kata"): derived_pod_seed(container_seed(_KATA, NO_KATA), NO_KATA),
}


def seeded_classes(kind: str) -> set[str]:
    """Runtime classes with a built-in seed for this kind of start."""
    return {rc for k, rc in SEEDS if k == kind}


def _check_kind(kind: str) -> None:
    if kind not in START_KINDS:
        raise ValueError(f"start kind must be one of {', '.join(START_KINDS)}, got {kind!r}")


class _Stream:
    def __init__(self, window: int, min_obs: int):
        self.values: deque[float] = deque(maxlen=window)
        self.min_obs = min_obs
        self.count = 0

    def add(self, v: float) -> None:
        self.values.append(float(v))
        self.count += 1

    def learned(self) -> bool:
        return len(self.values) >= self.min_obs

    def quantiles(self, seed: Triple) -> Triple:
        if not self.learned():
            return seed
        q = np.quantile(np.fromiter(self.values, float), QUANTILES)
        return (float(q[0]), float(q[1]), float(q[2]))


@dataclass(frozen=True)
class ColdStartEstimate:
    start: str  # container | pod
    runtime_class: str
    source: str  # "observed", or the seed's "seed (...)"
    observations: int
    total_ms: Triple
    components_ms: Mapping[str, Triple]

    def as_dict(self) -> dict:
        keys = ("p50", "p90", "p99")
        return {
            "start": self.start,
            "runtime_class": self.runtime_class,
            "source": self.source,
            "observations": self.observations,
            "total_ms": dict(zip(keys, self.total_ms)),
            "components_ms": {c: dict(zip(keys, v)) for c, v in self.components_ms.items()},
        }


class ColdStartModel:
    """Thread-safe; one per controller. ``extra_profiles``: the policy's ``runtime_classes``."""

    def __init__(self, extra_profiles: Mapping[str, RuntimeProfile] | None = None, window: int = 512, min_observations: int = 20):
        self.window = window
        self.min_observations = min_observations
        self._lock = threading.Lock()
        self._seeds: dict[tuple[str, str], Seed] = dict(SEEDS)
        self._streams: dict[tuple[str, str, str], _Stream] = {}
        self.set_profiles(extra_profiles or {})

    def set_profiles(self, profiles: Mapping[str, RuntimeProfile]) -> None:
        """The policy's container profiles: container seeds, and a derived pod seed for each
        class whose pods were never measured."""
        with self._lock:
            for rc, prof in profiles.items():
                self._seeds[(CONTAINER, rc)] = container_seed(prof, FROM_POLICY)
                if rc not in _POD_MEASURED:
                    source = NO_KATA if rc == "kata" else POD_DERIVED  # what the seed says it comes from
                    self._seeds[(POD, rc)] = derived_pod_seed(self._seeds[(CONTAINER, rc)], source)

    def seed(self, kind: str, runtime_class: str) -> Seed:
        _check_kind(kind)
        s = self._seeds.get((kind, runtime_class))
        if s is None:  # the policy checker refuses such pools; a direct caller gets crun's, labelled
            crun = self._seeds[(kind, "crun")]
            s = replace(crun, source=f"seed (crun's: no {kind} seed for {runtime_class})")
        return s

    def _stream(self, kind: str, rc: str, comp: str) -> _Stream:
        key = (kind, rc, comp)
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = _Stream(self.window, self.min_observations)
        return s

    def observe(self, kind: str, runtime_class: str, runtime_ms: float | None = None, image_ms: float | None = None,
                sandbox_ms: float | None = None) -> None:
        """Record the measured components of one container start (None: not measured); the
        total is recorded only when all three were measured (a full cold start)."""
        _check_kind(kind)
        vals = {"runtime": runtime_ms, "image": image_ms, "sandbox": sandbox_ms}
        given = {k: float(v) for k, v in vals.items() if v is not None}
        if given and kind != CONTAINER:
            raise ValueError(f"a {kind} start has no components: record its total (observe_total)")
        if any(not (v >= 0 and v < float("inf")) for v in given.values()):
            raise ValueError(f"cold-start components must be finite and >= 0, got {given}")
        with self._lock:
            for comp, v in given.items():
                self._stream(kind, runtime_class, comp).add(v)
            if len(given) == 3:
                self._stream(kind, runtime_class, "total").add(sum(given.values()))

    def observe_total(self, kind: str, runtime_class: str, total_ms: float) -> None:
        """Record one whole start (a pod's create -> Ready)."""
        _check_kind(kind)
        if not (total_ms >= 0 and total_ms < float("inf")):
            raise ValueError(f"a start's duration must be finite and >= 0, got {total_ms!r}")
        with self._lock:
            self._stream(kind, runtime_class, "total").add(float(total_ms))

    def estimate(self, kind: str, runtime_class: str) -> ColdStartEstimate:
        seed = self.seed(kind, runtime_class)
        with self._lock:
            total = self._stream(kind, runtime_class, "total")
            comps = {c: self._stream(kind, runtime_class, c).quantiles(seed.components_ms[c])
                     for c in COMPONENTS if c in seed.components_ms}
            return ColdStartEstimate(
                start=kind,
                runtime_class=runtime_class,
                source="observed" if total.learned() else seed.source,
                observations=total.count,
                total_ms=total.quantiles(seed.total_ms),
                components_ms=comps,
            )

    def p90_seconds(self, kind: str, runtime_class: str) -> float:
        return self.estimate(kind, runtime_class).total_ms[1] / 1000.0

    def sample_ms(self, kind: str, runtime_class: str, rng: random.Random) -> float:
        """A start latency drawn from the model (for the sim backend): piecewise-linear
        inverse CDF through (0, 0.5*p50), (0.5, p50), (0.9, p90), (0.99, p99), (1, 1.2*p99)."""
        p50, p90, p99 = self.estimate(kind, runtime_class).total_ms
        xs = (0.0, 0.5, 0.9, 0.99, 1.0)
        ys = (0.5 * p50, p50, p90, p99, 1.2 * p99)
        return float(np.interp(rng.random(), xs, ys))

    def keys(self) -> list[tuple[str, str]]:
        """(kind, runtime class) of every seed and everything observed."""
        with self._lock:
            return sorted(set(self._seeds) | {(k, rc) for k, rc, _ in self._streams})
