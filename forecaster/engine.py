"""The engine seam: map a function over per-series work items, in batches, wherever the work runs.

    engine = open_engine("local", jobs=2)                        # today's behaviour (the default)
    engine = open_engine("ray", address="ray://head:10001")       # a Ray cluster (KubeRay)
    results = engine.map(fit_one, items, context=spec, progress=bar.update)
    engine.close()

``fn(context, item) -> result`` must be a module-level function (it travels by reference) and
should be pure: results come back to the caller, in input order, and the caller applies every
side effect (installing fitted models, publishing, writing rows). A batch that an engine reruns
after a worker died therefore never counts a series twice. ``context`` is what every item
shares (settings, trained global models); it is shipped to each worker once per ``map``, not
once per item.

Only ``forecaster.engines.ray_engine`` imports ray.
"""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from forecaster.errors import UserError

__all__ = ["Engine", "EngineError", "MapStats", "ENGINES", "open_engine", "batches", "run_batch", "auto_batch_size"]

# name -> "module:Class"; heavy imports stay inside each engine's module
ENGINES: dict[str, str] = {
    "local": "forecaster.engines.local:LocalEngine",
    "ray": "forecaster.engines.ray_engine:RayEngine",
}

Progress = Callable[[int], None]  # called with the number of items just finished


class EngineError(UserError):
    """An engine cannot be opened or reached (unknown name, Ray missing, cluster unreachable)."""


@dataclass
class MapStats:
    """What the last ``map`` cost: ``task_seconds`` is the time spent inside ``fn`` summed over
    items (on whichever worker ran them), ``seconds`` the caller's wall time."""

    items: int = 0
    batches: int = 0
    batch_size: int = 0
    workers: int = 1
    seconds: float = 0.0
    task_seconds: float = 0.0

    def overhead(self) -> float:
        """Share of the workers' wall time not spent in ``fn`` (scheduling, transfer, imbalance)."""
        busy = self.seconds * max(1, min(self.workers, self.batches or 1))
        return max(0.0, 1.0 - self.task_seconds / busy) if busy > 0 else 0.0


@runtime_checkable
class Engine(Protocol):
    name: str
    workers: int
    last_stats: MapStats

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, context: Any = None,
            batch_size: int | None = None, progress: Progress | None = None) -> list[Any]:
        """``[fn(context, item) for item in items]``, run on the engine's workers."""
        ...

    def close(self) -> None: ...


def auto_batch_size(n: int, workers: int, waves: int = 4) -> int:
    """Items per task: about ``waves`` tasks per worker. Few tasks keep the per-task cost (a
    few ms on Ray) far below the work in them; more than one wave per worker lets a fast
    worker take a slow one's share and makes a retried batch cheap."""
    return max(1, math.ceil(n / max(1, workers * waves)))


def batches(items: Sequence[Any], size: int) -> list[list[Any]]:
    size = max(1, int(size))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def run_batch(fn: Callable[[Any, Any], Any], context: Any, batch: Sequence[Any]) -> tuple[list[Any], float]:
    """What a worker runs for one batch: the results and the seconds spent in ``fn``."""
    t0 = time.perf_counter()
    out = [fn(context, item) for item in batch]
    return out, time.perf_counter() - t0


def open_engine(name: str = "local", *, jobs: int = 1, address: str | None = None) -> Engine:
    """The engine called ``name``: ``local`` (in process, or ``jobs`` spawned processes) or
    ``ray`` (``address``: ray://HOST:10001, HOST:6379, or None for $RAY_ADDRESS / a local one)."""
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r}; known: {sorted(ENGINES)}")
    if jobs < 1:
        raise EngineError(f"--jobs must be >= 1 (got {jobs})")
    if address and name != "ray":
        raise EngineError(f"--ray-address {address!r} needs --engine ray")
    module, cls = ENGINES[name].split(":")
    factory = getattr(importlib.import_module(module), cls)
    return factory(jobs=jobs) if name == "local" else factory(address=address)


def add_engine_arguments(parser, jobs: bool = False) -> None:
    """``--engine local|ray`` and ``--ray-address`` (and ``--jobs`` when asked) on a sub-command."""
    parser.add_argument("--engine", choices=sorted(ENGINES), default="local",
                        help="where the per-series work runs: local (this process, or --jobs processes; "
                             "the default) or ray (Ray tasks on a cluster)")
    parser.add_argument("--ray-address", default=None, metavar="ray://HOST:10001",
                        help="with --engine ray: the cluster (default $RAY_ADDRESS, else a local Ray of --jobs CPUs)")
    if jobs:
        parser.add_argument("--jobs", type=int, default=1, help="worker processes of the local engine (one per core)")


def engine_from_args(args, default_jobs: int = 1) -> Engine:
    """The engine the command-line flags ask for."""
    name = getattr(args, "engine", "local") or "local"
    jobs = int(getattr(args, "jobs", default_jobs) or default_jobs)
    if name == "ray":
        if jobs < 1:
            raise EngineError(f"--jobs must be >= 1 (got {jobs})")
        from forecaster.engines.ray_engine import RayEngine

        # --jobs sizes a Ray started here; a cluster brings its own CPUs
        return RayEngine(address=args.ray_address, num_cpus=jobs if jobs > 1 else None)
    return open_engine(name, jobs=jobs, address=getattr(args, "ray_address", None))
