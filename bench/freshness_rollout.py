"""The trainer-rollout phase of ``bench/trainer_freshness.py``: how old do forecasts get while
one trainer process stops and the next one starts?

Three trainers run one after the other on the same checkpoint directory (real files,
``forecaster.checkpoint``), each through ``forecaster.schedule.run_schedule``, the call
``foresight train --checkpoint-dir DIR`` makes (its start-up: a new Trainer, ``attach`` restores
the fitted states, the history windows a predecessor left are taken up; then a step every
refresh interval, fits in their thread):
- A, the old trainer: starts from yesterday's fits (every workload's checkpoint, written by
  ``Trainer._checkpoint`` as a fit writes it; clones of real fits, none due during the run),
  runs two steps, and gets a real SIGTERM at the moment its third step would start (the oldest
  its forecasts get between two steps), handled by the handler ``run_schedule`` installs;
- B, the rollout's new trainer: starts as soon as A has exited, runs two steps, and is killed
  at the same moment of its cycle (an exception from a signal handler: no handover, as after
  SIGKILL, an OOM kill, or with a trainer older than the handover);
- C, the restart after that kill: checkpoints but no history windows, so its first step pulls
  every workload's whole window.

Measured from the stop (the signal) until the new trainer has published every workload, per
workload: the forecast age just before its first new publication (now - generated_at of its
last one, what the adapter compares with its 300 s limit), max and p99; and the parts of the gap:
the old trainer's exit (saving its windows), the restore, taking up the windows, the first
step. Not in it (a real pod adds them): the kubelet's termination and the new pod's creation,
the volume's detach/attach, image pull and container start, and the new process's
interpreter start and imports, measured here separately in a subprocess.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import pickle
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from forecaster.checkpoint import attach
from forecaster.handover import RINGS_FILE
from forecaster.schedule import run_schedule, trainer_from_config

PLACEHOLDER = "not trained yet"


class _Killed(BaseException):
    """The bench's kill: raised in the main thread from a signal handler (no handover)."""


class _Log(logging.Handler):
    """The trainer's own log lines (restore, windows taken up and saved), with their times;
    warnings are printed as the trainer would print them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.levelno >= logging.WARNING:
            print(f"  [{record.levelname.lower()}] {record.getMessage()}", file=sys.stderr, flush=True)

    def find(self, prefix: str, after: float) -> logging.LogRecord | None:
        return next((r for r in self.records if r.created >= after and str(r.msg).startswith(prefix)), None)


def seed_checkpoints(config, states: list, path: Path, now: float, seed: int) -> float:
    """Yesterday's fits as checkpoints: workload i holds a clone of base state i mod len,
    fitted at a random moment of the last retrain interval but its first tenth (none comes due
    during the run). Written by the trainer's own checkpoint path; returns the seconds taken."""
    tr = trainer_from_config(config, None)
    attach(tr, path, [])
    rng = np.random.default_rng(seed)
    ago = rng.uniform(0.1, 0.9, len(config.workloads)) * tr.retrain_interval_seconds
    t0 = time.time()
    for i, w in enumerate(config.workloads):
        st = dataclasses.replace(states[i % len(states)], series_id=w.series_id, fitted_at=now - ago[i])
        tr._checkpoint(st)
    return time.time() - t0


def run_trainer(config, source, store, ckpt: Path, signal_after: int | None,
                signum: int = signal.SIGTERM) -> dict:
    """One ``foresight train`` process: ``run_schedule`` until ``signum`` arrives, sent when
    step ``signal_after + 1`` would start (None: one step, then it returns)."""
    interval = config.training.refresh_interval_seconds
    steps: list[dict] = []
    sent: dict[str, float] = {}

    def send() -> None:
        sent["at"] = time.time()
        os.kill(os.getpid(), signum)

    def on_step(out: dict) -> None:
        res = out["results"].values()
        steps.append({"now": out["now"], "ended": time.time(), "refresh_seconds": out["refresh_seconds"],
                      "published": out["published"], "pulls": out["pulls"],
                      "placeholder": sum(1 for r in res if r.get("published") and PLACEHOLDER in (r.get("reason") or "")),
                      "fitted": sum(1 for r in res if r.get("published") and PLACEHOLDER not in (r.get("reason") or ""))})
        if signal_after is not None and len(steps) == signal_after:
            threading.Timer(max(0.0, out["now"] + interval - time.time()), send).start()

    t_call = time.time()
    try:
        # as run_train_cmd calls it (its default pull threads, fits in a thread, the production pause)
        run_schedule(config, source, store, on_step=on_step, checkpoint_dir=str(ckpt),
                     iterations=None if signal_after is not None else 1)
    except _Killed:
        pass
    return {"called": t_call, "exited": time.time(), "signal_at": sent.get("at"), "steps": steps}


