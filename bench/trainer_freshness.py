"""Does the trainer keep forecasts fresh for 10,000 workloads while a full retrain runs?

    .venv/bin/python bench/trainer_freshness.py [--workloads 10000] [--run-seconds 240] [--old-seconds 150]
    .venv/bin/python bench/trainer_freshness.py --quick   # smoke run: 40 workloads, seconds, temp folder

Workloads: each is one of the 100 real Azure VM CPU traces (``$FORESIGHT_DATA_DIR/cpu``), at a
random time offset and a random amplitude scale, on the real 300 s grid mapped onto the wall
clock (a workload's newest point is the newest 300 s boundary now). The source is in memory and
simulates Prometheus' latency by sleeping ``latency_ms + per_point_us x points`` per range query
(the server's time: a sleep costs no CPU, as a remote Prometheus costs this process none); the
frame it returns is built like PrometheusSource's. The store is the memory store (``--redis``:
a real redis-server from tests/stack.py).

The moment measured is the daily retrain: every workload's model is due at once. A warm start
is cloned from real fits of the base traces (so refreshes cost what a fitted AR/ensemble costs),
then two trainers run on the same data, one after the other, on the wall clock (real threads,
real fits, the real 2 cores; nothing simulated but the source's latency):
- new: ``forecaster.schedule.TrainScheduler`` steps every refresh interval, fits in ThreadFits;
- old: ``train_once`` in a loop (pull all, then fit-and-refresh each due workload in turn),
  stopped after ``--old-seconds``; its full duration is projected from its measured rates.
Forecast age (now - generated_at, what the adapter compares with max_forecast_age_seconds = 300)
is computed for every workload every second from the recorded publications: max and p99.

After the new trainer's second cycle one workload's ``serving`` is edited and taken in place
(``TrainScheduler.reconfigure``, what the trainer does when the operator rewrites its file for
one PredictiveAutoscaler): reported are the series that started over, how many of the others
kept their fitted state, how many of those served a fitted model before and the not-trained
placeholder at the end, and the others' max forecast age from the edit on.

Then a trainer rollout (``bench/freshness_rollout.py``): trainers started as ``foresight train
--checkpoint-dir`` starts one (``run_schedule``), on real checkpoint files; the old one gets a
real SIGTERM when its next step would start, the new one restores and publishes. Reported: per
workload the forecast age from the stop until the new trainer has published it, max and p99,
the restore, the first step, fitted vs placeholder publications, beside a restart after a kill
(no history windows handed over), and a new process's start-up measured in a subprocess
(``trainer_freshness_rollout.json`` and ``.png``).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import pickle
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import freshness_rollout
from bench.common import QUICK_CPU, add_quick_args, data_dir, results_dir, save_json
from forecaster.config import parse_config
from forecaster.schedule import ThreadFits, TrainScheduler, train_once, trainer_from_config

STEP = 300.0
STALE_SECONDS = 300.0  # adapter MetricSettings.max_forecast_age_seconds


class TraceSource:
    """Workload i = scale_i x base trace b_i shifted by o_i points, on the absolute 300 s grid."""

    def __init__(self, bases: list[np.ndarray], n: int, seed: int, latency_ms: float, per_point_us: float) -> None:
        rng = np.random.default_rng(seed)
        self.bases = bases
        self.base = rng.integers(0, len(bases), n)
        self.offset = rng.integers(0, 10_000, n)
        self.scale = np.exp(rng.normal(0.0, 0.5, n))
        self.latency = latency_ms / 1000.0
        self.per_point = per_point_us / 1e6
        self.queries = 0
        self.points = 0  # asked by the refresh loop (and its pull threads)
        self.fit_points = 0  # asked by the fit thread (full pulls)

    def fetch(self, query, start, end, step_seconds, series_id=None):
        i = int(query[1:])
        k0, k1 = int(math.ceil(start / STEP - 1e-9)), int(math.floor(end / STEP + 1e-9))
        k = np.arange(k0, k1 + 1)
        base = self.bases[self.base[i]]
        vals = base[(k + self.offset[i]) % len(base)] * self.scale[i]
        self.queries += 1
        if threading.current_thread().name.startswith("foresight-fits"):
            self.fit_points += len(k)
        else:
            self.points += len(k)
        time.sleep(self.latency + self.per_point * len(k))
        return pd.DataFrame({"series_id": series_id or query,
                             "timestamp": pd.to_datetime(k * STEP, unit="s", utc=True), "value": vals})


class RecordingStore:
    """Delegates to a real store and records (workload, generated_at, published at) per publish."""

    def __init__(self, store, index: dict[str, int]) -> None:
        self.store = store
        self.index = index
        self.events: list[tuple[int, float, float]] = []

    def publish(self, fc):
        gen = self.store.publish(fc)
        self.events.append((self.index[fc.series_id], fc.generated_at, time.time()))
        return gen

    def __getattr__(self, name):
        return getattr(self.store, name)


def load_bases(quick: bool = False) -> list[np.ndarray]:
    """The real traces workloads are resampled from: the Azure VM CPU traces (quick: the bundled slice)."""
    from forecaster.frames import regularize, series_arrays
    from forecaster.sources.csv import read_long_csv

    frame = read_long_csv(QUICK_CPU if quick else data_dir() / "cpu" / "azure_v1_vm_cpu.csv.gz")
    out = []
    for _, _, v in series_arrays(regularize(frame, STEP)):
        v = pd.Series(v).interpolate(limit_direction="both").to_numpy()
        if np.isfinite(v).all() and len(v) > 20 * 288:
            out.append(v.astype("float64"))
    return out


def make_config(n: int, history_days: float, refresh_seconds: float):
    return parse_config({
        "source": {"url": "csv://in-memory", "step_seconds": STEP, "history_days": history_days},
        "training": {"models": ["auto"], "retrain_interval_seconds": 86400, "refresh_interval_seconds": refresh_seconds},
        "workloads": [{"namespace": "bench", "name": f"w{i}", "demand_query": f"q{i}",
                       "capacity": {"cpu_request_cores": 1.0, "ready_pods": 2}} for i in range(n)],
    })


def warm_states(config, source: TraceSource, base_fits: int, now: float) -> list:
    """Real fits of the first ``base_fits`` base traces (yesterday's models)."""
    trainer = trainer_from_config(config, None)
    states = []
    window = int(config.source.history_days * 288)
    for b in range(min(base_fits, len(source.bases))):
        v = source.bases[b][-window:]
        ts = now - STEP * np.arange(len(v))[::-1]
        states.append(trainer.fit(f"base{b}", ts, v, now=now, capacity_per_pod=1.0))
        print(f"\r  warm start: fitted {b + 1}/{base_fits} base traces ({states[-1].model_name})", end="", flush=True)
    print()
    return states


def install(trainer, config, states: list, due_at: float) -> None:
    """Every workload gets a copy of a fitted base state, fitted a retrain interval before ``due_at``."""
    for i, w in enumerate(config.workloads):
        st = copy.deepcopy(states[i % len(states)])
        st.series_id = w.series_id
        st.fitted_at = due_at - trainer.retrain_interval_seconds
        trainer._states[w.series_id] = st


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_new(config, source: TraceSource, store: RecordingStore, states: list, args) -> dict:
    """The scheduler on the wall clock: a step every refresh interval, fits in a thread."""
    trainer = trainer_from_config(config, store)
    rss0 = rss_bytes()
    install(trainer, config, states, due_at=time.time())
    fits = ThreadFits()
    sched = TrainScheduler(config, source, trainer, fits=fits, pull_threads=args.pull_threads)
    cycles, t_start, rss1, edit = [], time.time(), None, None
    interval = config.training.refresh_interval_seconds
    while True:
        t0 = time.time()
        q0, p0 = source.queries, source.points
        out = sched.step(t0)
        rss1 = rss1 or rss_bytes()
        cycles.append({"started": t0 - t_start, "refresh_seconds": out["refresh_seconds"], "published": out["published"],
                       "fits_done": out["fits_done"], "fits_pending": out["fits_pending"],
                       "queries": source.queries - q0, "points_pulled": source.points - p0})
        print(f"  new: cycle {len(cycles)} at +{t0 - t_start:5.0f} s: refreshed {out['published']} in "
              f"{out['refresh_seconds']:.1f} s, {source.points - p0} points pulled; fits {fits.done} done, "
              f"{out['fits_pending']} queued", flush=True)
        if edit is None and len(cycles) == EDIT_AFTER_CYCLES and len(config.workloads) > 1:
            edit = edit_one(sched, store)
        if time.time() - t_start >= args.run_seconds:
            break
        time.sleep(max(0.0, interval - (time.time() - t0)))
    t_end = time.time()
    fits.stop(timeout=30)
    if edit is not None:
        edit.update(kept_after(sched, store, edit))
    sample = [trainer.state(w.series_id) for w in config.workloads[:: max(1, len(config.workloads) // 200)]]
    return {"edit": edit, "t_start": t_start, "t_measure": t_start + cycles[0]["refresh_seconds"], "t_end": t_end,
            "cycles": cycles, "fits_done": fits.done, "fits_per_second": fits.done / (t_end - t_start),
            "rss_per_workload_bytes": (rss1 - rss0) / len(config.workloads),
            "ring_bytes_per_workload": sched.history.capacity * 8,
            "state_pickle_bytes_mean": float(np.mean([len(pickle.dumps(s)) for s in sample])),
            "pulls": {"full": sched.history.stats.full, "incremental": sched.history.stats.incremental}}


# One autoscaler's spec.serving is edited after this many refresh cycles (the operator rewrites the
# trainer's file; the trainer takes it in place): the others must keep their fitted models.
EDIT_AFTER_CYCLES = 2


def edit_one(sched, store) -> dict:
    """Reconfigure with workload 0's serving changed; returns what started over, when, and how
    many of the others still hold their fitted state right after."""
    import dataclasses

    cfg = sched.config
    w0 = cfg.workloads[0]
    serving = dataclasses.replace(cfg.serving, slo_minutes_per_day=cfg.serving.slo_minutes_per_day * 2)
    edited = dataclasses.replace(cfg, workloads=(dataclasses.replace(w0, serving=serving),) + tuple(cfg.workloads[1:]))
    others = [w.series_id for w in cfg.workloads[1:]]
    models = {sid: getattr(store.latest(sid), "model", None) for sid in others}
    at = time.time()
    again = sched.reconfigure(edited)
    kept = sum(1 for sid in others if (st := sched.trainer.state(sid)) is not None and st.fitted)
    print(f"  edit: {w0.series_id}'s serving changed in place; {len(again)} series start over ({', '.join(again)}); "
          f"{kept}/{len(others)} others keep their fitted state", flush=True)
    return {"at": at, "start_over": again, "others": len(others), "others_keeping_a_fitted_model": kept,
            "models": models}


def kept_after(sched, store, edit: dict) -> dict:
    """The others that served a fitted model before the edit and the not-trained-yet placeholder
    at the end (an edit that cold-started them would make this all of them; a drift fallback to
    persistence is not counted: it is the model's own state)."""
    models = edit.pop("models")
    fitted = [sid for sid, m in models.items() if m not in (None, "persistence")]
    lost = sum(1 for sid in fitted if "not trained yet" in (getattr(store.latest(sid), "reason", "") or ""))
    return {"others_served_fitted_before": len(fitted), "of_those_on_the_placeholder_at_the_end": lost}


class _Stop(BaseException):
    """Ends the old loop at the deadline (train_once catches Exception per workload)."""


def run_old(config, source: TraceSource, store: RecordingStore, states: list, fresh: dict, args) -> dict:
    """``train_once`` in a loop, as ``foresight train`` ran before: stopped after ``old_seconds``."""
    from dataclasses import replace

    trainer = trainer_from_config(config, store)
    t_start = time.time()
    for fc in fresh.values():  # the steady state: every forecast fresh when the retrain comes due
        store.publish(replace(fc, generated_at=t_start))
    install(trainer, config, states, due_at=t_start)
    t_measure = time.time()
    deadline = t_start + args.old_seconds
    counts = {"pulls": 0, "fits": 0, "pulls_done_at": None}
    fetch, fit = source.fetch, trainer.fit

    def timed_fetch(*a, **k):
        if time.time() > deadline:
            raise _Stop()
        counts["pulls"] += 1
        return fetch(*a, **k)

    def timed_fit(*a, **k):
        if counts["pulls_done_at"] is None:
            counts["pulls_done_at"] = time.time() - t_start
        if time.time() > deadline:
            raise _Stop()
        out = fit(*a, **k)
        counts["fits"] += 1
        if counts["fits"] % 20 == 0:
            print(f"  old: +{time.time() - t_start:4.0f} s: {counts['fits']} fitted and refreshed", flush=True)
        return out

    source.fetch, trainer.fit = timed_fetch, timed_fit
    print(f"  old: pulling the full window of {len(config.workloads)} workloads before the first fit ...", flush=True)
    try:
        train_once(config, source, store, now=time.time(), trainer=trainer)
    except _Stop:
        pass
    finally:
        source.fetch = fetch
    t_end = time.time()
    n = len(config.workloads)
    pull_s = counts["pulls_done_at"] or (t_end - t_start) * n / max(1, counts["pulls"])
    fit_s = (t_end - t_start) - (counts["pulls_done_at"] or t_end - t_start)
    per_fit = fit_s / counts["fits"] if counts["fits"] >= 10 else sample_fit_seconds(config, source, trainer, fit)
    return {"t_start": t_start, "t_measure": t_measure, "t_end": t_end, "pulls": counts["pulls"], "fits_done": counts["fits"],
            "pull_phase_seconds": pull_s, "pull_phase_projected": counts["pulls_done_at"] is None,
            "fits_per_second": 1.0 / per_fit, "projected_cycle_seconds": pull_s + n * per_fit}


def sample_fit_seconds(config, source: TraceSource, trainer, fit, k: int = 12) -> float:
    """When the old loop was stopped before its fits: what one of its fit-and-refresh steps costs
    (the same ``step_workload`` call train_once makes per due workload)."""
    from forecaster.schedule import workload_meta
    from forecaster.training import step_workload

    trainer.fit = fit
    t0, now = time.time(), time.time()
    for w in config.workloads[:k]:
        end = math.floor(now / STEP) * STEP
        from forecaster.history import frame_arrays

        ts, vals = frame_arrays(source.fetch(w.demand_query, end - config.source.history_days * 86400, end, STEP, w.series_id))
        step_workload(trainer, w.series_id, ts, vals, now, workload_meta(w, {"cpu_request_cores": 1.0}), fit=True)
    per = (time.time() - t0) / k
    print(f"  old: the loop was stopped while pulling; {k} of its fit-and-refresh steps took {per:.2f} s each", flush=True)
    return per


def ages(events: list[tuple[int, float, float]], n: int, t0: float, t1: float, dt: float = 1.0) -> dict:
    """Every workload's forecast age every ``dt`` seconds from the publications: max/p99 per
    instant, and over all (workload, instant) samples."""
    ev = np.asarray(events, dtype="float64")
    ev = ev[np.argsort(ev[:, 2], kind="stable")]
    grid = np.arange(t0, t1, dt)
    out = np.full((n, len(grid)), np.nan)
    order = np.argsort(ev[:, 0], kind="stable")
    wid = ev[order, 0].astype(int)
    bounds = np.searchsorted(wid, np.arange(n + 1))
    for i in range(n):
        e = ev[order[bounds[i]:bounds[i + 1]]]
        if len(e):
            k = np.searchsorted(e[:, 2], grid, side="right") - 1
            out[i] = np.where(k >= 0, grid - e[np.maximum(k, 0), 1], np.nan)
    flat = out[np.isfinite(out)]
    return {"t": (grid - t0).tolist(), "max": np.nanmax(out, axis=0).tolist(), "p99": np.nanpercentile(out, 99, axis=0).tolist(),
            "stale_fraction": (np.nan_to_num(out, nan=np.inf) > STALE_SECONDS).mean(axis=0).tolist(),
            "max_age": float(flat.max()), "p99_age": float(np.percentile(flat, 99))}


def plot(new: dict, old: dict, new_ages: dict, old_ages: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    a.plot(new_ages["t"], new_ages["max"], color="tab:blue", label="new: max age")
    a.plot(new_ages["t"], new_ages["p99"], color="tab:blue", ls=":", label="new: p99 age")
    a.plot(old_ages["t"], old_ages["max"], color="tab:red", label="old (train_once loop): max age, measured")
    proj = old["projected_cycle_seconds"]
    if proj == proj:
        a.plot([old_ages["t"][-1], proj], [old_ages["max"][-1], proj], color="tab:red", ls="--",
               label=f"old: projected to the end of its cycle ({proj / 60:.0f} min)")
    a.axhline(STALE_SECONDS, color="black", lw=0.8, ls="--", label="staleness limit (300 s)")
    a.set_xlabel("seconds since the retrain came due (new: since its first refresh cycle)")
    a.set_ylabel("forecast age (s)")
    a.set_xlim(0, max(new_ages["t"][-1], min(proj if proj == proj else 0, 4 * new_ages["t"][-1])))
    a.set_ylim(0, max(STALE_SECONDS * 1.5, min(proj if proj == proj else 0, 4 * new_ages["t"][-1])))
    a.set_title(f"{new['n']} workloads, every model due at once")
    a.legend(fontsize=7, loc="upper left")
    c = new["cycles"]
    b.bar([x["started"] for x in c], [x["refresh_seconds"] for x in c], width=8, color="tab:blue", label="refresh cycle (s)")
    b.axhline(new["refresh_interval"], color="gray", ls=":", lw=0.8, label="refresh interval")
    b2 = b.twinx()
    b2.plot([x["started"] for x in c], np.cumsum([x["fits_done"] for x in c]), color="tab:green", marker="o", label="fits done")
    b.set_xlabel("seconds since start (new)")
    b.set_ylabel("refresh cycle duration (s)")
    b2.set_ylabel("fits completed (cumulative)")
    b.set_title("new: refresh cycles vs the fit backlog")
    b.legend(fontsize=7, loc="upper left")
    b2.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", type=int, default=10_000)
    p.add_argument("--history-days", type=float, default=14.0)
    p.add_argument("--refresh-seconds", type=float, default=60.0, help="training.refresh_interval_seconds")
    p.add_argument("--run-seconds", type=float, default=240.0, help="how long the new trainer runs")
    p.add_argument("--old-seconds", type=float, default=150.0, help="how long the old loop runs before it is stopped")
    p.add_argument("--base-fits", type=int, default=40, help="real fits cloned for the warm start")
    p.add_argument("--latency-ms", type=float, default=2.0, help="simulated Prometheus latency per range query")
    p.add_argument("--per-point-us", type=float, default=2.0, help="simulated Prometheus latency per returned point")
    p.add_argument("--pull-threads", type=int, default=8)
    p.add_argument("--redis", action="store_true", help="publish to a real redis-server (tests/stack.py)")
    p.add_argument("--seed", type=int, default=7)
    add_quick_args(p, "40 workloads, 3 days of history, 2 base fits, a 2 s refresh for 5 s, the old loop 3 s")
    args = p.parse_args(argv)
    if args.quick:
        args.workloads, args.history_days, args.base_fits = 40, 3.0, 2
        args.refresh_seconds, args.run_seconds, args.old_seconds = 2.0, 5.0, 3.0
    return args


def open_store(args):
    from core.store import MemoryForecastStore, RedisForecastStore

    if not args.redis:
        return MemoryForecastStore(), None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tests.stack import start_redis

    server = start_redis()
    return RedisForecastStore(server.url), server


def main(argv=None) -> int:
    args = parse_args(argv)
    out = results_dir(args)
    t_begin = time.time()
    bases = load_bases(args.quick)
    config = make_config(args.workloads, args.history_days, args.refresh_seconds)
    index = {w.series_id: i for i, w in enumerate(config.workloads)}
    source = TraceSource(bases, args.workloads, args.seed, args.latency_ms, args.per_point_us)
    print(f"{len(bases)} base traces, {args.workloads} workloads, {args.history_days:g} days of history at 300 s")
    states = warm_states(config, source, args.base_fits, time.time())
    raw, server = open_store(args)
    try:
        print(f"new trainer (refreshes never wait for fits), {args.run_seconds:.0f} s:")
        store = RecordingStore(raw, index)
        new = run_new(config, source, store, states, args)
        new.update(n=args.workloads, refresh_interval=args.refresh_seconds)
        new_ages = ages(store.events, args.workloads, new["t_measure"], new["t_end"])
        if new["edit"] is not None:  # the others' forecast age from the edit on
            rest = [e for e in store.events if e[0] != 0]
            new["edit"]["others_max_age_seconds_after"] = ages(rest, args.workloads, new["edit"]["at"], new["t_end"])["max_age"]
            new["edit"]["at"] -= new["t_start"]
        fresh = {w.series_id: raw.latest(w.series_id) for w in config.workloads}
        print(f"old trainer (train_once in a loop), stopped after {args.old_seconds:.0f} s:")
        old_store = RecordingStore(raw, index)
        old = run_old(config, source, old_store, states, {k: v for k, v in fresh.items() if v}, args)
        old_ages = ages(old_store.events, args.workloads, old["t_measure"], old["t_end"])
        print("trainer rollout (foresight train --checkpoint-dir: the old one gets SIGTERM, a new one starts):")
        roll_store = RecordingStore(raw, index)
        roll = freshness_rollout.run_rollout(config, source, roll_store, states, args)
        curves = {k: ages(roll_store.events, args.workloads, t0, t1 + 1.0) for k, (t0, t1) in roll.pop("windows").items()}
    finally:
        if server is not None:
            server.stop()
    report(args, new, old, new_ages, old_ages, time.time() - t_begin, out)
    report_rollout(args, roll, curves, out)
    return 0


def report_rollout(args, roll: dict, curves: dict, out: Path) -> None:
    roll = {"workloads": args.workloads, "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            **roll, "curves": {k: {"t": c["t"], "max": c["max"], "p99": c["p99"]} for k, c in curves.items()}}
    save_json("trainer_freshness_rollout", roll, out)
    freshness_rollout.plot(roll, curves, out / "trainer_freshness_rollout.png")
    h, k, s = roll["sigterm_handover"], roll["after_a_kill"], roll["process_startup"]
    print(f"\ntrainer rollout, {args.workloads} workloads, stopped when its next step would start:")
    print(f"{'':40}{'SIGTERM (handover)':>20}{'after a kill':>16}")
    for label, key, fmt in (("max forecast age (s)", "max_age_seconds", ".0f"), ("p99 forecast age (s)", "p99_age_seconds", ".0f"),
                            ("oldest forecast at the stop (s)", "oldest_forecast_at_stop_seconds", ".1f"),
                            ("stop -> all published again (s)", "stop_to_all_published_seconds", ".1f"),
                            ("old trainer's exit (s)", "old_exit_seconds", ".1f"), ("restore (s)", "restore_seconds", ".1f"),
                            ("start -> first step (s)", "start_to_first_step_seconds", ".1f"),
                            ("first step (s)", "first_step_seconds", ".1f"), ("second step (s)", "second_step_seconds", ".1f"),
                            ("history windows taken up", "windows_taken_up", "d"),
                            ("first publication: fitted", "first_publication_fitted", "d"),
                            ("first publication: placeholder", "first_publication_placeholder", "d")):
        cells = [format(x[key], fmt) if x.get(key) is not None else "-" for x in (h, k)]
        print(f"{label:40}{cells[0]:>20}{cells[1]:>16}")
    print(f"target: max age <= {roll['target_max_age_seconds']:.0f} s (2 refresh intervals): "
          f"{'met' if h['max_age_seconds'] <= roll['target_max_age_seconds'] else 'MISSED'} in the bench; a new process adds "
          f"{s['process_seconds_median']:.1f} s (interpreter + imports, median of {s['runs']}, load {s['load_average_1m']:.1f}); "
          f"a pod adds its creation, volume attach and container start")
    print(f"wrote {out / 'trainer_freshness_rollout.json'} and .png")


def report(args, new, old, new_ages, old_ages, total_seconds: float, out: Path) -> None:
    c = new["cycles"]
    steady = [x["refresh_seconds"] for x in c[1:]] or [c[0]["refresh_seconds"]]
    summary = {
        "workloads": args.workloads, "staleness_limit_seconds": STALE_SECONDS,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "new": {"max_age_seconds": new_ages["max_age"], "p99_age_seconds": new_ages["p99_age"],
                "stale_samples_fraction": float(np.mean(new_ages["stale_fraction"])),
                "first_cycle_seconds (restart: full pulls)": c[0]["refresh_seconds"],
                "refresh_cycle_seconds_max (steady)": max(steady), "refresh_cycle_seconds_median (steady)": float(np.median(steady)),
                "points_pulled_first_cycle": c[0]["points_pulled"],
                "points_pulled_per_cycle_steady": float(np.median([x["points_pulled"] for x in c[1:]] or [0])),
                "fits_done": new["fits_done"], "fits_per_second": new["fits_per_second"],
                "pulls": new["pulls"], "rss_per_workload_bytes": new["rss_per_workload_bytes"],
                "ring_bytes_per_workload": new["ring_bytes_per_workload"],
                "fitted_state_pickle_bytes_mean": new["state_pickle_bytes_mean"], "cycles": c,
                "edit_one_workload": new["edit"]},
        "old": {"max_age_seconds_measured": old_ages["max_age"], "p99_age_seconds_measured": old_ages["p99_age"],
                "measured_seconds": old["t_end"] - old["t_start"], "pulls": old["pulls"], "fits_done": old["fits_done"],
                "pull_phase_seconds": old["pull_phase_seconds"], "fits_per_second": old["fits_per_second"],
                "projected_cycle_seconds": old["projected_cycle_seconds"]},
        "total_seconds": total_seconds,
    }
    save_json("trainer_freshness", summary, out)
    pd.DataFrame({"t": new_ages["t"], "new_max_age": new_ages["max"], "new_p99_age": new_ages["p99"]}).to_csv(
        out / "trainer_freshness.csv", index=False)
    plot(new, old, new_ages, old_ages, out / "trainer_freshness.png")
    n, o = summary["new"], summary["old"]
    print(f"\n{'':34}{'new (scheduler)':>18}{'old (train_once loop)':>24}")
    print(f"{'max forecast age (s)':34}{n['max_age_seconds']:>18.0f}{o['max_age_seconds_measured']:>16.0f} measured")
    print(f"{'':34}{'':>18}{o['projected_cycle_seconds']:>16.0f} projected")
    print(f"{'p99 forecast age (s)':34}{n['p99_age_seconds']:>18.0f}{o['p99_age_seconds_measured']:>16.0f} measured")
    print(f"{'staleness limit (s)':34}{STALE_SECONDS:>18.0f}{STALE_SECONDS:>24.0f}")
    print(f"{'refresh cycle (s), steady max':34}{n['refresh_cycle_seconds_max (steady)']:>18.1f}"
          f"{o['projected_cycle_seconds']:>16.0f} projected")
    print(f"{'first cycle after a restart (s)':34}{n['first_cycle_seconds (restart: full pulls)']:>18.1f}")
    print(f"{'fits/s':34}{n['fits_per_second']:>18.2f}{o['fits_per_second']:>24.2f}")
    print(f"{'points pulled per refresh cycle':34}{n['points_pulled_per_cycle_steady']:>18.0f}"
          f"{args.workloads * (int(args.history_days * 288) + 1):>24}")
    print(f"memory per workload: ring {n['ring_bytes_per_workload'] / 1024:.1f} KB, fitted state ~"
          f"{n['fitted_state_pickle_bytes_mean'] / 1024:.1f} KB (pickled), RSS growth "
          f"{n['rss_per_workload_bytes'] / 1024:.1f} KB (rings + states + forecasts in the memory store)")
    if new["edit"] is not None:
        e = new["edit"]
        print(f"one workload's serving edited at +{e['at']:.0f} s: {len(e['start_over'])} series started over; "
              f"{e['others_keeping_a_fitted_model']}/{e['others']} others kept their fitted state, "
              f"{e['of_those_on_the_placeholder_at_the_end']} of the {e['others_served_fitted_before']} served from a "
              f"fitted model before it on the placeholder at the end; "
              f"the others' max forecast age after the edit {e['others_max_age_seconds_after']:.0f} s")
    print(f"wrote {out / 'trainer_freshness.json'}, .csv and .png ({total_seconds:.0f} s in all)")


if __name__ == "__main__":
    raise SystemExit(main())
