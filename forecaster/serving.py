"""The serving policy: how much headroom a workload's forecast is served with, and from what.

The trainer *chooses* a policy per workload at every fit, walk-forward from the workload's own
recent history (:func:`choose_policy`); it is *published* with every forecast
(``Forecast.policy``, a plain versioned mapping); it is *applied* only in
``forecaster/served.py``. The replay runs the same trainer, so what it measures is what ships.

A policy is (source, quantile, hold k, headroom m):
- source ``model``: the forecast's quantile path; ``persistence``: a flat path at the
  observed floor (on days when the model does not pay for itself);
- the observed floor is the max of the last k observed samples: k = 1 is the last value; a
  longer hold keeps capacity through the dips of a bursty workload, whose next burst follows
  a dip more often than a forecast can tell (what a reactive HPA's 5-minute scale-down
  stabilization does for every workload, chosen here per workload);
- the adapter serves m x max(prediction, floor): headroom proportional to the served
  value, like a reactive HPA retuned to target / m, but only where the load is predicted.
  m >= 1 by default, so the served value is never below what is observed: a forecast can
  delay a scale-down, never cause an under-scale relative to a reactive HPA at the same target.
- m may differ by state: how far demand now sits below the peak of the last 12 samples
  (``peak_gap_states`` ranges of that gap, each with its own m, chosen on the week's origins in
  that range), because a workload just past a burst is where the next burst most often comes.

The choice minimises, over the last ``history_days`` of one-step forecasts, pod-minutes +
price x SLO-violation minutes, where pods = the replicas the HPA would ask for at
``target_value`` and a violation minute is a minute of demand above ``slo_utilization`` of that
capacity while those pods serve, until the next sample's pods are ready (:func:`exposure`,
:func:`violation_minutes`). The user states the trade-off in units that do not depend on the
workload's size, so a 3-pod and a 300-pod workload with the same shape of demand get the same
policy: ``violation_worth_minutes`` prices a violation minute in minutes of the whole workload;
an optional ``slo_minutes_per_day`` raises that price for a workload until its policy meets the
SLO on its own history; ``cost_ceiling`` caps what any policy may run against a reactive HPA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from forecaster.servingpolicy import MAX_HOLD, POLICY_VERSION, SOURCES, ServingPolicy, _num, _whole
from forecaster.servingscore import (as_slices, clairvoyant_cost, cross_fitted_offsets, gap_edges, gap_state, held_floor,
                                     lead_bases, peak_gaps, sync_exposure, sync_observed, violation_minutes, window_means)
from forecaster.timing import TIMING

__all__ = ["MAX_HOLD", "POLICY_VERSION", "SOURCES", "ServingPolicy", "ServingSettings", "choose_policy", "policy_from_model",
           "DEFAULT_HEADROOMS", "DEFAULT_HOLDS"]

DEFAULT_HOLDS = (1,)
DEFAULT_GAP_STATES = 5
MAX_GAP_STATES = 8
# chosen on the tune half of the replay benchmark (docs/benchmarks/replay.md, bench/results/replay_all.md):
# of 30, 60 and 120, the one with the fewest violation minutes at <= 1.10x a reactive HPA's
# replica-minutes that still wins >= 85% of the series at equal cost
DEFAULT_VIOLATION_WORTH_MINUTES = 60.0
# where the SLO is out of reach the fewest violations would buy the top headroom whatever it
# costs: at most what a reactive HPA retuned to 0.47 would run (the frontier's expensive end)
DEFAULT_COST_CEILING = 1.5
DEFAULT_HEADROOMS = (1.0, 1.05, 1.1, 1.15, 1.2, 1.27, 1.33, 1.4, 1.5, 1.6, 1.75, 2.0, 2.5)


@dataclass(frozen=True)
class ServingSettings:
    """How the trainer chooses a workload's serving policy (the ``serving:`` config section).

    violation_worth_minutes: what one minute of SLO violation (demand above ``slo_utilization``
        of the ready capacity) is worth, in minutes of running the whole workload (its reactive
        pods): the same trade-off for a workload of 3 pods or of 300; higher buys fewer
        violations with more pods.
    slo_minutes_per_day: 0 (none), or an SLO: at most this many minutes a day of violation on
        the workload's own recent history; where the price above does not meet it, the trainer
        raises the price for that workload until its cheapest policy does.
    cost_ceiling: 0 (none), or the most pod-minutes a policy may run, as a multiple of what a
        reactive HPA at ``target_value`` would run on the same history; where the SLO would
        cost more, the policy with the fewest violations under the ceiling is served.
    quantiles: the published quantiles the policy may serve (each must be published).
    sources: ``model`` and/or ``persistence``.
    headrooms: the candidate multipliers m; values below 1 serve below observed demand (a
        calm-day discount) and are refused unless ``allow_below_observed`` is true.
    target_value: the HPA's target Value the pods are counted at (0.7 in the example HPA).
    slo_utilization: utilization above which an interval counts as a violation.
    history_days: how much recent history the choice scores (the selection's out-of-sample
        validation tail, and before it the fitted model on the history up to each origin).
    holds: the candidate holds k (samples, 1-12): the observed floor is the max of the last k
        observed samples. The default is the last sample only: over the replayed traces a
        longer hold cost more pod-minutes than the violation minutes it saved were worth.
    model_margin: the model is served only when it saves at least this fraction of what a
        forecast can save: persistence's cost above a clairvoyant HPA's at the same target
        (:func:`servingscore.clairvoyant_cost`). The model was selected on the same history among
        many candidates, so its score is optimistic; and proportional headroom on the observed
        value carries the rare steep rise a forecast's margin does not, which a week of history
        may not hold. Measured against the avoidable cost rather than the total, the bar scales
        with what the forecast buys: a rare daily peak that a forecast sees coming is worth
        little of the week's pod-minutes but most of what any forecast could save. 0 serves
        whichever scores lower.
    peak_gap_states: how many states of the workload's recent past get their own headroom. The
        state is how far demand now sits below the peak of the last 12 samples
        (``servingscore.peak_gap``; an hour at 5-minute samples), split into ranges of equal
        counts over the scored week: bursts cluster in time, so headroom pays most just after
        one. 1 chooses one headroom for all times.
    """

    violation_worth_minutes: float = DEFAULT_VIOLATION_WORTH_MINUTES
    slo_minutes_per_day: float = 0.0
    cost_ceiling: float = DEFAULT_COST_CEILING
    quantiles: tuple[str, ...] = ("p50", "p90")
    sources: tuple[str, ...] = SOURCES
    headrooms: tuple[float, ...] = DEFAULT_HEADROOMS
    target_value: float = TIMING.hpa_target
    slo_utilization: float = TIMING.slo_utilization
    history_days: float = 7.0
    allow_below_observed: bool = False
    holds: tuple[int, ...] = DEFAULT_HOLDS
    model_margin: float = 0.0
    peak_gap_states: int = DEFAULT_GAP_STATES

    def problems(self, path: str = "serving", published: Sequence[str] | None = None) -> list[str]:
        """Every problem with its path (empty when valid)."""
        out = []

        def bad(key: str, msg: str) -> None:
            out.append(f"{path}.{key}: {msg}")

        if not _num(self.violation_worth_minutes) or not 0 <= self.violation_worth_minutes <= max(EXCHANGE_GRID):
            bad("violation_worth_minutes", f"{self.violation_worth_minutes!r} must be a number of minutes in "
                f"[0, {max(EXCHANGE_GRID):g}] (e.g. {DEFAULT_VIOLATION_WORTH_MINUTES:g})")
        if not _num(self.slo_minutes_per_day) or not 0 <= self.slo_minutes_per_day <= 1440:
            bad("slo_minutes_per_day", f"{self.slo_minutes_per_day!r} must be a number of minutes in [0, 1440] "
                "(0: no SLO; e.g. 3)")
        if not _num(self.cost_ceiling) or not (self.cost_ceiling == 0 or self.cost_ceiling >= 1):
            bad("cost_ceiling", f"{self.cost_ceiling!r} must be 0 (no ceiling) or a multiple >= 1 of a reactive HPA's "
                "pod-minutes (e.g. 1.5)")
        if not self.quantiles:
            bad("quantiles", "must list at least one quantile key such as p50")
        for i, q in enumerate(self.quantiles):
            if not isinstance(q, str) or not (q == "mean" or (q.startswith("p") and _pct(q))):
                bad(f"quantiles[{i}]", f"{q!r} must be 'mean' or a key like p50 or p90")
            elif published is not None and q != "mean" and q not in published:
                bad(f"quantiles[{i}]", f"{q!r} is not published; add it to training.quantiles (published: {', '.join(published)})")
        if not self.sources:
            bad("sources", f"must list at least one of {', '.join(SOURCES)}")
        for i, s in enumerate(self.sources):
            if s not in SOURCES:
                bad(f"sources[{i}]", f"{s!r} must be one of {', '.join(SOURCES)}")
        if not self.headrooms:
            bad("headrooms", "must list at least one multiplier such as 1.0")
        for i, m in enumerate(self.headrooms):
            if not _num(m) or not 0 < m <= 10:
                bad(f"headrooms[{i}]", f"{m!r} must be a number in (0, 10]")
            elif m < 1 and not self.allow_below_observed:
                bad(f"headrooms[{i}]", f"{m!r} is below 1: it serves less than the observed demand; "
                    "set allow_below_observed: true to accept that under-scale risk")
        if not self.holds:
            bad("holds", "must list at least one hold such as 1 (the last observed sample)")
        for i, k in enumerate(self.holds):
            if not _whole(k, 1, MAX_HOLD):
                bad(f"holds[{i}]", f"{k!r} must be a whole number of samples in [1, {MAX_HOLD}]")
        if not _num(self.target_value) or not 0 < self.target_value <= 10:
            bad("target_value", f"{self.target_value!r} must be a number in (0, 10] (the HPA's target Value, e.g. 0.7)")
        if not _num(self.slo_utilization) or not 0 < self.slo_utilization <= 10:
            bad("slo_utilization", f"{self.slo_utilization!r} must be a number in (0, 10] (e.g. 0.9)")
        if not _num(self.model_margin) or not 0 <= self.model_margin < 1:
            bad("model_margin", f"{self.model_margin!r} must be a number in [0, 1) (e.g. 0.1)")
        if not _whole(self.peak_gap_states, 1, MAX_GAP_STATES):
            bad("peak_gap_states", f"{self.peak_gap_states!r} must be a whole number in [1, {MAX_GAP_STATES}] "
                "(1: one headroom at all times)")
        if not _num(self.history_days) or self.history_days <= 0:
            bad("history_days", f"{self.history_days!r} must be a number > 0 (e.g. 7)")
        return out


def _pct(q: str) -> bool:
    try:
        return 0 < float(q[1:]) < 100
    except ValueError:
        return False


Candidate = tuple[str, str, int, tuple[float, ...], float, float, float]  # source, q, k, m per state, cost, violation minutes, pods

# Prices of a violation minute, in minutes of the whole workload (its reactive pods), that a
# stated SLO raises the price along (or a cost ceiling lowers it along); the grid's ratio of ~1.5
# between neighbours is finer than a week's history can tell policies apart.
EXCHANGE_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0, 200.0,
                 300.0, 500.0, 1000.0, 3000.0)


@dataclass(frozen=True)
class _Option:
    """One (source, quantile, hold) scored at every headroom: pods (m, n) each origin's pods
    (each sync's pods for its slice, averaged), viol (m, n) its SLO-violation minutes."""

    source: str
    quantile: str
    hold: int
    pods: np.ndarray
    viol: np.ndarray


def _options(slices: np.ndarray, last: np.ndarray, floors: Mapping[int, np.ndarray],
             bases: Mapping[str, np.ndarray], capacity_per_pod: float, settings: ServingSettings,
             minutes: float, observed: np.ndarray | None = None) -> list[_Option]:
    """Every (source, quantile, hold) scored at every headroom over the origins, in the order
    ties are broken: the shortest hold first (the least sticky policy), the model before
    persistence (the forecast is served). ``slices`` (n, J, 2): the demand each sync's pods
    carry; ``bases[q]`` (n, J): the model's prediction at each sync; ``observed`` (n, J): the
    demand the adapter reads at each sync (part of every floor); ``minutes``: one slice's length."""
    unit = settings.target_value * capacity_per_pod
    limit = settings.slo_utilization * capacity_per_pod
    grid = np.asarray(sorted(settings.headrooms), dtype="float64")
    J = slices.shape[1]
    out: list[_Option] = []
    for k in sorted(floors):
        # as forecaster.served applies it: the floor (and the persistence path) is the observed
        # demand now (the adapter's reading, else the last published sample) with the last k
        # published samples
        if observed is None:
            fl = np.fmax(floors[k], last)[:, None]
        else:
            fl = np.fmax(floors[k][:, None], observed) if k > 1 else observed
        fl = np.broadcast_to(fl, (len(last), J))
        options = []
        if "model" in settings.sources:
            options += [("model", q, np.maximum(bases[q], fl)) for q in settings.quantiles if q in bases]
        if "persistence" in settings.sources:
            options.append(("persistence", "-", fl))
        for src, q, base in options:
            pods = np.maximum(np.ceil(grid[:, None, None] * base[None] / unit - 1e-9), 1.0)  # (m, n, J)
            viol = violation_minutes(slices[None], limit * pods, minutes).sum(axis=2)
            out.append(_Option(src, q, k, pods.mean(axis=2), viol))
    return out


def _pick(opt: _Option, grid: np.ndarray, lam: float, minutes_per_origin: float, states: np.ndarray, ns: int) -> Candidate:
    """The option's best headroom per state at exchange rate ``lam`` (pod-minutes per violation
    minute): the cost is a sum over origins, so each state's headroom is chosen on its own."""
    cost = minutes_per_origin * opt.pods + lam * opt.viol
    best = [int(np.argmin(cost[:, states == j].sum(axis=1))) for j in range(ns)]  # the smallest m of equal costs
    pick = np.asarray(best)[states], np.arange(len(states))
    return (opt.source, opt.quantile, opt.hold, tuple(float(grid[i]) for i in best), float(cost[pick].sum()),
            float(opt.viol[pick].sum()), float(opt.pods[pick].sum()))


def _solve(opts: list[_Option], settings: ServingSettings, n: int, step_minutes: float, states: np.ndarray | None,
           reference_pods: float) -> tuple[list[Candidate], float, str]:
    """The candidates at the price of a violation minute the workload's settings set, in minutes
    of the whole workload (its reactive pods, so the price means the same at any size):
    ``violation_worth_minutes``; raised along :data:`EXCHANGE_GRID` until the best policy meets
    ``slo_minutes_per_day`` over the scored intervals, when one is stated; lowered or capped
    where its pods would pass ``cost_ceiling`` x the reactive reference's. Returns (candidates
    at that price, the price in pod-minutes, how it was set)."""
    grid = np.asarray(sorted(settings.headrooms), dtype="float64")
    st = np.zeros(n, dtype=int) if states is None else states
    ns = int(st.max()) + 1 if len(st) else 1
    slo = settings.slo_minutes_per_day
    budget = slo / 1440.0 * n * step_minutes
    workload_minute = reference_pods / max(n, 1)  # one minute of the whole workload, in pod-minutes
    ceiling = settings.cost_ceiling * reference_pods if settings.cost_ceiling else math.inf
    base = float(settings.violation_worth_minutes)

    def at(rate: float) -> tuple[list[Candidate], float, Candidate]:
        lam = rate * workload_minute
        cands = [_pick(o, grid, lam, step_minutes, st, ns) for o in opts]
        return cands, lam, min(cands, key=lambda c: (c[4], sum(c[3])))

    cands, lam, best = at(base)
    if best[6] > ceiling + 1e-9:  # even the stated price buys more pods than the ceiling allows
        for rate in sorted((r for r in EXCHANGE_GRID if r < base), reverse=True):
            cands, lam, best = at(rate)
            if best[6] <= ceiling + 1e-9:
                break
        return cands, lam, "cost ceiling"
    if not slo or best[5] <= budget + 1e-9:
        return cands, lam, "priced"
    for rate in (r for r in EXCHANGE_GRID if r > base):
        more = at(rate)
        if more[2][6] > ceiling + 1e-9:
            return cands, lam, "cost ceiling"
        cands, lam, best = more
        if best[5] <= budget + 1e-9:
            return cands, lam, "slo met"
    return cands, lam, "slo not met"


def _label(c: Candidate) -> str:
    name = "persistence" if c[0] == "persistence" else c[1]
    return name if c[2] == 1 else f"{name} hold {c[2]}"


def _ms(m: tuple) -> str:
    return "/".join(f"{x:g}" for x in m)


def _explain(best: Candidate, cands: list[Candidate], n: int, settings: ServingSettings, bar: float | None,
             step_minutes: float, lam: float, how: str) -> tuple[str, dict[str, float]]:
    """Why ``best`` was chosen (for people: REST and the dashboard), and each source's best cost."""
    src, q, _, m, cost, viol, pods = best
    runner = next((c for c in sorted(cands, key=lambda c: c[4]) if (c[0], c[1]) != (src, q)), None)
    days = n * step_minutes / 1440.0
    slo = settings.slo_minutes_per_day
    met = {"priced": f"a violation minute worth {settings.violation_worth_minutes:g} minutes of the whole workload"
                     + (f", within the SLO of {slo:g} violation minutes a day" if slo else ""),
           "slo met": f"the cheapest policy within the SLO of {slo:g} violation minutes a day",
           "cost ceiling": f"the fewest violations within the cost ceiling of {settings.cost_ceiling:g}x a reactive HPA's pods",
           "slo not met": f"no candidate met the SLO of {slo:g} violation minutes a day: the fewest violations"}[how]
    reason = (f"over the last {n} intervals ({days:.1f} days), {_label(best)} x{_ms(m)} ran {step_minutes * pods:.0f} "
              f"pod-minutes with {viol:.1f} SLO-violation minutes ({viol / max(days, 1e-9):.2f} a day): {met}; "
              f"priced at {lam:.0f} pod-minutes a violation minute, cost {cost:.0f}, the best of {len(cands)} candidates")
    if bar is not None:
        reason += (f" (the model must cost below {bar:.0f}: save {settings.model_margin:.0%} of persistence's cost "
                   "above a clairvoyant HPA's)")
    if runner is not None:
        reason += f" (best other source: {_label(runner)} x{_ms(runner[3])} = {runner[4]:.0f})"
    costs: dict[str, float] = {}
    for c in cands:
        costs[_label(c)] = min(costs.get(_label(c), math.inf), c[4])
    return reason, costs


def choose_policy(
    actual_next: np.ndarray,
    last: np.ndarray,
    first_points: Mapping[str, np.ndarray],
    capacity_per_pod: float,
    settings: ServingSettings,
    chosen_at: float | None = None,
    floors: Mapping[int, np.ndarray] | None = None,
    step_minutes: float = 5.0,
    gaps: np.ndarray | None = None,
    observed: np.ndarray | None = None,
) -> ServingPolicy:
    """Pick the cheapest (source, quantile, hold k, m) over past origins.

    actual_next[i]: the demand the pods decided from origin i carry: (n, J, 2), each of the J
    HPA syncs reading origin i's forecast with its slice's demand at start and end
    (:func:`servingscore.sync_exposure`); an (n, 3) path (:func:`servingscore.exposure`) or a
    flat (n,) value per origin are read as slices too (:func:`servingscore.as_slices`);
    last[i]: the sample at origin i;
    first_points[q][i]: the model's prediction of quantile q from origin i: (n, J), what the
    adapter serves at each sync (:func:`servingscore.lead_bases`), or (n,), the same at every sync;
    floors[k][i]: the observed floor of hold k at origin i (max of the last k samples; hold 1
    is ``last``, the only hold without ``floors``);
    capacity_per_pod: demand one pod can carry (CPU request in cores for CPU demand);
    step_minutes: the sample interval (pods count for it; violations last part of it);
    observed[i]: (n, J), the demand the adapter reads directly at each sync
    (:func:`servingscore.sync_observed`), part of every floor; None: the published samples only.
    """
    slices = as_slices(actual_next)
    J = slices.shape[1]
    last = np.asarray(last, dtype="float64")
    bases = {}
    for q, v in first_points.items():
        v = np.asarray(v, dtype="float64")
        bases[q] = np.repeat(v[:, None], J, axis=1) if v.ndim == 1 else v
    floors = {1: last, **{int(k): np.asarray(v, dtype="float64") for k, v in (floors or {}).items()}}
    holds = [k for k in sorted(set(settings.holds)) if k in floors] or [1]
    ok = np.isfinite(slices).all(axis=(1, 2)) & np.isfinite(last)
    for v in bases.values():
        ok &= np.isfinite(v).all(axis=1)
    if observed is not None:
        observed = np.asarray(observed, dtype="float64")
        ok &= np.isfinite(observed).all(axis=1)
    n = int(ok.sum())
    if n < 12 or not capacity_per_pod > 0:
        why = f"only {n} scored intervals (< 12)" if n < 12 else "no capacity per pod known"
        return ServingPolicy(source="model", quantile=settings.quantiles[-1], chosen_at=chosen_at,
                             reason=f"default ({why}): {settings.quantiles[-1]} forecast, no headroom")
    edges: tuple[float, ...] = ()
    states = None
    if gaps is not None and settings.peak_gap_states > 1:
        g = np.asarray(gaps, dtype="float64")[ok]
        edges = gap_edges(g, settings.peak_gap_states)
        states = gap_state(g, edges)
    minutes = float(step_minutes) / J
    obs_ok = None if observed is None else observed[ok]
    opts = _options(slices[ok], last[ok], {k: floors[k][ok] for k in holds}, {q: v[ok] for q, v in bases.items()},
                    capacity_per_pod, settings, minutes, obs_ok)
    # the reactive reference: the observed demand now at the target, as a reactive HPA would ask
    now = last[ok][:, None] if obs_ok is None else obs_ok
    reference = float(np.maximum(np.ceil(now / (settings.target_value * capacity_per_pod) - 1e-9), 1.0).mean(axis=1).sum())
    cands, lam, how = _solve(opts, settings, n, float(step_minutes), states, reference)
    order = {c: i for i, c in enumerate(cands)}
    persist = [c for c in cands if c[0] == "persistence"]
    fb = min(persist, key=lambda c: (c[4], sum(c[3]), order[c])) if persist else None
    alone = [o for o in opts if o.source == "persistence"]
    # what serves while the model is on its fallback: persistence priced on its own (for a stated
    # SLO, the price the model needed may be far lower than what persistence needs)
    fb_alone = min(_solve(alone, settings, n, float(step_minutes), states, reference)[0], key=lambda c: (c[4], sum(c[3]))) \
        if alone else None
    best = min(cands, key=lambda c: (c[4], sum(c[3]), order[c]))
    bar = None
    if fb is not None and best[0] == "model" and settings.model_margin > 0:
        # the margin is a share of what a forecast can save at all, not of the total cost
        ideal = clairvoyant_cost(slices[ok], settings.target_value * capacity_per_pod, minutes)
        bar = fb[4] - float(settings.model_margin) * max(fb[4] - ideal, 0.0)
        if not best[4] < bar:
            best = fb
    fb = fb_alone if best[0] == "model" and fb_alone is not None else fb or best
    src, q, k, m = best[:4]
    reason, costs = _explain(best, cands, n, settings, bar, step_minutes, lam, how)
    stated = len(edges) > 0
    return ServingPolicy(source=src, quantile=settings.quantiles[-1] if src == "persistence" else q, headroom=max(m),
                         fallback_headroom=max(fb[3]), chosen_at=chosen_at, reason=reason, costs=costs,
                         hold=k, fallback_hold=fb[2], gap_edges=edges if stated else (),
                         headrooms=m if stated else (), fallback_headrooms=fb[3] if stated else (),
                         below_observed=min(*m, *fb[3]) < 1)


def policy_from_model(
    model,
    y_raw: np.ndarray,
    capacity_per_pod: float | None,
    settings: ServingSettings,
    season: int,
    chosen_at: float | None = None,
    tail: tuple[np.ndarray, np.ndarray] | None = None,
) -> ServingPolicy:
    """Choose the policy from one-step forecasts of the fitted ``model`` over the last
    ``settings.history_days`` of ``y_raw``.

    ``tail`` = (origins, 1-step means) the selection kept from its validation tail (parameters
    fitted without it: out of sample; ``Selection.tail_origins/tail_means``). Origins before
    the tail are scored with the fitted parameters on the history up to each origin
    (``rolling_means``): a week holds the rare steep rises that decide whether a forecast's
    margin or a proportional headroom carries a workload, and two days rarely do. Quantile
    paths are the point forecast plus offsets cross-fitted on the other half of the window
    (:func:`cross_fitted_offsets`), because the published offsets were calibrated on its tail.
    """
    raw = np.asarray(y_raw, dtype="float64")
    finite = np.isfinite(raw)
    if not finite.any():
        return ServingPolicy(chosen_at=chosen_at, reason="default: no finite history to choose from")
    raw = raw[int(np.argmax(finite)):]
    n = len(raw)
    span = int(settings.history_days * season)
    if capacity_per_pod is None:
        return choose_policy(np.zeros(0), np.zeros(0), {}, 0.0, settings, chosen_at)
    try:
        origins, mean = window_means(model, raw, np.arange(max(0, n - 1 - span), n - 1), tail)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be scored gets the default
        return ServingPolicy(chosen_at=chosen_at, reason=f"default: {getattr(model, 'name', 'model')} could not be scored ({exc})")
    offsets = getattr(model, "offsets_", None) or {}
    firsts = {}
    for q in settings.quantiles:
        if q == "mean" or q not in offsets:
            firsts[q] = np.maximum(mean, 0.0)
            continue
        off = cross_fitted_offsets(raw[origins + 1] - mean, float(q[1:]) / 100.0)
        if off is None:  # too few points to cross-fit: the published offset
            off0 = float(np.asarray(offsets[q])[0])
            off = np.full(len(mean), off0 if np.isfinite(off0) else 0.0)
        firsts[q] = np.maximum(mean + off, 0.0)
    floors = {k: held_floor(raw, origins, k) for k in settings.holds if k > 1}
    step = 86400.0 / season
    # scored as deployed: every HPA sync reading each origin's forecast, what the adapter serves then
    bases = {q: lead_bases(raw[origins], v, step, TIMING) for q, v in firsts.items()}
    return choose_policy(sync_exposure(raw, origins, step, TIMING), raw[origins], bases, float(capacity_per_pod), settings,
                         chosen_at, floors, step_minutes=step / 60.0,
                         gaps=peak_gaps(raw, origins) if settings.peak_gap_states > 1 else None,
                         observed=sync_observed(raw, origins, step, TIMING))
