"""Fleet scale: how fast do per-series fits go on the engines, what does Ray cost, and what
would 100,000 workloads need?

    .venv/bin/python bench/fleet_scale.py [--fits 80] [--rounds 12] [--workloads 10000] [--tag NAME]
    .venv/bin/python bench/fleet_scale.py --quick   # smoke run: 4 fits of 3 days, 1 round, temp folder

Workloads are resampled from the real Azure VM CPU traces (``$FORESIGHT_DATA_DIR/cpu``, as in
bench/trainer_freshness.py): a random base trace, time offset and amplitude scale, 14 days of
300 s history each, fitted with ``models: [auto]`` (the production default).

Measured, each on the same ``--fits`` workloads (warm workers: a first small map loads the
model libraries in every worker and is not timed). Engines are compared in pairs, side by side:
``--rounds`` rounds of one map on each, the order rotating, medians counted; the machine is
shared and a minute's noise here is 10-20%, so an overhead is the median of per-round ratios:
- fits per second: local in this process vs Ray with 1 worker CPU; a local pool of 2 processes
  vs Ray with 2 (a local Ray started by the engine); the speed-up of 2 Ray workers over 1; Ray's
  overhead against local with the same number of (warm) processes; per fit, the wall time, the
  CPU time and the minor page faults of the worker process (equal CPU with more wall time =
  waiting for a core, not more work; faults: see forecaster.engines.base.prepare_worker); and
  Ray with 1 worker at Ray's own defaults (workers reniced to 15, the dashboard on) vs local;
- the refresh of ``--workloads`` fitted workloads in one trainer process (refreshes stay in the
  trainer: they need its states and its store), and the trainer's memory per workload;
- the bytes of one fitted state (what a Ray worker sends back per fit);
- Redis publishes per second on a real redis-server when one is installed.
Then a projection to 100,000 workloads and N workers from these per-worker figures.
Results: bench/results/fleet_scale.json and .md (fleet_scale.TAG.* with --tag, e.g. for a run
on a loaded machine that must not replace the idle one's).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

# one BLAS thread in this process too, as in every pool process and Ray worker: "local, 1
# process" then differs from "ray, 1 worker" by the engine alone
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import add_quick_args, results_dir, save_json  # noqa: E402
from bench.trainer_freshness import load_bases, rss_bytes  # noqa: E402
from core.store import MemoryForecastStore  # noqa: E402
from forecaster.engines.local import LocalEngine  # noqa: E402
from forecaster.training import Trainer, fit_item  # noqa: E402

STEP = 300.0
HISTORY_POINTS = 14 * 288


def workloads(bases: list[np.ndarray], n: int, seed: int, now: float, points: int = HISTORY_POINTS) -> list[tuple]:
    """Fit items (series_id, ts, values, now, cpu_request_cores) resampled from the real traces."""
    rng = np.random.default_rng(seed)
    ts = now - STEP * np.arange(points)[::-1]
    out = []
    for i in range(n):
        b = bases[rng.integers(len(bases))]
        start = int(rng.integers(0, len(b) - points))
        vals = b[start : start + points] * float(np.exp(rng.normal(0.0, 0.5)))
        out.append((f"bench/w{i}", ts, vals, now, 1.0))
    return out


def _warm(engine, trainer: Trainer, items: list) -> None:
    engine.map(fit_item, items[: 2 * engine.workers], context=trainer.detached())  # load the model libraries


def _timed(engine, trainer: Trainer, items: list) -> tuple[float, object, list]:
    t0 = time.perf_counter()
    got = engine.map(fit_item, items, context=trainer.detached())
    wall = time.perf_counter() - t0
    assert len(got) == len(items) and not any(isinstance(g, Exception) for g in got)
    return wall, engine.last_stats, got


def paired(engines: dict, trainer: Trainer, items: list, rounds: int) -> tuple[list[dict], dict, dict]:
    """The same map on every engine of ``engines`` (label -> engine), round after round, the
    order rotating: what one engine would gain from a quiet minute the other gets as often.
    Per engine the median round counts; the ratio of two engines is the median of their
    per-round ratios (both measured within the same minute)."""
    for e in engines.values():
        _warm(e, trainer, items)
    walls: dict[str, list[float]] = {k: [] for k in engines}
    stats: dict[str, list] = {k: [] for k in engines}
    got: dict[str, list] = {}
    labels = list(engines)
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            wall, st, got[label] = _timed(engines[label], trainer, items)
            walls[label].append(wall)
            stats[label].append(st)
        print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {len(items) / walls[k][-1]:.2f} fits/s" for k in labels), flush=True)
    rows = []
    for label, e in engines.items():
        n = len(items)
        med = float(np.median(walls[label]))
        sts = stats[label]
        row = {"engine": label, "workers": e.workers, "fits": n, "rounds": rounds, "seconds": med,
               "fits_per_second": n / med, "fits_per_second_per_worker": n / med / e.workers,
               "fits_per_second_rounds": [n / w for w in walls[label]],
               "seconds_per_fit": float(np.median([st.task_seconds for st in sts])) / n,
               "cpu_seconds_per_fit": float(np.median([st.task_cpu_seconds for st in sts])) / n,
               "page_faults_per_fit": float(np.median([st.task_page_faults for st in sts])) / n,
               "batches": sts[-1].batches, "batch_size": sts[-1].batch_size,
               "engine_overhead": float(np.median([st.overhead() for st in sts]))}
        print(f"  {label:<30} {row['fits_per_second']:6.2f} fits/s ({row['fits_per_second_per_worker']:.2f} per worker), "
              f"{row['seconds_per_fit']:.3f} s per fit ({row['cpu_seconds_per_fit']:.3f} s CPU, "
              f"{row['page_faults_per_fit']:.0f} page faults), {row['batches']} batches of {row['batch_size']}, "
              f"{100 * row['engine_overhead']:.1f}% of the workers' time outside the fits", flush=True)
        rows.append(row)
    ratios = {}
    for a in labels:
        for b in labels:
            if a != b:
                r = np.asarray(walls[a]) / np.asarray(walls[b])
                ratios[f"{a} / {b}"] = float(np.median(r))
                ratios[f"{a} / {b}, quartiles"] = [float(np.quantile(r, 0.25)), float(np.quantile(r, 0.75))]
    return rows, ratios, got


PAIRINGS = (
    ("ray, 1 worker", 1, {}, "local, 1 process", 1),
    ("ray, 2 workers", 2, {}, "local pool, 2 processes", 2),
    ("ray, 1 worker, Ray's defaults", 1, {"worker_niceness": None, "dashboard": True}, "local, 1 process", 1),
)


def engines_bench(trainer: Trainer, items: list, rounds: int, pairings=PAIRINGS) -> tuple[list[dict], dict, list]:
    """Three paired runs: 1 process (local in this process vs a Ray worker), 2 processes (a
    local pool vs 2 Ray workers), and Ray's own default settings vs local, 1 process."""
    from forecaster.engines.ray_engine import RayEngine

    rows: list[dict] = []
    ratios: dict[str, float] = {}
    seen: set[str] = set()
    for label, cpus, kwargs, local_label, jobs in pairings:
        print(f"fits, {label} vs {local_label}, paired:", flush=True)
        engine, local = RayEngine(num_cpus=cpus, **kwargs), LocalEngine(jobs)
        try:
            (local_row, ray_row), q, got = paired({local_label: local, label: engine}, trainer, items, rounds)
        finally:
            engine.close()
            local.close()
        ray_row["same_models_as_local"] = [g.model_name for g in got[label]] == [s.model_name for s in got[local_label]]
        if local_label in seen:  # a second pairing with the same local engine: its figure stays with the Ray row
            ray_row["paired_local_fits_per_second"] = local_row["fits_per_second"]
        else:
            seen.add(local_label)
            rows.append(local_row)
        rows.append(ray_row)
        ratios.update(q)
    return rows, ratios, got[local_label]


