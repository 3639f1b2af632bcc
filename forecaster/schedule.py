"""``foresight train``: pull history through the source, fit, refresh and publish on a schedule.

Two ways to run it:
- ``train_once(config, source, store, now)``: one step, for ``foresight train --once`` and the
  parity test: retrain whatever is due, then refresh and publish every workload.
- ``run_schedule``: the long-running trainer. Refreshes never wait for fits: every
  ``refresh_interval_seconds`` a :class:`TrainScheduler` step tops up each workload's history
  incrementally (``forecaster.history``) and refreshes and publishes every workload with the
  model it has now, then queues the fits that are due, most due first (never fitted, then
  drifted, then the oldest fit). A fit worker runs the queue: :class:`ThreadFits` in a thread
  beside the refresh loop (the default), or :class:`InlineFits`, a per-step budget after the
  refreshes. A fit pulls the whole window (re-syncing the ring), and the global LSTM is one more
  queued job, so a fleet retrain never holds a refresh back.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from core.breaker import CircuitOpen
from forecaster.checkpoint import CheckpointDir
from forecaster.configwatch import ConfigWatch, fleet_settings
from forecaster.fitqueue import InlineFits, ThreadFits, fit_priority  # noqa: F401 - part of this module's API
from forecaster.handover import Stop, load_rings, save_rings
from forecaster.history import HistoryCache, frame_arrays
from forecaster.models import ModelError
from forecaster.predicted import capacity_per_pod
from core.store import ForecastStore
from forecaster.workloads import READINGS_HINT
from forecaster.timing import demand_lag_seconds
from forecaster.training import Trainer, fit_item, step_workload

log = logging.getLogger(__name__)

__all__ = ["train_once", "run_schedule", "TrainScheduler", "ThreadFits", "InlineFits", "trainer_from_config",
           "workload_meta", "fit_priority", "Stopped"]


def _log_failure(sid: str, exc: BaseException) -> None:
    """One workload's failure: a warning, unless it failed fast in an outage its circuit
    breaker has already logged once (core/breaker.py), not once per workload per step."""
    (log.debug if isinstance(exc, CircuitOpen) else log.warning)("%s: %s", sid, exc)


def trainer_from_config(config, store: ForecastStore | None, clock: Callable[[], float] = time.time) -> Trainer:
    t = config.training
    return Trainer(
        store,
        models=t.models,
        horizon=t.horizon_steps,
        quantiles=t.quantiles,
        step_seconds=config.source.step_seconds,
        clock=clock,
        retrain_interval_seconds=t.retrain_interval_seconds,
        serving=config.serving,
        serving_by_series=config.serving_by_series(),
        # engine: ray trains the global LSTM with Ray Train on the same cluster as the fits
        global_params={"lstm": {"engine": "ray"}} if t.engine == "ray" else None,
    )


def workload_meta(workload, capacity: Mapping[str, Any]) -> dict[str, Any]:
    """What readers need besides the numbers: identity, selector labels and capacity."""
    meta: dict[str, Any] = {
        "namespace": workload.namespace,
        "workload": workload.name,
        "kind": workload.kind,
        "labels": workload.all_labels(),
        **workload.series_meta(),  # a declared metric's name and capacity_per_replica
    }
    lag = demand_lag_seconds(workload.demand_query)
    if lag > 0:  # where the adapter reads the forecast for a given instant of the load
        meta["demand_lag_seconds"] = lag
    meta.update(capacity)
    return meta


def _instant(source, query: str | None, what: str, problems: list[str], default: bool = False) -> list[float] | None:
    """``default``: the query is the built-in kube-state-metrics one (an empty answer says how to do without)."""
    try:
        res = source.instant(query) if query and hasattr(source, "instant") else []
    except Exception as exc:  # noqa: BLE001 - a capacity problem is reported, not raised
        problems.append(f"{what} query failed: {exc}")
        return None
    if not res:
        problems.append(f"{what} query returned nothing: {query}{READINGS_HINT.get(what, '') if default else ''}")
        return None
    return [v for _, v in res]


def _capacity(workload, source) -> tuple[dict[str, Any], list[str]]:
    """Static capacity values or instant queries; problems are reported, not raised."""
    meta: dict[str, Any] = {}
    problems: list[str] = []
    cap = workload.capacity
    if cap.ready_pods is not None:
        meta["ready_pods"] = int(cap.ready_pods)
    elif (vals := _instant(source, workload.ready_pods_query(), "ready_pods", problems,
                           default=not cap.ready_pods_query)) is not None:
        meta["ready_pods"] = int(round(sum(vals)))
    if cap.cpu_request_cores is not None:
        meta["cpu_request_cores"] = float(cap.cpu_request_cores)
    elif workload.cpu_request_query() is not None and (  # None: a declared metric carries its capacity
            vals := _instant(source, workload.cpu_request_query(), "cpu_request", problems,
                             default=not cap.cpu_request_query)) is not None:
        meta["cpu_request_cores"] = float(np.mean(vals))
    return meta, problems


def _full_pull(config, source, workload, now: float) -> tuple[np.ndarray, np.ndarray]:
    src = config.source
    end = math.floor(now / src.step_seconds) * src.step_seconds  # a stable grid across refreshes
    frame = source.fetch(workload.demand_query, end - src.history_days * 86400.0, end, src.step_seconds,
                         series_id=workload.series_id)
    return frame_arrays(frame)


def _checked(sid: str, query: str, got: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not np.isfinite(got[1]).any():
        raise ModelError(f"demand query returned no data for {sid}: {query}")
    return got


def history_cache(config, source) -> HistoryCache:
    return HistoryCache(source, step_seconds=config.source.step_seconds, history_days=config.source.history_days)


# --- one step: fit what is due, then refresh ----------------------------------------------------


def train_once(config, source, store: ForecastStore | None, now: float | None = None, trainer: Trainer | None = None,
               history: HistoryCache | None = None, engine=None) -> dict[str, Any]:
    """One step of ``foresight train``: for every workload, pull history, retrain when due,
    refresh and publish. Returns {"trainer", "results": {series_id: {...}}}; a failing
    workload is reported in its result and does not stop the others. With ``history`` the
    workloads that are not due pull only their new samples (the due ones pull in full). With
    ``engine`` (``forecaster.engine``) the due per-series fits run on it, and the refreshes here."""
    now = time.time() if now is None else float(now)
    trainer = trainer or trainer_from_config(config, store)
    histories: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    results: dict[str, dict[str, Any]] = {}
    for w in config.series():
        sid = w.series_id
        try:
            if history is None:
                got = _full_pull(config, source, w, now)
            else:
                got = history.pull(sid, w.demand_query, now, full=trainer.due(sid, now))
            histories[sid] = _checked(sid, w.demand_query, got)
        except Exception as exc:  # noqa: BLE001 - one workload's failure is its own
            results[sid] = {"series_id": sid, "published": False, "error": str(exc)}
            _log_failure(sid, exc)
    caps = {w.series_id: _capacity(w, source) for w in config.series() if w.series_id in histories}
    due = {sid for sid in histories if trainer.due(sid, now)}
    global_fit = bool(due) and trainer.has_global()
    if global_fit:  # the global models train once across the fleet before the per-series fits
        if engine is None:
            trainer.fit_fleet({sid: histories[sid] for sid in due}, now=now,
                              capacities={sid: capacity_per_pod(caps[sid][0]) for sid in due})
        else:
            trainer.fit_global({sid: histories[sid] for sid in due}, now=now)
    fitted = global_fit
    if engine is not None and due:  # fitted there: the publish loop below only refreshes
        _fit_on_engine(engine, trainer, [(sid, *histories[sid], now, capacity_per_pod(caps[sid][0]))
                                         for sid in histories if sid in due], results)
        fitted = True
    for w in config.series():
        sid = w.series_id
        if sid in histories and sid not in results:  # not a failed fit
            ts, vals = histories[sid]
            results[sid] = _publish(trainer, w, ts, vals, now, caps[sid], fit=(sid in due) and not fitted,
                                    retrained=sid in due)
    return {"trainer": trainer, "results": results}


def _fit_on_engine(engine, trainer: Trainer, items: list, results: dict[str, dict[str, Any]]) -> None:
    """Fit ``items`` on ``engine`` and adopt the states; a failed fit is that workload's result."""
    for (sid, *_), got in zip(items, engine.map(fit_item, items, context=trainer.detached())):
        if isinstance(got, Exception):
            results[sid] = {"series_id": sid, "published": False, "error": str(got)}
            log.warning("%s", got)
        else:
            trainer.adopt(got)