def first_ages(events: list[tuple[int, float, float]], n: int, stop: float) -> np.ndarray:
    """Per workload, its forecast's age just before the new trainer's first publication of it
    (NaN: not published again)."""
    ev = np.asarray(events, dtype="float64")
    peak = np.full(n, np.nan)
    last_gen = np.full(n, np.nan)
    for wid, gen, at in ev[np.argsort(ev[:, 2], kind="stable")]:
        i = int(wid)
        if at <= stop:
            last_gen[i] = gen
        elif np.isnan(peak[i]):
            peak[i] = at - last_gen[i]
    return peak


def old_gen_min(events: list, stop: float) -> float:
    """The oldest forecast's generated_at at ``stop`` (each workload's last before it)."""
    last: dict[int, float] = {}
    for wid, gen, at in events:
        if at <= stop:
            last[wid] = max(gen, last.get(wid, gen))
    return min(last.values())


def measure(name: str, old: dict, new: dict, events: list, n: int, log: _Log) -> dict:
    stop = old["signal_at"]
    first = new["steps"][0]
    peak = first_ages(events, n, stop)
    restored = log.find("restored %d fitted states", new["called"])
    rings = log.find("restored the history windows", new["called"])
    saved = log.find("SIGTERM: the trainer stops", stop)
    out = {
        "max_age_seconds": float(np.nanmax(peak)), "p99_age_seconds": float(np.nanpercentile(peak, 99)),
        # the max age is this plus the gap (the stop to the last publication)
        "oldest_forecast_at_stop_seconds": stop - old_gen_min(events, stop),
        "workloads_published_again": int(np.isfinite(peak).sum()),
        "stop_to_all_published_seconds": first["ended"] - stop,
        "old_exit_seconds": old["exited"] - stop,
        "restore_seconds": restored.created - new["called"] if restored else None,
        "restored": restored.args[0] if restored else 0,
        "windows_taken_up": rings.args[0] if rings else 0,
        "windows_load_seconds": rings.args[2] if rings else None,  # beside the restore, in a thread
        "start_to_first_step_seconds": first["now"] - new["called"],
        "first_step_seconds": first["refresh_seconds"],
        "first_step_pulls": first["pulls"],
        "first_publication_fitted": first["fitted"], "first_publication_placeholder": first["placeholder"],
        "second_step_seconds": new["steps"][1]["refresh_seconds"] if len(new["steps"]) > 1 else None,
    }
    if saved is not None and saved.created <= new["called"]:
        out["old_saved_windows"], out["old_saved_mb"] = saved.args[0], saved.args[1]
    print(f"  {name}: stop -> every workload published again {out['stop_to_all_published_seconds']:.1f} s "
          f"(old trainer's exit {out['old_exit_seconds']:.1f} s, restore {out['restore_seconds'] or 0:.1f} s, "
          f"windows taken up: {out['windows_taken_up']}, first step {out['first_step_seconds']:.1f} s); "
          f"max age {out['max_age_seconds']:.0f} s, p99 {out['p99_age_seconds']:.0f} s; first publication "
          f"{out['first_publication_fitted']} fitted, {out['first_publication_placeholder']} placeholder", flush=True)
    return out


def restored_modules(states: list) -> set[str]:
    """The modules unpickling these states imports (a new process imports them at its restore)."""
    mods: set[str] = set()

    class Rec(pickle.Unpickler):
        def find_class(self, module, name):
            mods.add(module)
            return super().find_class(module, name)

    for st in states:
        Rec(io.BytesIO(pickle.dumps(st))).load()
    return mods