def refresh_bench(trainer: Trainer, states: list, items: list, n: int) -> dict:
    """Every one of ``n`` workloads refreshed once by one trainer process (CPU only: no source)."""
    store = MemoryForecastStore()
    tr = Trainer(store, models=trainer.candidates, horizon=trainer.horizon, quantiles=trainer.quantiles)
    rss0 = rss_bytes()
    blobs = [pickle.dumps(s) for s in states]
    for i in range(n):
        st = pickle.loads(blobs[i % len(blobs)])  # a workload's own copy, as after a remote fit
        st.series_id = f"bench/r{i}"
        tr.adopt(st)
    print(f"  {n} fitted states installed", flush=True)
    rss1 = rss_bytes()
    t0 = time.perf_counter()
    for i in range(n):
        sid, ts, vals, now, _ = items[i % len(items)]
        tr.refresh(f"bench/r{i}", ts, vals, now=now + STEP, meta={"cpu_request_cores": 1.0})
        if (i + 1) % 2000 == 0:
            print(f"  refreshed {i + 1}/{n} in {time.perf_counter() - t0:.1f} s", flush=True)
    secs = time.perf_counter() - t0
    return {"workloads": n, "seconds": secs, "ms_per_refresh": 1000 * secs / n,
            "trainer_rss_per_workload_bytes": (rss1 - rss0) / n, "published": len(store.latest_many(f"bench/r{i}" for i in range(n)))}


