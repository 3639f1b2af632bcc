"""Trace replay of warm-pool policies on the Azure Functions 2019 trace, through the
controller: ``foresight warmpool simulate`` and bench/warmpool_trace.py both call
``simulate`` here.

The measurement model is the one in ``shared/reference/warm-pools.md`` ("Measuring a
policy"), so figures compare with the reference table:

- one step = one minute; demand ``n`` containers in minute ``t``:
  ``single``: 1 if the minute has any invocation; ``concurrency``:
  ``min(c, max(1, ceil(c * d / 60)))`` for ``c`` invocations of average duration ``d`` s;
- resident containers serve first; ``cold = max(0, n - resident)``; pools start empty;
- wasted memory = idle resident containers x the app's AverageAllocatedMb, per minute.

How a minute is driven: every function is one pool of one
``Controller`` on the sim backend with a simulated clock. At the minute's start the controller
runs one reconcile round (its policy decides from the past only); 2 s later the minute's
``n`` containers are claimed (what was warm is warm, the rest start cold), and released
before the next minute. Resident = ready or starting after the round. The controller itself
reconciles every 5 s at no particular phase of the minute; the policy pre-warms one round plus
a start ahead, so one round at the minute's start gives the same cold claims
(tests/warmpool/test_tracesim.py runs both).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from core.errors import UserError
from warmpool.backends.sim import SimBackend
from warmpool.coldstart import ColdStartModel
from warmpool.controller import Controller
from warmpool.planner import ForesightPolicy
from warmpool.policy import Policy, load_policy
from warmpool.reconcile import WarmPolicy

TRACE_FILES = ("azure2019_functions_inv.csv.gz", "azure2019_functions_run.csv.gz", "azure2019_functions_mem.csv.gz")
DEMAND_MODELS = ("single", "concurrency")


@dataclass(frozen=True)
class Trace:
    """Per-minute invocation counts of F functions over T minutes plus their size."""

    function_ids: tuple[str, ...]
    invocations: np.ndarray  # int64 [F, T]
    duration_seconds: np.ndarray  # float [F]
    memory_mb: np.ndarray  # float [F]

    @property
    def n_functions(self) -> int:
        return self.invocations.shape[0]

    def demand(self, model: str) -> np.ndarray:
        """Containers needed per function and minute under ``model`` (see module doc)."""
        c = self.invocations
        if model == "single":
            return (c > 0).astype(np.int64)
        if model == "concurrency":
            d = self.duration_seconds[:, None]
            n = np.maximum(1, np.ceil(c * d / 60.0)).astype(np.int64)
            return np.where(c > 0, np.minimum(c, n), 0).astype(np.int64)
        raise UserError(f"unknown demand model {model!r}; known: {', '.join(DEMAND_MODELS)}")

    def head(self, n: int) -> "Trace":
        return Trace(self.function_ids[:n], self.invocations[:n], self.duration_seconds[:n], self.memory_mb[:n])


def load_trace(directory: str | Path, limit: int | None = None) -> Trace:
    """Read a folder holding ``azure2019_functions_{inv,run,mem}.csv.gz`` (original schema)."""
    import pandas as pd

    directory = Path(directory)
    missing = [f for f in TRACE_FILES if not (directory / f).exists()]
    if missing:
        raise UserError(
            f"trace folder {directory} lacks {', '.join(missing)}; it needs the Azure Functions 2019 "
            "files azure2019_functions_{inv,run,mem}.csv.gz"
        )
    inv = pd.read_csv(directory / TRACE_FILES[0])
    run = pd.read_csv(directory / TRACE_FILES[1])
    mem = pd.read_csv(directory / TRACE_FILES[2])
    if limit is not None:
        inv = inv.head(limit)
    minute_cols = [c for c in inv.columns if c.startswith("minute_")]
    if not minute_cols or "HashFunction" not in inv.columns:
        raise UserError(f"{directory / TRACE_FILES[0]}: expected HashFunction and minute_1.. columns")
    minute_cols.sort(key=lambda c: int(c.split("_")[1]))
    dur = run.drop_duplicates("HashFunction").set_index("HashFunction")["Average"]
    memmb = mem.drop_duplicates("HashApp").set_index("HashApp")["AverageAllocatedMb"]
    d = inv["HashFunction"].map(dur)
    m = inv["HashApp"].map(memmb)
    # A function without a duration row runs "short"; without a memory row, the median app.
    d = d.fillna(1000.0).to_numpy(float) / 1000.0
    m = m.fillna(float(memmb.median()) if len(memmb) else 128.0).to_numpy(float)
    counts = inv[minute_cols].fillna(0).to_numpy(np.int64)
    return Trace(tuple(inv["HashFunction"].astype(str)), counts, d, m)


@dataclass
class ReplayResult:
    policy: str
    demand: str
    invoked_minutes: int
    cold_minutes: int
    invocations: int
    cold_starts: int
    p75_cold_rate_pct: float
    wasted_gb_min: float
    wasted_pct_of_fixed10: float = float("nan")
    idle_container_minutes: int = 0  # idle resident containers summed over the minutes (wasted_gb_min without the sizes)

    @property
    def cold_pct_invoked_minutes(self) -> float:
        return 100.0 * self.cold_minutes / max(1, self.invoked_minutes)

    @property
    def cold_pct_invocations(self) -> float:
        return 100.0 * self.cold_starts / max(1, self.invocations)

    def row(self) -> dict:
        return {
            "policy": self.policy,
            "demand": self.demand,
            "cold_pct_invoked_minutes": round(self.cold_pct_invoked_minutes, 4),
            "cold_pct_invocations": round(self.cold_pct_invocations, 4),
            "p75_cold_rate_pct": round(self.p75_cold_rate_pct, 4),
            "wasted_gb_min": round(self.wasted_gb_min, 2),
            "wasted_pct_of_fixed10": round(self.wasted_pct_of_fixed10, 2),
        }


CSV_COLUMNS = (
    "policy",
    "demand",
    "cold_pct_invoked_minutes",
    "cold_pct_invocations",
    "p75_cold_rate_pct",
    "wasted_gb_min",
    "wasted_pct_of_fixed10",
)


def write_csv(results: Sequence[ReplayResult], path: str | Path) -> None:
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        w.writeheader()
        for r in results:
            w.writerow(r.row())


def format_table(results: Sequence[ReplayResult]) -> str:
    head = f"{'policy':<22}{'demand':<13}{'cold%min':>9}{'cold%inv':>9}{'p75%':>8}{'wasted GB-min':>15}{'vs fixed10':>11}"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.policy:<22}{r.demand:<13}{r.cold_pct_invoked_minutes:>9.2f}{r.cold_pct_invocations:>9.2f}"
            f"{r.p75_cold_rate_pct:>8.2f}{r.wasted_gb_min:>15.0f}{r.wasted_pct_of_fixed10:>10.0f}%"
        )
    return "\n".join(lines)


# --- driving the controller -------------------------------------------------------------

T0 = 1_700_000_040.0  # simulated start: a minute boundary, so bin t is minute t
CLAIM_AT, RELEASE_AT = 2.0, 59.0  # seconds into the minute; starts of pre-warmed containers (< 1.1 s) are done by then
NO_CAP = 1_000_000_000  # the reference model caps no pool


class SimClock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def pool_name(f: int) -> str:
    return f"fn-{f}"


def trace_config(template: Policy, trace: Trace, functions: Sequence[int]) -> Policy:
    """One pool per function: every setting of the template's first pool (TTL, idle model,
    lead, min_warm, runtime class) and its memory budget; the function's memory as the
    container's memory, the sim backend, and no max_warm or max_cold_per_minute cap."""
    tpl = template.pools[0]
    pools = []
    for f in functions:
        name = pool_name(f)
        res = {**tpl.template.resources, "memory": f"{float(trace.memory_mb[f]):.3f}Mi"}
        pools.append(dataclasses.replace(
            tpl, name=name, namespace="trace", workload=name, series=f"trace/{name}", backend="sim",
            template=dataclasses.replace(tpl.template, resources=res), max_warm=max(tpl.max_warm, NO_CAP),
            max_cold_per_minute=NO_CAP,
        ))
    return Policy(tuple(pools), template.runtime_classes, template.memory_budget)