def _publish(trainer: Trainer, w, ts, vals, now: float, cap: tuple[dict, list[str]], fit: bool,
             retrained: bool) -> dict[str, Any]:
    sid = w.series_id
    try:
        fc = step_workload(trainer, sid, ts, vals, now, workload_meta(w, cap[0]), fit=fit)
    except Exception as exc:  # noqa: BLE001
        _log_failure(sid, exc)
        return {"series_id": sid, "published": False, "error": str(exc)}
    return {"series_id": sid, "published": True, "model": fc.model, "status": fc.status, "reason": fc.reason,
            "retrained": retrained, "capacity_problems": cap[1]}


# --- the schedule: refreshes never wait for fits ----------------------------------------------


def _prefetch(fn: Callable[[Any], Any], items: Iterable[Any], threads: int, ahead: int) -> Iterator[tuple[Any, Any]]:
    """(item, fn(item) or the exception it raised), in order, with up to ``ahead`` calls in
    flight on ``threads`` threads: source latency overlaps the refreshes."""
    def safe(item):
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - handed to the caller as a value
            return exc

    if threads <= 1:
        for item in items:
            yield item, safe(item)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="foresight-pull") as pool:
        window: deque = deque()
        for item in items:
            window.append((item, pool.submit(safe, item)))
            if len(window) >= ahead:
                it, fut = window.popleft()
                yield it, fut.result()
        while window:
            it, fut = window.popleft()
            yield it, fut.result()