def redis_bench(fc_sample, n: int = 3000) -> dict | None:
    from tests import stack

    if not stack.have("redis-server"):
        return None
    from dataclasses import replace

    from core.store import open_store

    srv = stack.start_redis()
    try:
        store = open_store(srv.url)
        t0 = time.perf_counter()
        for i in range(n):
            store.publish(replace(fc_sample, series_id=f"bench/p{i}"))
        secs = time.perf_counter() - t0
        store.close()
    finally:
        srv.stop()
    return {"publishes": n, "seconds": secs, "publishes_per_second": n / secs}


def projection(rows: list[dict], refresh: dict, redis: dict | None, fits_per_day: float = 1.0) -> list[dict]:
    ray1 = next(r for r in rows if r["engine"] == "ray, 1 worker")
    per_worker = ray1["fits_per_second"]  # one Ray worker = one core
    out = []
    for w in (10_000, 100_000):
        for workers in (1, 2, 8, 32):
            out.append({"workloads": w, "ray_workers": workers,
                        "daily_refit_minutes": w * fits_per_day / (per_worker * workers * 0.95) / 60,
                        "refresh_seconds_one_trainer": w * refresh["ms_per_refresh"] / 1000,
                        "redis_seconds_per_refresh_round": (w / redis["publishes_per_second"]) if redis else None,
                        "prometheus_queries_per_second_at_60s": w / 60.0})
    return out