def startup_seconds(states: list, runs: int = 3) -> dict:
    """A new ``foresight train`` process's interpreter start and imports up to its first step
    (the command's modules, the Redis client, what a restore unpickles), in a subprocess:
    the bench's process has them loaded already."""
    mods = sorted(restored_modules(states) | {"redis"})
    code = ("import time; t = time.perf_counter(); import foresight.cli; foresight.cli.build_parser(); "
            "from forecaster.config import load_config; from forecaster.sources.prometheus import open_source; "
            "from core.store import open_store; from forecaster.schedule import run_schedule; "
            + "".join(f"import {m}; " for m in mods) + "print(time.perf_counter() - t)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    walls, imports = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"start-up probe failed: {r.stderr[-2000:]}")
        imports.append(float(r.stdout.strip().splitlines()[-1]))
    return {"process_seconds_median": statistics.median(walls), "imports_seconds_median": statistics.median(imports),
            "runs": runs, "load_average_1m": os.getloadavg()[0], "modules": mods}


def _kill(*_: object) -> None:
    raise _Killed()


def run_rollout(config, source, rec, states: list, args) -> dict:
    """The three trainers (A stopped by SIGTERM -> B; B killed -> C), publishing to ``rec`` (a
    store that records every publication); see the module docstring."""
    n = len(config.workloads)
    ckpt = Path(tempfile.mkdtemp(prefix="foresight-rollout-"))  # on disk, as the trainer's volume
    log = _Log()
    logger = logging.getLogger("forecaster")
    level = logger.level
    logger.addHandler(log)
    logger.setLevel(logging.INFO)
    previous = signal.signal(signal.SIGUSR1, _kill)
    try:
        seeded = seed_checkpoints(config, states, ckpt, time.time(), args.seed)
        print(f"  rollout: {n} checkpoints written in {seeded:.1f} s", flush=True)
        a = run_trainer(config, source, rec, ckpt, signal_after=2)
        print(f"  rollout: A ran {len(a['steps'])} steps (the first pulled every window: "
              f"{a['steps'][0]['refresh_seconds']:.1f} s); SIGTERM", flush=True)
        b = run_trainer(config, source, rec, ckpt, signal_after=2, signum=signal.SIGUSR1)
        with_handover = measure("A -> B (SIGTERM, windows handed over)", a, b, rec.events, n, log)
        left = (ckpt / RINGS_FILE).exists()
        c = run_trainer(config, source, rec, ckpt, signal_after=None)
        without = measure("B -> C (killed: no windows, every one pulled in full)", b, c, rec.events, n, log)
        without["windows_file_left_by_the_kill"] = left
    finally:
        signal.signal(signal.SIGUSR1, previous)
        logger.removeHandler(log)
        logger.setLevel(level)
        shutil.rmtree(ckpt, ignore_errors=True)
    return {"refresh_interval_seconds": config.training.refresh_interval_seconds,
            "target_max_age_seconds": 2 * config.training.refresh_interval_seconds,
            "stop_moment": "when the old trainer's next step would start",
            "checkpoint_seed_seconds": seeded, "sigterm_handover": with_handover, "after_a_kill": without,
            "process_startup": startup_seconds(states, runs=1 if args.quick else 3),
            "windows": {"handover": (a["signal_at"], b["steps"][0]["ended"]),
                        "full_pull": (b["signal_at"], c["steps"][0]["ended"])}}


def plot(roll: dict, curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, color, label in (("handover", "tab:blue", "SIGTERM: windows handed over"),
                              ("full_pull", "tab:red", "after a kill: every window pulled")):
        c = curves[key]
        ax.plot(c["t"], c["max"], color=color, label=f"{label}: max age")
        ax.plot(c["t"], c["p99"], color=color, ls=":", label=f"{label}: p99 age")
    ax.axhline(roll["target_max_age_seconds"], color="gray", ls="--", lw=0.8, label="2 refresh intervals")
    ax.axhline(300.0, color="black", ls="--", lw=0.8, label="adapter's limit (300 s)")
    ax.set_xlabel("seconds since the old trainer was stopped")
    ax.set_ylabel("forecast age (s)")
    ax.set_title("trainer rollout: the old one stops, the new one restores and publishes")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
