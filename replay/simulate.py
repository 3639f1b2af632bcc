"""Replay of a real CPU trace through the HPA v2 controller (replay/hpa.py).

The simulated world (the settings of the published replay protocol the benchmark uses, unless configured):
- Demand D(t) = k * value, linear between the 5-minute samples (gaps bridged linearly);
  k = pods_at_p99 * anchor_target / p99 of the replayed part, so the trace's p99 needs
  ``pods_at_p99`` pods of ``cpu_request_cores`` at ``anchor_target`` (20 pods at 70%).
- Pods of ``cpu_request_cores`` become ready a start-up time after creation (constant or
  log-normal with the configured median; seeded RNG). A scale-down removes not-ready pods
  first, newest first, then ready pods. Every mode starts with ceil(D(t0 - delay) / 0.7)
  ready pods, within [min, max] replicas.
- The HPA syncs every ``step_seconds`` (15 s). Modes:
  reactive         Resource CPU Utilization target on D(t - delay) (the metric pipeline lag);
  predictive       the shipped HPA: a Resource CPU Utilization metric (the reactive floor) and an
                   External Value target fed by forecaster.served.served_load_ratio (the very
                   function the adapter serves) on what the production trainer published
                   (replay/pipeline.py: forecaster.training.step_workload on a simulated clock,
                   one step at s + delay for every 5-minute sample s, from the samples up to s
                   only: retrain when due, serving-policy choice, refresh, drift fallback);
                   it serves only what the adapter holds (:func:`served_as_deployed`): the
                   forecast as of the trainer's last refresh, the observed floor the adapter
                   reads directly from the workload's demand query every 5 s (D(t - delay - 5 s):
                   as old as the reactive HPA's metric plus one re-read interval, the oldest
                   reading it serves from), and the ready pods of this sync (what
                   the HPA counts and the adapter's pod watch reports); the CPU metric beside it
                   reads D(t - delay) like the reactive HPA;
  oracle           External Value target on max(true max of D over [t, t + lead], D(t - delay)).
- Measured at every sync, after the HPA acted: SLO violation when D / ready capacity > 0.9;
  under-provisioned core-minutes = integral of max(0, D - 0.9 * ready capacity); replica-
  minutes count every pod, ready or not.

No look-ahead: the forecaster only ever receives samples with timestamp <= s where the
forecast is used from s + delay on (tests/replay/test_simulate.py perturbs the future).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from forecaster.timing import TIMING
from replay.hpa import (
    DEFAULT_SCALE_DOWN,
    HPA,
    HPASpec,
    external_value_proposal,
    milli,
    resource_utilization_proposal,
)
from replay.pipeline import PipelineConfig, ProductionFeed

__all__ = [
    "MODES",
    "ModeResult",
    "ReplayConfig",
    "StartupModel",
    "World",
    "make_world",
    "production_feed",
    "run_mode",
]

MODES = ("reactive", "predictive", "oracle")
# The shipped predictive HPA scales down after 30 s of stabilization instead of Kubernetes'
# 5 minutes: the forecast brings pods back before a returning load, so holding every peak buys
# little; a reactive HPA cannot afford it (it sees the load 90 s late).
PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS = 30
SAMPLE_SECONDS = 300


@dataclass(frozen=True)
class StartupModel:
    """Pod start-up time: ``constant`` (= median) or ``lognormal`` (median, sigma of the log)."""

    kind: str = "lognormal"
    median_seconds: float = TIMING.pod_startup_seconds
    sigma: float = 0.35
    min_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "lognormal"):
            raise ValueError(f"startup.kind {self.kind!r} must be 'constant' or 'lognormal'")
        if not (self.median_seconds >= 0):
            raise ValueError("startup.median_seconds must be >= 0")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "constant" or n == 0:
            return np.full(n, float(self.median_seconds))
        d = self.median_seconds * np.exp(rng.normal(0.0, self.sigma, n))
        return np.maximum(d, self.min_seconds)


@dataclass(frozen=True)
class ReplayConfig:
    step_seconds: int = int(TIMING.hpa_sync_seconds)
    delay_seconds: float = TIMING.metric_delay_seconds
    lead_seconds: float = TIMING.lead_seconds
    target: float = TIMING.hpa_target  # HPA target of the mode (utilization fraction or Value)
    anchor_target: float = TIMING.hpa_target  # sizes the workload: p99 needs pods_at_p99 pods at this target
    pods_at_p99: float = 20.0
    cpu_request_cores: float = 1.0
    min_replicas: int = 1
    max_replicas: int = 100
    startup: StartupModel = field(default_factory=StartupModel)
    slo_threshold: float = TIMING.slo_utilization
    train_days: float = 14.0
    replay_days: float = 14.0
    # predictive: the production trainer and adapter settings (defaults = a default deployment)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    seed: int = 0
    cores_per_unit: float | None = None  # fixes k instead of deriving it from the p99
    # the HPA's behavior.scaleDown.stabilizationWindowSeconds; None = the mode's default:
    # the shipped predictive HPA's (manifests/hpa-example.yaml) for the predictive modes,
    # Kubernetes' 300 s for the reactive and oracle HPAs
    scale_down_window_seconds: int | None = None

    def hpa_spec(self, mode: str = "reactive") -> HPASpec:
        window = self.scale_down_window_seconds
        if window is None:
            window = PREDICTIVE_SCALE_DOWN_WINDOW_SECONDS if mode.startswith("predictive") else None
        down = DEFAULT_SCALE_DOWN if window is None else replace(DEFAULT_SCALE_DOWN, stabilization_window_seconds=int(window))
        return HPASpec(min_replicas=self.min_replicas, max_replicas=self.max_replicas, scale_down=down)


@dataclass
class World:
    """One series made into a demand curve on the sync grid."""

    series_id: str
    k: float  # cores per unit of the trace value
    sample_ts: np.ndarray  # int seconds, regular 300 s grid (gaps as NaN values)
    sample_cores: np.ndarray  # k * value, NaN in gaps
    t0: int  # first sync of the replay
    t: np.ndarray  # sync times
    demand: np.ndarray  # D(t)
    observed: np.ndarray  # D(t - delay)
    reading: np.ndarray  # D(t - delay - the adapter's re-read interval): its own reading, at its oldest
    oracle_peak: np.ndarray  # max D over [t, t + lead]
    initial_demand: float  # D(t0 - delay)


def _regular(ts: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ts = np.asarray(ts, dtype="int64")
    order = np.argsort(ts, kind="stable")
    ts, values = ts[order], np.asarray(values, dtype="float64")[order]
    start, end = int(ts[0]), int(ts[-1])
    grid = np.arange(start, end + 1, SAMPLE_SECONDS, dtype="int64")
    out = np.full(len(grid), np.nan)
    idx = (ts - start) // SAMPLE_SECONDS
    on = (ts - start) % SAMPLE_SECONDS == 0
    out[idx[on]] = values[on]
    out[~np.isfinite(out)] = np.nan
    return grid, out


def make_world(series_id: str, ts: Sequence[int], values: Sequence[float], cfg: ReplayConfig) -> World:
    """Cut the trace into training (first ``train_days``) and replay (next ``replay_days``)."""
    grid, vals = _regular(np.asarray(ts), np.asarray(values))
    ok = np.isfinite(vals)
    if ok.sum() < 2:
        raise ValueError(f"series {series_id!r} has fewer than 2 finite samples")
    t0 = int(grid[0] + cfg.train_days * 86400)
    t_end = int(min(grid[ok][-1], t0 + cfg.replay_days * 86400))
    if t_end - t0 < 3600:
        raise ValueError(
            f"series {series_id!r} spans {(grid[-1] - grid[0]) / 86400:.1f} days: needs more than "
            f"train_days={cfg.train_days:g} plus 1 hour to replay"
        )
    rep = (grid >= t0) & (grid <= t_end) & ok
    p99 = float(np.percentile(vals[rep], 99)) if rep.any() else float("nan")
    if not (p99 > 0):
        p99 = float(np.nanmax(vals)) if np.nanmax(vals) > 0 else 1.0
    k = cfg.pods_at_p99 * cfg.anchor_target * cfg.cpu_request_cores / p99
    if cfg.cores_per_unit is not None:
        k = float(cfg.cores_per_unit)
    cores = vals * k
    gt, gv = grid[ok].astype("float64"), cores[ok]
    t = np.arange(t0, t_end, cfg.step_seconds, dtype="int64")
    tf = t.astype("float64")
    demand = np.interp(tf, gt, gv)
    observed = np.interp(tf - cfg.delay_seconds, gt, gv)
    reading = np.interp(tf - cfg.delay_seconds - TIMING.observed_read_seconds, gt, gv)
    # D is piecewise linear: its max over [t, t+lead] is at an end or at a knot inside
    peak = np.maximum(demand, np.interp(tf + cfg.lead_seconds, gt, gv))
    j = np.searchsorted(gt, tf, side="right")  # first knot > t
    for _ in range(int(cfg.lead_seconds // SAMPLE_SECONDS) + 2):
        inside = (j < len(gt)) & (gt[np.minimum(j, len(gt) - 1)] < tf + cfg.lead_seconds)
        if not inside.any():
            break
        peak = np.where(inside, np.maximum(peak, gv[np.minimum(j, len(gv) - 1)]), peak)
        j = j + 1
    init = float(np.interp(t0 - cfg.delay_seconds, gt, gv))
    return World(series_id, k, grid, cores, t0, t, demand, observed, reading, peak, init)


# ----------------------------------------------------------------------------- forecasts


def production_feed(world: World, cfg: ReplayConfig, prototypes=None) -> ProductionFeed:
    """The production trainer on this world's samples, publishing from just before t0;
    ``prototypes``: global models trained across the replayed fleet (``fleet_globals``)."""
    return ProductionFeed(
        world.series_id, world.sample_ts, world.sample_cores, delay_seconds=cfg.delay_seconds,
        start=float(world.t0), end=float(world.t[-1] + cfg.step_seconds),
        capacity_per_pod=cfg.cpu_request_cores, pipeline=cfg.pipeline, step_seconds=SAMPLE_SECONDS,
        prototypes=prototypes,
    )


# ----------------------------------------------------------------------------- simulation


@dataclass
class ModeResult:
    series_id: str
    mode: str
    target: float
    slo_violation_minutes: float
    underprovisioned_core_minutes: float
    replica_minutes: float
    scale_events: int
    ready: np.ndarray = field(repr=False)
    replicas: np.ndarray = field(repr=False)  # every pod, ready or not
    extra: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {
            "series_id": self.series_id,
            "mode": self.mode,
            "slo_violation_minutes": round(self.slo_violation_minutes, 4),
            "underprovisioned_core_minutes": round(self.underprovisioned_core_minutes, 4),
            "replica_minutes": round(self.replica_minutes, 4),
            "scale_events": self.scale_events,
        }


def _measure(world: World, cfg: ReplayConfig, ready: np.ndarray, replicas: np.ndarray):
    cap = ready * cfg.cpu_request_cores
    step_min = cfg.step_seconds / 60.0
    viol = world.demand > cfg.slo_threshold * cap
    slo = float(viol.sum() * step_min)
    under = float(np.maximum(0.0, world.demand - cfg.slo_threshold * cap).sum() * step_min)
    return slo, under, float(replicas.sum() * step_min)


def served_as_deployed(fc, now: float, ready_pods: int, request: float, settings, observed: float | None):
    """What the adapter serves at ``now`` (``adapter.core.AdapterCore.served``), from what it
    holds then and nothing more: the forecast as of the trainer's last refresh; ``observed``,
    its direct reading of the workload's demand (``adapter.fallback.ObservedDirect.fresh``:
    the demand query re-read every 5 s, so up to that much older than a reactive HPA's CPU
    metric; None without a demand source, when the published samples are the floor); over the
    ready pods the HPA counts at this sync (what the adapter's pod watch reports)."""
    from forecaster.served import served_load_ratio

    return served_load_ratio(fc, now, ready_pods, request, settings, observed=observed)


def run_mode(world: World, mode: str, cfg: ReplayConfig, feed: ProductionFeed | None = None) -> ModeResult:
    """Replay one mode over the world's sync grid; deterministic for a given ``cfg.seed``.
    The predictive modes read what ``feed`` (``production_feed``) published; one feed can
    serve several modes of the same world."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    predictive = mode == "predictive"
    if predictive and feed is None:
        feed = production_feed(world, cfg)
    spec = cfg.hpa_spec(mode)
    hpa = HPA(spec)
    rng = np.random.default_rng(cfg.seed)
    request = cfg.cpu_request_cores
    req_milli = milli(request)
    target_pct = int(round(cfg.target * 100))
    n = len(world.t)
    ready_arr = np.zeros(n, dtype="int32")
    repl_arr = np.zeros(n, dtype="int32")
    events = 0
    startup = cfg.startup
    const_startup = startup.kind == "constant"
    su = float(startup.median_seconds)

    S = int(min(spec.max_replicas, max(spec.min_replicas, math.ceil(world.initial_demand / (cfg.anchor_target * request) - 1e-9))))
    ready = S
    pending: list[float] = []  # ready_at of not-ready pods, creation order (newest last)
    next_ready = math.inf

    # predictive plumbing: the adapter's own code path, at a default deployment's settings
    if predictive:
        from forecaster.served import MetricSettings, NoData

        settings = MetricSettings(lead_seconds=cfg.lead_seconds)
        served_err = 0
        sources: dict[str, int] = {}

    def draw(m: int) -> list[float]:
        if const_startup:
            return [su] * m
        return list(startup.draw(rng, m))

    t_arr = world.t
    obs_arr = world.observed
    read_arr = world.reading
    peak_arr = world.oracle_peak
    target = cfg.target
    for i in range(n):
        t = int(t_arr[i])
        if t >= next_ready:
            still = [r for r in pending if r > t]
            ready += len(pending) - len(still)
            pending = still
            next_ready = min(pending) if pending else math.inf

        obs = float(obs_arr[i])
        if mode == "reactive":
            props = [resource_utilization_proposal(spec, S, milli(obs), ready, req_milli, target_pct, unready_pods=len(pending))]
        elif mode == "oracle":
            v = max(float(peak_arr[i]), obs) / max(ready, 1) / request
            props = [external_value_proposal(spec, S, [v], target, ready)]
        else:
            # the shipped HPA (manifests/hpa-example.yaml): the predicted metric beside the
            # Resource CPU metric at the same target; the HPA takes the larger proposal
            props = [resource_utilization_proposal(spec, S, milli(obs), ready, req_milli, target_pct, unready_pods=len(pending))]
            try:
                sv = served_as_deployed(feed.at(float(t)), float(t), ready, request, settings, float(read_arr[i]))
                props.append(external_value_proposal(spec, S, [sv.value], target, ready))
                sources[sv.source] = sources.get(sv.source, 0) + 1
            except NoData:
                props.append(None)
                served_err += 1

        res = hpa.sync(t, S, props)
        new = res.desired
        if new != S:
            events += 1
            if new > S:
                pending.extend(t + d for d in draw(new - S))
                next_ready = min(pending) if pending else math.inf
            else:
                rem = S - new
                k = min(rem, len(pending))
                if k:
                    del pending[len(pending) - k:]
                    next_ready = min(pending) if pending else math.inf
                ready -= rem - k
            S = new
        ready_arr[i] = ready
        repl_arr[i] = S

    slo, under, rmin = _measure(world, cfg, ready_arr, repl_arr)
    extra = {}
    if predictive:
        extra["noData_syncs"] = served_err
        extra["served_sources"] = sources
    return ModeResult(world.series_id, mode, target, slo, under, rmin, events, ready_arr, repl_arr, extra)
