"""Walk-forward replay of a real CPU trace through the HPA v2 controller (replay/hpa.py).

The simulated world (settings of ../shared/reference/replay-anchors.md unless configured):
- Demand D(t) = k * value, linear between the 5-minute samples (gaps bridged linearly);
  k = pods_at_p99 * anchor_target / p99 of the replayed part, so the trace's p99 needs
  ``pods_at_p99`` pods of ``cpu_request_cores`` at ``anchor_target`` (20 pods at 70%).
- Pods of ``cpu_request_cores`` become ready a start-up time after creation (constant or
  log-normal with the configured median; seeded RNG). A scale-down removes not-ready pods
  first, newest first, then ready pods. Every mode starts with ceil(D(t0 - delay) / 0.7)
  ready pods, within [min, max] replicas.
- The HPA syncs every ``step_seconds`` (15 s). Modes:
  reactive         Resource CPU Utilization target on D(t - delay) (the metric pipeline lag);
  predictive       External Value target fed by adapter.metrics.served_load_ratio (the very
                   function the adapter serves), on forecasts made walk-forward: a forecast is
                   published at s + delay for every 5-minute sample s, from a model that saw the
                   samples up to s only; the model is refitted every ``refit_hours`` on the last
                   ``train_days`` of samples; observed = D(t - delay);
  predictive+warm  predictive, with scale-ups served from a warm pool (ready after the claim
                   latency while warm pods last); the pool holds max(warm_pool_size,
                   ceil(warm_pool_fraction * replicas)) pods, refills cold (start-up time) and
                   takes back ready pods on a scale-down when short; warm pods cost;
  oracle           External Value target on max(true max of D over [t, t + lead], D(t - delay)).
- Measured at every sync, after the HPA acted: SLO violation when D / ready capacity > 0.9;
  under-provisioned core-minutes = integral of max(0, D - 0.9 * ready capacity); replica-
  minutes count every pod, ready or not, warm pods included.

No look-ahead: the forecaster only ever receives samples with timestamp <= s where the
forecast is used from s + delay on (tests/replay/test_no_lookahead.py perturbs the future).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from replay.hpa import HPA, HPASpec, external_value_proposal, milli, resource_utilization_proposal

__all__ = [
    "MODES",
    "ForecastTable",
    "ModeResult",
    "ReplayConfig",
    "StartupModel",
    "World",
    "adaptive_headroom",
    "adaptive_margins",
    "make_world",
    "run_mode",
    "walk_forward_forecasts",
]

MODES = ("reactive", "predictive", "predictive+warm", "oracle")
SAMPLE_SECONDS = 300


@dataclass(frozen=True)
class StartupModel:
    """Pod start-up time: ``constant`` (= median) or ``lognormal`` (median, sigma of the log)."""

    kind: str = "lognormal"
    median_seconds: float = 60.0
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
    step_seconds: int = 15
    delay_seconds: float = 90.0
    lead_seconds: float = 75.0
    target: float = 0.7  # HPA target of the mode (utilization fraction or Value)
    anchor_target: float = 0.7  # sizes the workload: p99 needs pods_at_p99 pods at this target
    pods_at_p99: float = 20.0
    cpu_request_cores: float = 1.0
    min_replicas: int = 1
    max_replicas: int = 100
    startup: StartupModel = field(default_factory=StartupModel)
    slo_threshold: float = 0.9
    train_days: float = 14.0
    replay_days: float = 14.0
    # predictive
    model: str = "ar"
    model_params: Mapping[str, object] = field(default_factory=dict)
    quantile: str = "p90"
    margin: float = 1.0  # multiplies the published quantile (1 = as published)
    # per-series adaptive margin, chosen walk-forward at every refit from the last
    # margin_history_days of the table's own forecasts: minimise pods + lambda * violations
    margin_lambda: float = 0.0  # 0 = fixed ``margin``
    margin_history_days: float = 3.0
    margin_grid: tuple = (0.8, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.27, 1.33, 1.4, 1.5, 1.6, 1.75, 2.0, 2.5)
    # publish margin * max(quantile, last sample): the margin also covers the current level
    margin_on_level: bool = False
    observed_floor: bool = True
    # shape of the adaptive headroom (with margin_lambda > 0):
    #   "quantile": the margin multiplies the published quantile only (the observed floor is
    #               served as is): headroom on the forecast;
    #   "served":   the margin divides the HPA target Value (target / m) of the day: headroom
    #               proportional to whatever is served, forecast or observed floor, like a
    #               reactive HPA retuned to a lower target;
    #   "auto":     each day, the (shape, margin) pair with the lowest walk-forward cost over
    #               the last margin_history_days (candidates in headroom_sources).
    headroom: str = "quantile"
    # forecast sources the "auto"/"served" choice may use: "model" (the published quantile)
    # and/or "persistence" (a flat path at the last sample: the model is ignored that day);
    # "model_nofloor" (served shape, the adapter's observed floor off that day) measured much
    # worse (103 series, lambda 80: 0.371x SLO at 1.116x vs 0.167x at 1.123x): the 5-minute
    # proxy cannot see what the 15 s observed floor catches
    headroom_sources: tuple = ("model",)
    # the served shape never raises the HPA target above ``target`` (m < 1 there serves a
    # Value target above 0.7 and the 5-minute proxy cannot see the violations it causes)
    served_min_margin: float = 1.0
    refit_hours: float = 24.0
    horizon_points: int = 4
    # warm pool
    warm_pool_size: int = 1  # warm pods kept at least
    warm_pool_fraction: float = 0.1  # ... and at least this fraction of the current replicas
    # claim latency of a warm pod; None = warmpool.coldstart's crun p50 + a 1 s readiness
    # probe when that module is present, else 2 s
    warm_claim_seconds: float | None = None
    seed: int = 0
    cores_per_unit: float | None = None  # fixes k instead of deriving it from the p99

    def hpa_spec(self) -> HPASpec:
        return HPASpec(min_replicas=self.min_replicas, max_replicas=self.max_replicas)


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
    return World(series_id, k, grid, cores, t0, t, demand, observed, peak, init)


# ----------------------------------------------------------------------------- forecasts


@dataclass
class ForecastTable:
    """Walk-forward forecasts of one series: row j was made from the samples up to
    ``origin[j]`` and is published at ``published[j]`` = origin + delay."""

    model: str
    origin: np.ndarray  # int seconds (a sample timestamp)
    published: np.ndarray
    mean: np.ndarray  # (n, h) cores
    quantiles: dict[str, np.ndarray]  # key -> (n, h)
    observed_at_origin: np.ndarray  # sample value (cores) at the origin (carried forward)
    refits: int = 0
    chosen: list = field(default_factory=list)  # model chosen at each refit ("auto")

    def error(self, world: World) -> dict[str, float]:
        """MAE of the 1-step (5 min) mean forecast vs the sample, and of persistence."""
        idx = (self.origin + SAMPLE_SECONDS - world.sample_ts[0]) // SAMPLE_SECONDS
        ok = (idx < len(world.sample_cores)) & (self.published >= world.t0)  # replayed rows only
        actual = np.full(len(self.origin), np.nan)
        actual[ok] = world.sample_cores[idx[ok]]
        m = np.isfinite(actual)
        if not m.any():
            return {"mae_h1": float("nan"), "mae_persistence_h1": float("nan"), "skill_h1": float("nan")}
        mae = float(np.mean(np.abs(self.mean[m, 0] - actual[m])))
        mae_p = float(np.mean(np.abs(self.observed_at_origin[m] - actual[m])))
        return {"mae_h1": mae, "mae_persistence_h1": mae_p, "skill_h1": 1 - mae / mae_p if mae_p > 0 else float("nan")}


def _ffill(a: np.ndarray) -> np.ndarray:
    """Causal gap filling (carry the last value forward): never uses a later sample."""
    a = a.copy()
    ok = np.isfinite(a)
    if not ok.any():
        return a
    idx = np.where(ok, np.arange(len(a)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = a[idx]
    out[: int(np.argmax(ok))] = a[int(np.argmax(ok))]
    return out


def walk_forward_forecasts(
    world: World,
    cfg: ReplayConfig,
    quantiles: Sequence[float] = (0.5, 0.75, 0.9, 0.95, 0.99),
    model_factory=None,
) -> ForecastTable:
    """Forecasts for every origin whose publication time falls in the replay.

    The model is fitted at each refit time T (every ``refit_hours`` from the start) on the
    samples with timestamp <= T - delay within the last ``train_days``; between refits the
    fitted parameters forecast from each new origin (``Model.rolling_means``) without
    refitting; quantiles are the model's published spread (quantile - mean at fit time)
    added to each mean. ``model_factory()`` returns an unfitted model (default:
    ``forecaster.models.get_model(cfg.model, **cfg.model_params)``).
    """
    from forecaster.store import quantile_key

    selection = model_factory is None and cfg.model == "auto"
    chosen: list[str] = []
    from replay.models import register

    register()
    if model_factory is None and not selection:
        from forecaster.models import get_model
        from replay.models import register

        register()

        def model_factory():
            return get_model(cfg.model, **dict(cfg.model_params))

    ts = world.sample_ts
    y = world.sample_cores
    yf = _ffill(y)
    h = int(cfg.horizon_points)
    delay = cfg.delay_seconds
    t_end = int(world.t[-1]) + cfg.step_seconds
    # every sample whose forecast is in use during the replay (published <= the end)
    warmup = cfg.margin_history_days * 86400 if cfg.margin_lambda > 0 else 0.0
    first = int(np.searchsorted(ts, world.t0 - delay - SAMPLE_SECONDS - warmup, side="left"))
    last = int(np.searchsorted(ts, t_end - delay, side="right"))
    origins_idx = np.arange(max(first, 1), last)
    origin_ts = ts[origins_idx]
    published = origin_ts + delay
    n = len(origins_idx)
    mean = np.zeros((n, h))
    qkeys = [quantile_key(q) for q in quantiles]
    qs = {k: np.zeros((n, h)) for k in qkeys}
    refit_every = cfg.refit_hours * 3600
    refits = 0
    T = float(world.t0)
    if n and published[0] < T:  # rows before the replay (margin warm-up) use the first fit
        T_first = float(published[0])
        T = T - math.ceil((T - T_first) / (cfg.refit_hours * 3600)) * cfg.refit_hours * 3600
        T = max(T, T_first)
    j = 0
    while j < n:
        # fit with what is known at T: samples <= T - delay, last train_days
        hi = int(np.searchsorted(ts, T - delay, side="right"))
        lo = int(np.searchsorted(ts, ts[hi - 1] - cfg.train_days * 86400, side="right")) if hi else 0
        window = y[lo:hi]
        if selection:
            # per-series choice among candidates on a validation tail of this window, with
            # split-conformal quantiles (forecaster.selection), as the trainer does
            from forecaster.selection import select_and_fit

            extra = {}
            if "candidates" in cfg.model_params:
                extra["candidates"] = tuple(cfg.model_params["candidates"])
            sel = select_and_fit(window, ts[lo:hi].astype("float64"), horizon=max(h, 12), quantiles=tuple(quantiles), **extra)
            model = sel.model
            chosen.append(sel.name)
        else:
            model = model_factory()
            model.fit(window, ts[lo:hi].astype("float64"))
        refits += 1
        pred = model.predict(h, quantiles=tuple(quantiles))
        offs = {k: np.asarray(pred.quantiles[k], dtype="float64") - np.asarray(pred.mean, dtype="float64") for k in qkeys}
        T_next = T + refit_every
        jj = j
        while jj < n and published[jj] < T_next:
            jj += 1
        if jj == j:
            jj = j + 1
        block = origins_idx[j:jj]
        m = model.rolling_means(yf, block, h)
        mean[j:jj] = m
        for k in qkeys:
            qs[k][j:jj] = np.maximum(m + offs[k][None, :], 0.0)
        j = jj
        T = T_next
    # quantiles never cross the mean's order
    stacked = np.sort(np.stack([qs[k] for k in qkeys]), axis=0)
    qs = {k: stacked[i] for i, k in enumerate(qkeys)}
    table = ForecastTable(cfg.model, origin_ts.astype("int64"), published, mean, qs, yf[origins_idx], refits)
    table.chosen = chosen
    return table


def adaptive_margins(world: World, table: ForecastTable, cfg: ReplayConfig) -> np.ndarray:
    """Per-row margin of the "quantile" headroom shape (see :func:`adaptive_headroom`)."""
    if cfg.headroom != "quantile":
        raise ValueError("adaptive_margins is the quantile shape; use adaptive_headroom")
    return adaptive_headroom(world, table, cfg)["q_scale"]


def adaptive_headroom(world: World, table: ForecastTable, cfg: ReplayConfig) -> dict[str, np.ndarray]:
    """The headroom of every forecast row, chosen at each refit time T (every ``refit_hours``
    from t0) from rows whose outcome is known at T (next sample <= T - delay) in the last
    ``margin_history_days``: the candidate minimising sum(pods) + lambda * sum(violations),
    where a candidate is (shape, source, m) and, with q = the source's first point and
    last = the sample at the origin,
      quantile shape: pods = ceil(max(m * q, last) / (target * request))
      served shape:   pods = ceil(m * max(q, last) / (target * request))
    and a violation is the next sample > slo_threshold * pods. Walk-forward: never looks ahead.

    Returns per row: ``q_scale`` (multiplies the served quantile path), ``target_div``
    (multiplies everything the adapter serves from, quantile path and observed alike, the
    same as dividing the HPA target Value by it), ``persist`` (1 = the row serves a flat path at
    the origin's sample instead of the model's quantile) and ``choice`` (candidate index)."""
    n = len(table.origin)
    out = {"q_scale": np.full(n, float(cfg.margin)), "target_div": np.ones(n), "persist": np.zeros(n, dtype=bool),
           "nofloor": np.zeros(n, dtype=bool), "choice": np.full(n, -1)}
    if cfg.margin_lambda <= 0 or n == 0:
        return out
    if cfg.headroom not in ("quantile", "served", "auto"):
        raise ValueError(f"headroom {cfg.headroom!r} must be quantile, served or auto")
    q = table.mean if cfg.quantile == "mean" else table.quantiles[cfg.quantile]
    ts0 = world.sample_ts[0]
    nxt = (table.origin + SAMPLE_SECONDS - ts0) // SAMPLE_SECONDS
    ok = nxt < len(world.sample_cores)
    actual = np.full(n, np.nan)
    actual[ok] = world.sample_cores[nxt[ok]]
    grid = np.asarray(cfg.margin_grid, dtype="float64")
    unit = cfg.target * cfg.cpu_request_cores
    last = table.observed_at_origin
    shapes = ("quantile", "served") if cfg.headroom == "auto" else (cfg.headroom,)
    sources = tuple(cfg.headroom_sources) if cfg.headroom != "quantile" else ("model",)
    cands, pods_rows = [], []
    for shape in shapes:
        for src in sources:
            if src not in ("model", "persistence", "model_nofloor"):
                raise ValueError(f"headroom source {src!r} must be model, persistence or model_nofloor")
            if src == "model_nofloor" and shape != "served":
                continue
            base = last if src == "persistence" else q[:, 0]
            if cfg.margin_on_level:
                base = np.maximum(base, last)
            for m in grid:
                if shape == "served" and m < cfg.served_min_margin:
                    continue
                if shape == "quantile":
                    want = np.maximum(m * base, last)
                else:
                    want = m * np.maximum(base, last) if cfg.observed_floor and src != "model_nofloor" else m * base
                cands.append((shape, src, float(m)))
                pods_rows.append(np.ceil(want / unit - 1e-9))
    pods = np.clip(np.stack(pods_rows), cfg.min_replicas, cfg.max_replicas)
    viol = actual[None, :] > cfg.slo_threshold * pods * cfg.cpu_request_cores
    cost = pods + cfg.margin_lambda * viol
    known_at = table.origin + SAMPLE_SECONDS + cfg.delay_seconds
    step = cfg.refit_hours * 3600
    T = float(world.t0)
    # rows used before t0 (none are served) keep the fixed margin
    while T <= float(table.published[-1]):
        use = (known_at <= T) & (table.origin >= T - cfg.margin_history_days * 86400) & np.isfinite(actual)
        rows = (table.published >= T) & (table.published < T + step)
        if use.sum() >= 12:
            c = int(np.argmin(cost[:, use].sum(axis=1)))
            shape, src, m = cands[c]
            out["choice"][rows] = c
            out["persist"][rows] = src == "persistence"
            out["nofloor"][rows] = src == "model_nofloor"
            if shape == "quantile":
                out["q_scale"][rows] = m
                out["target_div"][rows] = 1.0
            else:
                out["q_scale"][rows] = 1.0
                out["target_div"][rows] = m
        T += step
    return out


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
    replicas: np.ndarray = field(repr=False)  # every pod incl. warm
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


def warm_claim_seconds(cfg: ReplayConfig) -> float:
    if cfg.warm_claim_seconds is not None:
        return float(cfg.warm_claim_seconds)
    try:
        from warmpool.coldstart import ColdStartModel

        return ColdStartModel().estimate("crun").total_ms[0] / 1000.0 + 1.0
    except Exception:  # noqa: BLE001 - the warm pool part is optional here
        return 2.0


def run_mode(world: World, mode: str, cfg: ReplayConfig, forecasts: ForecastTable | None = None) -> ModeResult:
    """Replay one mode over the world's sync grid; deterministic for a given ``cfg.seed``."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    predictive = mode in ("predictive", "predictive+warm")
    if predictive and forecasts is None:
        raise ValueError(f"mode {mode!r} needs walk-forward forecasts (walk_forward_forecasts)")
    spec = cfg.hpa_spec()
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

    # warm pool
    warm = mode == "predictive+warm"
    frac = float(cfg.warm_pool_fraction)
    pool_min = int(cfg.warm_pool_size)
    warm_ready = max(pool_min, math.ceil(frac * S)) if warm else 0
    warm_pending: list[float] = []
    claim = warm_claim_seconds(cfg) if warm else 0.0

    # predictive plumbing: the adapter's own code path
    if predictive:
        from adapter.metrics import MetricSettings, NoData, served_load_ratio
        from forecaster.store import Forecast

        settings = MetricSettings(
            lead_seconds=cfg.lead_seconds,
            quantile=cfg.quantile,
            max_forecast_age_seconds=cfg.delay_seconds + SAMPLE_SECONDS + cfg.step_seconds,
            observed_floor=cfg.observed_floor,
        )
        qvals = forecasts.mean if cfg.quantile == "mean" else forecasts.quantiles[cfg.quantile]
        if cfg.margin_on_level:
            qvals = np.maximum(qvals, forecasts.observed_at_origin[:, None])
        # served headroom m: the forecaster publishes the day's quantile path AND observed tail
        # scaled by m, the observation the adapter floors with is scaled alike, the HPA target
        # Value stays cfg.target: the adapter serves m x max(prediction, observed)
        row_scale = np.ones(len(forecasts.origin))
        row_nofloor = np.zeros(len(forecasts.origin), dtype=bool)
        settings_nofloor = replace(settings, observed_floor=False)
        if cfg.margin_lambda > 0:
            hr = adaptive_headroom(world, forecasts, cfg)
            if hr["persist"].any():  # that day the model is ignored: a flat path at the last sample
                qvals = np.where(hr["persist"][:, None], forecasts.observed_at_origin[:, None], qvals)
            qvals = qvals * hr["q_scale"][:, None]
            row_scale = hr["target_div"]
            row_nofloor = hr["nofloor"]
            qvals = qvals * row_scale[:, None]
        elif cfg.margin != 1.0:
            qvals = qvals * cfg.margin
        pub = forecasts.published
        fj = int(np.searchsorted(pub, world.t0, side="right")) - 1
        fc = None
        served_err = 0

    def draw(m: int) -> list[float]:
        if const_startup:
            return [su] * m
        return list(startup.draw(rng, m))

    t_arr = world.t
    obs_arr = world.observed
    peak_arr = world.oracle_peak
    target = cfg.target
    for i in range(n):
        t = int(t_arr[i])
        if t >= next_ready:
            still = [r for r in pending if r > t]
            ready += len(pending) - len(still)
            pending = still
            next_ready = min(pending) if pending else math.inf
        if warm and warm_pending:
            still = [r for r in warm_pending if r > t]
            warm_ready += len(warm_pending) - len(still)
            warm_pending = still

        obs = float(obs_arr[i])
        if mode == "reactive":
            p = resource_utilization_proposal(spec, S, milli(obs), ready, req_milli, target_pct, unready_pods=len(pending))
        elif mode == "oracle":
            v = max(float(peak_arr[i]), obs) / max(ready, 1) / request
            p = external_value_proposal(spec, S, [v], target, ready)
        else:
            while fj + 1 < len(pub) and pub[fj + 1] <= t:
                fj += 1
                fc = None
            if fc is None and fj >= 0:
                o = float(forecasts.origin[fj])
                fc = Forecast(
                    series_id=world.series_id,
                    generated_at=float(pub[fj]),
                    origin=o,
                    step_seconds=float(SAMPLE_SECONDS),
                    mean=tuple(forecasts.mean[fj].tolist()),
                    quantiles={cfg.quantile: tuple(qvals[fj].tolist())} if cfg.quantile != "mean" else {},
                    model=forecasts.model,
                    observed=((o, float(forecasts.observed_at_origin[fj] * row_scale[fj])),),
                )
            try:
                scale = float(row_scale[fj]) if fj >= 0 else 1.0
                st = settings_nofloor if fj >= 0 and row_nofloor[fj] else settings
                sv = served_load_ratio(fc, float(t), ready, request, st, observed=obs * scale)
                p = external_value_proposal(spec, S, [sv.value], target, ready)
            except NoData:
                p = None
                served_err += 1

        res = hpa.sync(t, S, [p])
        new = res.desired
        if new != S:
            events += 1
            if new > S:
                add = new - S
                if warm and warm_ready > 0:
                    take = min(add, warm_ready)
                    warm_ready -= take
                    pending.extend([t + claim] * take)
                    add -= take
                if add:
                    pending.extend(t + d for d in draw(add))
                next_ready = min(pending) if pending else math.inf
            else:
                rem = S - new
                k = min(rem, len(pending))
                if k:
                    del pending[len(pending) - k:]
                    next_ready = min(pending) if pending else math.inf
                ready -= rem - k
                if warm:  # ready pods leaving the workload go back to the pool if it is short
                    short = max(pool_min, math.ceil(frac * new)) - warm_ready - len(warm_pending)
                    if short > 0:
                        warm_ready += min(short, rem - k)
            S = new
        if warm:
            want = max(pool_min, math.ceil(frac * S))
            have = warm_ready + len(warm_pending)
            if have < want:
                warm_pending.extend(t + d for d in draw(want - have))
            elif have > want:
                extra = have - want
                k = min(extra, len(warm_pending))
                if k:
                    del warm_pending[len(warm_pending) - k:]
                warm_ready -= extra - k
        ready_arr[i] = ready
        repl_arr[i] = S + (warm_ready + len(warm_pending) if warm else 0)

    slo, under, rmin = _measure(world, cfg, ready_arr, repl_arr)
    extra = {}
    if predictive:
        extra["noData_syncs"] = served_err
    return ModeResult(world.series_id, mode, target, slo, under, rmin, events, ready_arr, repl_arr, extra)
