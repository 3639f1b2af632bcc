"""Trace replay of keep-alive / pre-warm policies on the Azure Functions 2019 trace.

The measurement model is the one in ``shared/reference/warm-pools.md`` ("Measuring a
policy"), so figures compare with the reference table:

- one step = one minute; demand ``n`` containers in minute ``t``:
  ``single``: 1 if the minute has any invocation; ``concurrency``:
  ``min(c, max(1, ceil(c * d / 60)))`` for ``c`` invocations of average duration ``d`` s;
- each container remembers its last busy minute ``u`` (offset ``o = t - u``); a policy decides
  which containers are resident in minute ``t`` from what it saw up to ``t - 1``;
- resident containers are used most-recently-used first; ``cold = max(0, n - resident)``;
  pools start empty (every function's first invocation is cold under any policy);
- wasted memory = idle resident containers x the app's AverageAllocatedMb, per minute.

A policy object is built once per function (``policy.for_function(fn)``) and answers
``resident(t, offsets) -> int | list[bool]`` before minute ``t`` is seen, then
``observe(t, n)`` after it (and, if it has the method, ``observe_invocations(t, c)`` with the
minute's invocation count just before). An int ``R`` means "the R most recently used containers" (and,
once the function has run at least once, R above the number of known containers pre-warms
new ones). Cold starts are counted per container; ``cold_pct_invocations`` counts one cold
invocation per cold container start (in the single model: one per cold minute).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from forecaster.errors import UserError

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


class FunctionPolicy(Protocol):
    def resident(self, t: int, offsets: Sequence[int]) -> "int | Sequence[bool]": ...

    def observe(self, t: int, n: int) -> None: ...


class TracePolicy(Protocol):
    name: str

    def for_function(self, fn: "FunctionView") -> FunctionPolicy: ...


@dataclass(frozen=True)
class FunctionView:
    """What a policy may know about a function up front: its size, never its future."""

    index: int
    memory_mb: float
    duration_seconds: float
    minutes: int


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


class FunctionSim:
    """The containers of one function under one policy, advanced one minute at a time."""

    __slots__ = ("fp", "containers", "cold_minutes", "cold_starts", "idle")

    def __init__(self, fp: FunctionPolicy):
        self.fp = fp
        self.containers: list[int] = []  # last busy minute per container, most recent first
        self.cold_minutes = self.cold_starts = self.idle = 0

    def step(self, t: int, n: int, invocations: int | None = None) -> None:
        containers = self.containers
        res_idx: list[int] = []
        new_warm = 0
        if containers:
            ans = self.fp.resident(t, [t - u for u in containers])
            if isinstance(ans, (bool, np.bool_)):
                raise TypeError("resident() returns an int count or a list of booleans")
            if isinstance(ans, (int, np.integer)):
                r = max(0, int(ans))
                res_idx = list(range(min(r, len(containers))))
                new_warm = max(0, r - len(containers))
            else:
                res_idx = [i for i, ok in enumerate(ans) if ok]
        resident = len(res_idx) + new_warm
        if n > 0:
            warm = min(n, resident)
            cold = n - warm
            used_known = res_idx[:warm]
            warm_new = warm - len(used_known)
            if cold:
                self.cold_minutes += 1
                self.cold_starts += cold
            res_set = set(res_idx)
            # a cold start reloads the most recent non-resident containers, then new ones
            cold_known = [i for i in range(len(containers)) if i not in res_set][:cold]
            cold_new = cold - len(cold_known)
            used = set(used_known) | set(cold_known)
            self.idle += resident - warm
            self.containers = [t] * (len(used) + warm_new + cold_new) + [
                u for i, u in enumerate(containers) if i not in used
            ]
        else:
            self.idle += resident
        if invocations is not None and hasattr(self.fp, "observe_invocations"):
            self.fp.observe_invocations(t, invocations)
        self.fp.observe(t, n)


def replay_function(fp: FunctionPolicy, demand_row: np.ndarray):
    """Replay one function alone. Returns (cold_minutes, cold_starts, idle_container_minutes)."""
    sim = FunctionSim(fp)
    for t in range(len(demand_row)):
        sim.step(t, int(demand_row[t]))
    return sim.cold_minutes, sim.cold_starts, sim.idle


def replay(
    trace: Trace,
    demand_model: str,
    policy: TracePolicy,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> ReplayResult:
    """Replay every function minute by minute (time is the outer loop, so a policy may keep
    state shared by all functions, e.g. a memory price, and still see only the past)."""
    D = trace.demand(demand_model)
    C = trace.invocations
    T = D.shape[1]
    invoked_minutes = int((D > 0).sum())
    invocations_total = int(C.sum()) if demand_model == "concurrency" else invoked_minutes
    active = [f for f in range(trace.n_functions) if D[f].any()]
    sims: dict[int, FunctionSim] = {}
    oracle = getattr(policy, "oracle", False)
    if not oracle:
        for f in active:
            fv = FunctionView(f, float(trace.memory_mb[f]), float(trace.duration_seconds[f]), T)
            sims[f] = FunctionSim(policy.for_function(fv))
    begin = getattr(policy, "begin_minute", None)
    end = getattr(policy, "end_minute", None)
    Dl = D.tolist()
    Cl = C.tolist()
    steps = range(T) if not oracle else range(0)
    for t in progress(steps) if progress else steps:
        if begin:
            begin(t)
        for f in active:
            n = Dl[f][t]
            sim = sims[f]
            if n or sim.containers:
                sim.step(t, n, Cl[f][t])
        if end:
            end(t)
    cold_minutes = cold_starts = 0
    wasted_mb_min = 0.0
    rates: list[float] = []
    for f in active:
        if oracle:
            cm, cs, idle = policy.exact(D[f])
        else:
            s = sims[f]
            cm, cs, idle = s.cold_minutes, s.cold_starts, s.idle
        cold_minutes += cm
        cold_starts += cs
        wasted_mb_min += idle * trace.memory_mb[f]
        denom = int(C[f].sum()) if demand_model == "concurrency" else int((D[f] > 0).sum())
        rates.append(100.0 * cs / max(1, denom))
    return ReplayResult(
        policy=policy.name,
        demand=demand_model,
        invoked_minutes=invoked_minutes,
        cold_minutes=cold_minutes,
        invocations=invocations_total,
        cold_starts=cold_starts,
        p75_cold_rate_pct=float(np.percentile(rates, 75)) if rates else 0.0,
        wasted_gb_min=wasted_mb_min / 1024.0,
    )


def replay_all(
    trace: Trace,
    demand_models: Sequence[str],
    policies: Sequence[TracePolicy],
    progress: Callable[[Iterable], Iterable] | None = None,
) -> list[ReplayResult]:
    """Every policy under every demand model, plus wasted memory relative to fixed 10 min
    (computed in the same run even when fixed:10 is not among ``policies``)."""
    from warmpool.keepalive import FixedKeepAlive

    out: list[ReplayResult] = []
    for dm in demand_models:
        results = [replay(trace, dm, p, progress) for p in policies]
        base = next((r for r, p in zip(results, policies) if isinstance(p, FixedKeepAlive) and p.minutes == 10), None)
        if base is None:
            base = replay(trace, dm, FixedKeepAlive(10))
        for r in results:
            r.wasted_pct_of_fixed10 = 100.0 * r.wasted_gb_min / base.wasted_gb_min if base.wasted_gb_min > 0 else math.nan
        out.extend(results)
    return out


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