def write_markdown(payload: dict, out: Path) -> Path:
    lines = ["| engine | workers | fits/s (median of rounds) | fits/s per worker | s per fit (in the worker) | CPU s per fit | "
             "page faults per fit | workers' time outside fits |", "|---|---|---|---|---|---|---|---|"]
    for r in payload["engines"]:
        lines.append(f"| {r['engine']} | {r['workers']} | {r['fits_per_second']:.2f} | "
                     f"{r['fits_per_second_per_worker']:.2f} | {r['seconds_per_fit']:.3f} | {r['cpu_seconds_per_fit']:.3f} | "
                     f"{r['page_faults_per_fit']:.0f} | {100 * r['engine_overhead']:.1f}% |")
    s = payload["summary"]
    defaults = s["ray_defaults_overhead_vs_local_1"]
    lines += ["", f"- Ray 2 workers vs 1: {s['ray_speedup_2_vs_1']:.2f}x",
              f"- Ray overhead vs local, same processes (median of paired rounds): 1 process {100 * s['ray_overhead_vs_local_1']:+.1f}%, "
              f"2 processes {100 * s['ray_overhead_vs_local_2']:+.1f}% (warm processes on both sides); "
              "Ray's default settings vs local, 1 process: " + ("not run" if defaults is None else f"{100 * defaults:+.1f}%"),
              "- quartiles of the per-round time ratios: " + "; ".join(
                  f"{k} {q[0]:.2f}-{q[1]:.2f}" for k, q in s["paired_ratio_quartiles"].items() if k.startswith("ray")),
              f"- load average before/after (the machine is shared): {s['load_average_before_after']}",
              f"- refresh of {payload['refresh']['workloads']} workloads in one trainer: {payload['refresh']['seconds']:.1f} s "
              f"({payload['refresh']['ms_per_refresh']:.2f} ms each)",
              f"- fitted state shipped back per fit: {s['state_pickle_bytes']/1000:.0f} kB; trainer memory per workload "
              f"{payload['refresh']['trainer_rss_per_workload_bytes']/1000:.0f} kB", "",
              "| workloads | Ray workers | daily refit (min) | refresh, one trainer (s) | Redis per round (s) | Prometheus q/s |",
              "|---|---|---|---|---|---|"]
    for p in payload["projection"]:
        red = f"{p['redis_seconds_per_refresh_round']:.1f}" if p["redis_seconds_per_refresh_round"] is not None else "-"
        lines.append(f"| {p['workloads']:,} | {p['ray_workers']} | {p['daily_refit_minutes']:.1f} | "
                     f"{p['refresh_seconds_one_trainer']:.0f} | {red} | {p['prometheus_queries_per_second_at_60s']:.0f} |")
    path = out / f"{payload['name']}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fits", type=int, default=80, help="workloads fitted per map (default 80)")
    ap.add_argument("--workloads", type=int, default=10_000, help="workloads refreshed (default 10000)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=12, help="paired rounds per comparison; medians count (default 12)")
    ap.add_argument("--tag", default="", help="write fleet_scale.TAG.{json,md} instead of fleet_scale.{json,md}")
    add_quick_args(ap, "4 fits of 3 days of history, 1 round, 200 refreshes, 200 Redis publishes")
    args = ap.parse_args()
    points = HISTORY_POINTS
    if args.quick:
        args.fits, args.rounds, args.workloads, points = 4, 1, 200, 3 * 288
    out = results_dir(args)
    if args.tag and not args.tag.replace("-", "").replace("_", "").isalnum():
        ap.error(f"--tag {args.tag!r}: letters, digits, - and _ only (it becomes part of a file name)")
    name = f"fleet_scale.{args.tag}" if args.tag else "fleet_scale"
    t_all = time.perf_counter()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    bases = load_bases(args.quick)
    now = float(np.floor(time.time() / STEP) * STEP)
    items = workloads(bases, args.fits, args.seed, now, points)
    trainer = Trainer(None, models=("auto",), horizon=12, quantiles=(0.5, 0.9), step_seconds=STEP)
    print(f"{len(bases)} base traces; {args.fits} resampled workloads of {points} points", flush=True)
    load0 = os.getloadavg()
    # quick: not the third pairing (Ray's dashboard alone takes a loaded machine ~15 s to start)
    rows, ratios, states = engines_bench(trainer, items, args.rounds, PAIRINGS[:2] if args.quick else PAIRINGS)
    by = {r["engine"]: r for r in rows}
    r1, r2 = by["ray, 1 worker"], by["ray, 2 workers"]
    print(f"refresh of {args.workloads} workloads (one trainer process):", flush=True)
    refresh = refresh_bench(trainer, states, items, args.workloads)
    sample = Trainer(MemoryForecastStore(), models=("auto",))
    sample.adopt(pickle.loads(pickle.dumps(states[0])))
    fc_sample = sample.refresh(states[0].series_id, items[0][1], items[0][2], now=now + STEP)
    redis = redis_bench(fc_sample, 200 if args.quick else 3000)
    summary = {
        "ray_speedup_2_vs_1": r2["fits_per_second"] / r1["fits_per_second"],
        "ray_overhead_vs_local_1": ratios["ray, 1 worker / local, 1 process"] - 1,
        "ray_overhead_vs_local_2": ratios["ray, 2 workers / local pool, 2 processes"] - 1,
        "ray_defaults_overhead_vs_local_1": (ratios["ray, 1 worker, Ray's defaults / local, 1 process"] - 1
                                             if "ray, 1 worker, Ray's defaults / local, 1 process" in ratios else None),
        "paired_ratio_quartiles": {k.removesuffix(", quartiles"): v for k, v in ratios.items() if k.endswith("quartiles")},
        "load_average_before_after": [load0, os.getloadavg()],
        "state_pickle_bytes": float(np.mean([len(pickle.dumps(s)) for s in states[:20]])),
    }
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    payload = {"name": name, "settings": settings, "engines": rows, "summary": summary, "refresh": refresh, "redis": redis,
               "projection": projection(rows, refresh, redis), "total_seconds": time.perf_counter() - t_all}
    print(f"wrote {save_json(name, payload, out)} and {write_markdown(payload, out)}")
    print(out.joinpath(f"{name}.md").read_text())


if __name__ == "__main__":
    main()
