"""Fleet scale: how fast do per-series fits go on the engines, what does Ray cost, and what
would 100,000 workloads need?

    .venv/bin/python bench/fleet_scale.py [--fits 100] [--workloads 10000] [--tag NAME]

Workloads are resampled from the real Azure VM CPU traces (``$FORESIGHT_DATA_DIR/cpu``, as in
bench/trainer_freshness.py): a random base trace, time offset and amplitude scale, 14 days of
300 s history each, fitted with ``models: [auto]`` (the production default).

Measured, each on the same ``--fits`` workloads (warm workers: a first small map loads the
model libraries in every worker and is not timed; the best of ``--repeat`` maps counts):
- fits per second: local in this process (1 process), local pool of 2 processes, Ray with 1
  and with 2 worker CPUs (a local Ray started by the engine); the speed-up of 2 Ray workers over
  1; Ray's overhead against local with the same number of (warm) processes; per fit, the wall
  time and the CPU time of the worker process (equal CPU with more wall time = waiting for a
  core, not more work); and Ray with 1 worker at Ray's own defaults (workers reniced to 15, the
  dashboard on) beside the engine's settings (forecaster/engines/ray_engine.py);
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

from bench.common import RESULTS, save_json  # noqa: E402
from bench.trainer_freshness import load_bases, rss_bytes  # noqa: E402
from forecaster.engines.local import LocalEngine  # noqa: E402
from forecaster.store import MemoryForecastStore  # noqa: E402
from forecaster.training import Trainer, fit_item  # noqa: E402

STEP = 300.0
HISTORY_POINTS = 14 * 288


def workloads(bases: list[np.ndarray], n: int, seed: int, now: float) -> list[tuple]:
    """Fit items (series_id, ts, values, now, cpu_request_cores) resampled from the real traces."""
    rng = np.random.default_rng(seed)
    ts = now - STEP * np.arange(HISTORY_POINTS)[::-1]
    out = []
    for i in range(n):
        b = bases[rng.integers(len(bases))]
        start = int(rng.integers(0, len(b) - HISTORY_POINTS))
        vals = b[start : start + HISTORY_POINTS] * float(np.exp(rng.normal(0.0, 0.5)))
        out.append((f"bench/w{i}", ts, vals, now, 1.0))
    return out


def timed_map(engine, trainer: Trainer, items: list, label: str, repeat: int) -> dict:
    """The best of ``repeat`` timed maps (the machine is shared: the best is the least disturbed)."""
    engine.map(fit_item, items[: 2 * engine.workers], context=trainer.detached())  # warm the workers
    wall, st = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = engine.map(fit_item, items, context=trainer.detached())
        if time.perf_counter() - t0 < wall:
            wall, st = time.perf_counter() - t0, engine.last_stats
    assert len(got) == len(items) and not any(isinstance(g, Exception) for g in got)
    row = {"engine": label, "workers": engine.workers, "fits": len(items), "seconds": wall,
           "fits_per_second": len(items) / wall, "fits_per_second_per_worker": len(items) / wall / engine.workers,
           "seconds_per_fit": st.task_seconds / len(items), "cpu_seconds_per_fit": st.task_cpu_seconds / len(items),
           "batches": st.batches, "batch_size": st.batch_size, "engine_overhead": st.overhead()}
    print(f"  {label:<22} {row['fits_per_second']:6.2f} fits/s ({row['fits_per_second_per_worker']:.2f} per worker), "
          f"{st.task_seconds / len(items):.3f} s per fit ({st.task_cpu_seconds / len(items):.3f} s CPU), "
          f"{st.batches} batches of {st.batch_size}, "
          f"{100 * st.overhead():.1f}% of the workers' time outside the fits", flush=True)
    return row, got


def engines_bench(trainer: Trainer, items: list, repeat: int) -> tuple[list[dict], list]:
    from forecaster.engines.ray_engine import RayEngine

    rows = []
    print("fits per engine:", flush=True)
    row, states = timed_map(LocalEngine(1), trainer, items, "local, 1 process", repeat)
    rows.append(row)
    pool = LocalEngine(2)
    try:
        row, _ = timed_map(pool, trainer, items, "local pool, 2 processes", repeat)
        rows.append(row)
    finally:
        pool.close()
    for cpus, label, kwargs in ((1, "ray, 1 worker, Ray's defaults", {"worker_niceness": None, "dashboard": True}),
                                (1, "ray, 1 worker", {}), (2, "ray, 2 workers", {})):
        engine = RayEngine(num_cpus=cpus, **kwargs)
        try:
            row, got = timed_map(engine, trainer, items, label, repeat)
            row["same_models_as_local"] = [g.model_name for g in got] == [s.model_name for s in states]
            rows.append(row)
        finally:
            engine.close()
    return rows, states


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
    import tempfile
    from dataclasses import replace

    from forecaster.store import open_store

    srv = stack.start_redis(Path(tempfile.mkdtemp(prefix="fleet-redis")))
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


def write_markdown(payload: dict) -> Path:
    lines = ["| engine | workers | fits/s | fits/s per worker | s per fit (in the worker) | CPU s per fit | "
             "workers' time outside fits |", "|---|---|---|---|---|---|---|"]
    for r in payload["engines"]:
        lines.append(f"| {r['engine']} | {r['workers']} | {r['fits_per_second']:.2f} | "
                     f"{r['fits_per_second_per_worker']:.2f} | {r['seconds_per_fit']:.3f} | {r['cpu_seconds_per_fit']:.3f} | "
                     f"{100 * r['engine_overhead']:.1f}% |")
    s = payload["summary"]
    lines += ["", f"- Ray 2 workers vs 1: {s['ray_speedup_2_vs_1']:.2f}x",
              f"- Ray overhead vs local, same processes: 1 process {100 * s['ray_overhead_vs_local_1']:+.1f}%, "
              f"2 processes {100 * s['ray_overhead_vs_local_2']:+.1f}% (warm processes on both sides); "
              f"Ray's default settings vs local, 1 process: {100 * s['ray_defaults_overhead_vs_local_1']:+.1f}%",
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
    path = RESULTS / f"{payload['name']}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fits", type=int, default=100, help="workloads fitted per engine (default 100)")
    ap.add_argument("--workloads", type=int, default=10_000, help="workloads refreshed (default 10000)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--repeat", type=int, default=2, help="timed maps per engine; the best counts (default 2)")
    ap.add_argument("--tag", default="", help="write fleet_scale.TAG.{json,md} instead of fleet_scale.{json,md}")
    args = ap.parse_args()
    if args.tag and not args.tag.replace("-", "").replace("_", "").isalnum():
        ap.error(f"--tag {args.tag!r}: letters, digits, - and _ only (it becomes part of a file name)")
    name = f"fleet_scale.{args.tag}" if args.tag else "fleet_scale"
    t_all = time.perf_counter()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    bases = load_bases()
    now = float(np.floor(time.time() / STEP) * STEP)
    items = workloads(bases, args.fits, args.seed, now)
    trainer = Trainer(None, models=("auto",), horizon=12, quantiles=(0.5, 0.9), step_seconds=STEP)
    print(f"{len(bases)} base traces; {args.fits} resampled workloads of {HISTORY_POINTS} points", flush=True)
    load0 = os.getloadavg()
    rows, states = engines_bench(trainer, items, args.repeat)
    by = {r["engine"]: r for r in rows}
    l1, l2 = by["local, 1 process"], by["local pool, 2 processes"]
    r1, r2, r0 = by["ray, 1 worker"], by["ray, 2 workers"], by["ray, 1 worker, Ray's defaults"]
    print(f"refresh of {args.workloads} workloads (one trainer process):", flush=True)
    refresh = refresh_bench(trainer, states, items, args.workloads)
    sample = Trainer(MemoryForecastStore(), models=("auto",))
    sample.adopt(pickle.loads(pickle.dumps(states[0])))
    fc_sample = sample.refresh(states[0].series_id, items[0][1], items[0][2], now=now + STEP)
    redis = redis_bench(fc_sample)
    summary = {
        "ray_speedup_2_vs_1": r2["fits_per_second"] / r1["fits_per_second"],
        "ray_overhead_vs_local_1": r1["seconds"] / l1["seconds"] - 1,
        "ray_overhead_vs_local_2": r2["seconds"] / l2["seconds"] - 1,
        "ray_defaults_overhead_vs_local_1": r0["seconds"] / l1["seconds"] - 1,
        "load_average_before_after": [load0, os.getloadavg()],
        "state_pickle_bytes": float(np.mean([len(pickle.dumps(s)) for s in states[:20]])),
    }
    payload = {"name": name, "settings": vars(args), "engines": rows, "summary": summary, "refresh": refresh, "redis": redis,
               "projection": projection(rows, refresh, redis), "total_seconds": time.perf_counter() - t_all}
    print(f"wrote {save_json(name, payload)} and {write_markdown(payload)}")
    print(RESULTS.joinpath(f"{name}.md").read_text())


if __name__ == "__main__":
    main()