@dataclass(frozen=True)
class SimPolicy:
    """A policy to replay: its label, the WarmPoolPolicy whose first pool is the template of
    every function's pool, and how to build the controller's ``WarmPolicy`` for the trace
    config (``future`` maps pool names to demand rows, for the oracle only)."""

    label: str
    template: Policy
    build: Callable[[Policy, Mapping[str, np.ndarray]], WarmPolicy]


def _tally(ctl: Controller, sim: SimBackend, names: list[str], col: np.ndarray, t: int, clock: SimClock, out: np.ndarray) -> None:
    """One minute after its reconcile round: claims, releases, cold and idle counts.
    ``out`` columns per function: cold minutes, cold starts, idle container-minutes."""
    clock.t = T0 + 60.0 * t + CLAIM_AT
    held: list[tuple[str, str]] = []
    for i, name in enumerate(names):
        n = int(col[i])
        resident = sim.count(name)
        cold = 0
        for _ in range(n):
            r = ctl.claim(name)
            cold += r.cold_start
            held.append((name, r.container_id))
        out[i, 0] += cold > 0
        out[i, 1] += cold
        out[i, 2] += resident - (n - cold)
    clock.t = T0 + 60.0 * t + RELEASE_AT
    for name, cid in held:
        ctl.release(name, cid)


def sim_controller(trace: Trace, functions: Sequence[int], policy: SimPolicy,
                   future: Mapping[str, np.ndarray]) -> tuple[Controller, SimBackend, SimClock]:
    """One ``Controller`` for ``functions`` (one pool each) on the sim backend with a simulated
    clock at ``T0``, running ``policy``."""
    config = trace_config(policy.template, trace, functions)
    clock = SimClock(T0)
    coldstart = ColdStartModel(config.runtime_classes)
    sim = SimBackend(clock, coldstart, seed=0)
    ctl = Controller(config, None, {"sim": sim}, clock=clock, coldstart=coldstart, warm_policy=policy.build(config, future))
    return ctl, sim, clock