class Stopped(Exception):
    """A step ended early because the trainer is stopping (``TrainScheduler.stopping``)."""


class TrainScheduler:
    """The long-running trainer's pure step (``step(now)``) and the fit jobs it queues.

    ``step`` refreshes and publishes every workload from its incrementally pulled history with
    the model it has now (a placeholder persistence forecast before its first fit), then
    queues the due fits on ``fits``. It never runs a fit itself, except through
    ``InlineFits``' budget after the refreshes."""

    def __init__(self, config, source, trainer: Trainer, *, fits: ThreadFits | InlineFits,
                 history: HistoryCache | None = None, pull_threads: int = 4,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.source = source
        self.trainer = trainer
        self.fits = fits
        self.history = history or history_cache(config, source)
        self.pull_threads = int(pull_threads)
        self.clock = clock
        self._caps: dict[str, dict[str, Any]] = {}
        self._series = {w.series_id: w for w in config.series()}  # what a queued fit reads when it runs
        self._done_reported = fits.done  # fits may outlive a scheduler (a new trainer after a reload)
        self.stopping: Callable[[], bool] = lambda: False  # checked between workloads (run_schedule: SIGTERM)

    def reconfigure(self, config) -> list[str]:
        """Take a new workloads file in place (its fleet-wide settings unchanged): the series
        whose entry changed (query, capacity, labels, declared metrics, serving) or left are
        forgotten, with their history and checkpoints; new ones start as at start-up; every
        other series keeps its fitted model and history. Returns the series that start over."""
        from forecaster.checkpoint import GLOBAL_ID

        old = {w.series_id: w for w in self.config.series()}
        new = {w.series_id: w for w in config.series()}
        serving = config.serving_by_series()
        again = sorted(sid for sid in old if sid not in new or new[sid] != old[sid]
                       or self.trainer.serving_for(sid) != serving.get(sid, config.serving))
        self.trainer.serving_by_series = dict(serving)
        for sid in again:
            self.trainer.forget(sid)
            self._caps.pop(sid, None)
        self.history.forget(set(new) - set(again))
        if self.trainer.checkpoints is not None:
            self.trainer.checkpoints.prune((set(new) - set(again)) | {GLOBAL_ID})
        self.config, self._series = config, new
        return again + sorted(set(new) - set(old))

    def _pull(self, w, now: float):
        got = _checked(w.series_id, w.demand_query, self.history.pull(w.series_id, w.demand_query, now))
        return got, _capacity(w, self.source)

    def step(self, now: float) -> dict[str, Any]:
        """Refresh and publish every workload, then queue what is due; returns a report."""
        t0 = self.clock()
        self.fits.hold()
        try:
            results = self._refresh_all(now)
        finally:
            self.fits.release()
        refreshed_in = self.clock() - t0
        queued = self.queue_due(now, [w for w in self.config.series() if w.series_id in self._caps])
        self.fits.after_step()
        done, self._done_reported = self.fits.done - self._done_reported, self.fits.done
        return {"trainer": self.trainer, "results": results, "now": now, "refresh_seconds": refreshed_in,
                "published": sum(1 for r in results.values() if r.get("published")), "queued": queued,
                "fits_pending": self.fits.pending(), "fits_done": done,
                "pulls": {"full": self.history.stats.full, "incremental": self.history.stats.incremental}}

    def _refresh_all(self, now: float) -> dict[str, dict[str, Any]]:
        results: dict[str, dict[str, Any]] = {}
        pulls = _prefetch(lambda w: self._pull(w, now), self.config.series(), self.pull_threads,
                          ahead=8 * max(1, self.pull_threads))
        for w, got in pulls:
            if self.stopping():
                raise Stopped(f"stopped after refreshing {len(results)} workloads of {len(self._series)}")
            sid = w.series_id
            if isinstance(got, Exception):
                results[sid] = {"series_id": sid, "published": False, "error": str(got)}
                _log_failure(sid, got)
                continue
            (ts, vals), cap = got
            self._caps[sid] = cap[0]
            results[sid] = _publish(self.trainer, w, ts, vals, now, cap, fit=False, retrained=False)
        return results

    def queue_due(self, now: float, workloads: list) -> list[str]:
        """Queue the global model (when due) ahead of the due per-series fits, most due first."""
        tr = self.trainer
        queued = []
        due = [w for w in workloads if tr.due(w.series_id, now)]
        if due and tr.has_global() and (tr.global_fitted_at is None
                                        or now - tr.global_fitted_at >= tr.retrain_interval_seconds):
            if self.fits.put("<global>", (-1, 0.0), self._global_job(workloads)):
                queued.append("<global>")
        for w in sorted(due, key=lambda w: fit_priority(tr, w.series_id)):
            if self.fits.put(w.series_id, fit_priority(tr, w.series_id), self._fit_job(w)):
                queued.append(w.series_id)
        return queued

    def _fit_job(self, w) -> Callable[[], None]:
        sid = w.series_id

        def prepare() -> tuple:
            # the workload as the file says when the fit runs: it may have changed since queued
            cur = self._series.get(sid)
            if cur is None:
                raise ModelError(f"{sid} left the workloads file before its fit ran")
            now = self.clock()
            ts, vals = _checked(sid, cur.demand_query, self.history.pull(sid, cur.demand_query, now, full=True))
            return sid, ts, vals, now, capacity_per_pod(self._caps.get(sid, {}))

        def job() -> None:
            cur = self._series.get(sid)
            sid_, ts, vals, now, cap = prepare()
            self.trainer.fit(sid_, ts, vals, now=now, capacity_per_pod=cap)
            if self._series.get(sid) is not cur:  # reconfigured while it fitted: that fit is of the old entry
                self.trainer.forget(sid)
        # EngineFits pulls here (prepare) and fits elsewhere; ThreadFits just calls job()
        job.prepare, job.trainer = prepare, self.trainer  # type: ignore[attr-defined]
        return job

    def _global_job(self, workloads: list) -> Callable[[], None]:
        def job() -> None:
            now = self.clock()
            data = {}
            for w in workloads:
                try:
                    data[w.series_id] = self.history.pull(w.series_id, w.demand_query, now, full=True)
                except Exception as exc:  # noqa: BLE001 - the fleet trains on what it can read
                    _log_failure(w.series_id, exc)
            self.trainer.fit_global(data, now=now)
        return job


def run_schedule(config, source, store, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] | None = None, iterations: int | None = None,
                 on_step: Callable[[dict], None] | None = None, fits: ThreadFits | InlineFits | None = None,
                 pull_threads: int = 4, engine=None, checkpoint_dir: str | None = None,
                 checkpoint_key: bytes | None = None, config_path: str | None = None) -> Trainer:
    """Every ``refresh_interval_seconds`` one ``TrainScheduler.step``; fits run on ``fits``
    (a ``ThreadFits`` by default, ``forecaster.engines.fits.EngineFits`` with ``engine``) and never
    delay the next step. With ``checkpoint_dir`` the fitted states are checkpointed there and
    restored from it first (``forecaster.checkpoint``), so the first step serves them. With
    ``config_path`` the file is re-read before every step and taken in place
    (``TrainScheduler.reconfigure``): only the workloads whose entry changed start over.
    SIGTERM (run in the main thread) ends it between two workloads or while it waits; with
    ``checkpoint_dir`` it leaves its history windows there, which the next start takes up
    (``forecaster.handover``). ``sleep``: how it waits (default: until the next step or a SIGTERM)."""
    stop = Stop()
    with stop:  # from the start: a SIGTERM during the restore is seen once it is done
        return _run(config, source, store, stop, clock=clock, pause=sleep or stop.pause, iterations=iterations,
                    on_step=on_step, fits=fits, pull_threads=pull_threads, engine=engine,
                    checkpoint_dir=checkpoint_dir, checkpoint_key=checkpoint_key, config_path=config_path)


