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

Only ``forecaster.engines.ray_engine`` and ``forecaster.engines.ray_train`` (the global LSTM on
Ray Train) import ray.
"""

from __future__ import annotations

import importlib

from forecaster.engines.base import (  # noqa: F401 - the seam's public names
    Engine,
    EngineError,
    MapStats,
    Progress,
    auto_batch_size,
    batches,
    run_batch,
)

__all__ = ["Engine", "EngineError", "MapStats", "ENGINES", "open_engine", "batches", "run_batch", "auto_batch_size"]

# name -> "module:Class"; heavy imports stay inside each engine's module
ENGINES: dict[str, str] = {
    "local": "forecaster.engines.local:LocalEngine",
    "ray": "forecaster.engines.ray_engine:RayEngine",
}

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