def simulate(trace: Trace, demand_model: str, policy: SimPolicy, progress: Callable[[Iterable], Iterable] | None = None) -> ReplayResult:
    """Replay ``policy`` on every function of ``trace`` minute by minute through one
    ``Controller`` (sim backend, simulated clock)."""
    D = trace.demand(demand_model)
    C = trace.invocations
    T = D.shape[1]
    active = [f for f in range(trace.n_functions) if D[f].any()]
    names = [pool_name(f) for f in active]
    ctl, sim, clock = sim_controller(trace, active, policy, {n: D[f] for n, f in zip(names, active)})
    out = np.zeros((len(active), 3), dtype=np.int64)
    Da = D[active]
    steps = range(T)
    for t in progress(steps) if progress else steps:
        clock.t = T0 + 60.0 * t
        ctl.step()
        _tally(ctl, sim, names, Da[:, t], t, clock, out)
    mem = trace.memory_mb[active]
    denom = C[active].sum(1) if demand_model == "concurrency" else (Da > 0).sum(1)
    rates = 100.0 * out[:, 1] / np.maximum(1, denom)
    invoked = int((D > 0).sum())
    return ReplayResult(
        policy=policy.label,
        demand=demand_model,
        invoked_minutes=invoked,
        cold_minutes=int(out[:, 0].sum()),
        invocations=int(C.sum()) if demand_model == "concurrency" else invoked,
        cold_starts=int(out[:, 1].sum()),
        p75_cold_rate_pct=float(np.percentile(rates, 75)) if len(rates) else 0.0,
        wasted_gb_min=float((out[:, 2] * mem).sum()) / 1024.0,
        idle_container_minutes=int(out[:, 2].sum()),
    )


def simulate_all(trace: Trace, demand_models: Sequence[str], policies: Sequence[SimPolicy],
                 progress: Callable[[Iterable], Iterable] | None = None) -> list[ReplayResult]:
    """Every policy under every demand model, with wasted memory relative to fixed 10 min
    (replayed in the same run when it is not among ``policies``)."""
    out: list[ReplayResult] = []
    for dm in demand_models:
        results = [simulate(trace, dm, p, progress) for p in policies]
        base = next((r for r in results if r.policy == "fixed:10"), None)
        if base is None:
            base = simulate(trace, dm, resolve_policy("fixed:10"))
        for r in results:
            r.wasted_pct_of_fixed10 = 100.0 * r.wasted_gb_min / base.wasted_gb_min if base.wasted_gb_min > 0 else math.nan
        out.extend(results)
    return out


# --- policies by name ---------------------------------------------------------------------

POLICY_NAMES = ("foresight", "seed", "fixed:MINUTES", "hybrid", "oracle")


def _seed_only(p: Policy) -> Policy:
    pools = tuple(dataclasses.replace(s, idle_model=dataclasses.replace(s.idle_model, enabled=False)) for s in p.pools)
    return dataclasses.replace(p, pools=pools)


def resolve_policy(spec: str) -> SimPolicy:
    """``foresight`` (the shipped policy with the bundled example, exactly what ``foresight
    warmpool run`` runs), ``seed`` (the same with its idle model off: forecast and decaying
    TTL only), ``fixed:MINUTES``, ``hybrid``, ``oracle``, or a WarmPoolPolicy YAML file run by
    the shipped policy."""
    from warmpool.embedded import EXAMPLE_POLICY
    from warmpool.keepalive import FixedKeepAlive, HybridHistogram, Oracle

    s = spec.strip()
    if s.endswith((".yaml", ".yml")) or Path(s).is_file():
        return SimPolicy(Path(s).stem, load_policy(s), lambda cfg, fut: ForesightPolicy(cfg))
    example = load_policy(EXAMPLE_POLICY)
    if s.startswith("fixed:"):
        try:
            m = int(s.split(":", 1)[1])
            if m < 0:
                raise ValueError
        except ValueError:
            raise UserError(f"policy {spec!r}: fixed:MINUTES needs a whole number of minutes >= 0, e.g. fixed:10") from None
        return SimPolicy(f"fixed:{m}", example, lambda cfg, fut: FixedKeepAlive(cfg, m))
    builders = {
        "foresight": (example, lambda cfg, fut: ForesightPolicy(cfg)),
        "seed": (_seed_only(example), lambda cfg, fut: ForesightPolicy(cfg, name="seed")),
        "hybrid": (example, lambda cfg, fut: HybridHistogram(cfg)),
        "oracle": (example, lambda cfg, fut: Oracle(cfg, fut, int(T0 // 60.0))),
    }
    if s not in builders:
        raise UserError(f"unknown policy {spec!r}; known: {', '.join(POLICY_NAMES)} or a WarmPoolPolicy YAML file")
    tpl, build = builders[s]
    return SimPolicy(s, tpl, build)