def _queries(config) -> dict[str, str]:
    return {w.series_id: w.demand_query for w in config.series()}


def _run(config, source, store, stop: Stop, *, clock, pause, iterations, on_step, fits, pull_threads, engine,
         checkpoint_dir, checkpoint_key, config_path) -> Trainer:
    def new_trainer(cfg) -> Trainer:
        tr = trainer_from_config(cfg, store, clock)
        if checkpoint_dir:
            from forecaster.checkpoint import attach

            attach(tr, checkpoint_dir, [w.series_id for w in cfg.series()], key=checkpoint_key)
        return tr

    def scheduler(cfg, tr: Trainer, history: HistoryCache | None = None) -> TrainScheduler:
        sched = TrainScheduler(cfg, source, tr, fits=fits, history=history, pull_threads=pull_threads, clock=clock)
        sched.stopping = lambda: stop.requested
        return sched

    history = history_cache(config, source)
    with ThreadPoolExecutor(1, thread_name_prefix="foresight-windows") as pool:
        # a predecessor's windows are read (the I/O and the tag need no GIL) while the states unpickle
        windows = pool.submit(load_rings, history, CheckpointDir(checkpoint_dir, key=checkpoint_key), _queries(config),
                              config.source.url) if checkpoint_dir else None
        trainer = new_trainer(config)
    if windows is not None:
        windows.result()  # raises what it raised
    watch = ConfigWatch(config_path, config) if config_path else None
    hold = config.training.refresh_interval_seconds
    if fits is None and engine is not None:
        from forecaster.engines.fits import EngineFits

        fits = EngineFits(engine, max_hold_seconds=hold)
    fits = fits if fits is not None else ThreadFits(max_hold_seconds=hold)
    sched = scheduler(config, trainer, history)
    interval = config.training.refresh_interval_seconds
    i = 0
    try:
        while (iterations is None or i < iterations) and not stop.requested:
            new = watch.changed() if watch is not None else None
            if new is not None and fleet_settings(new) != fleet_settings(sched.config):
                log.warning("fleet-wide settings (source, store, training, serving) changed: a new trainer; "
                            "every workload is refitted")
                trainer = new_trainer(new)
                sched = scheduler(new, trainer)
            elif new is not None:
                again = sched.reconfigure(new)
                log.info("workloads file changed: %d series start over (%s), the others keep their fitted models",
                         len(again), ", ".join(again[:10]) + (" ..." if len(again) > 10 else ""))
            t0 = clock()
            try:
                out = sched.step(t0)
            except Stopped as exc:
                log.info("%s", exc)
                break
            if on_step:
                on_step(out)
            i += 1
            if iterations is not None and i >= iterations:
                break
            pause(max(0.0, interval - (clock() - t0)))
        if stop.requested:
            _hand_over(sched, trainer)
    finally:
        # at SIGTERM a running fit is not waited for: it is refitted on schedule after the restart
        fits.stop(timeout=0.0 if stop.requested else 5.0)
    return trainer


def _hand_over(sched: TrainScheduler, trainer: Trainer) -> None:
    if trainer.checkpoints is None:
        log.info("SIGTERM: the trainer stops")
        return
    t0 = time.monotonic()
    n, size = save_rings(sched.history, trainer.checkpoints, _queries(sched.config), sched.config.source.url)
    log.info("SIGTERM: the trainer stops; saved the history windows of %d workloads (%.0f MB) to %s in %.1f s",
             n, size / 1e6, trainer.checkpoints.path, time.monotonic() - t0)
