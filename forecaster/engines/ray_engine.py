"""The ``ray`` engine: batches of per-series work as Ray tasks. The only module that imports ray.

A batch is one task (``forecaster.engines.base.worker_batch``); the shared context is put in
the object store once per ``map``. Ray reruns a task whose worker process or node died
(``max_retries``); the results of a batch are taken once, from whichever attempt finished, so a
series is never lost or counted twice. Errors raised by the work itself are not retried: they would repeat.

A Ray started here (no address) runs its workers at the priority of this process
(``worker_niceness=0``) and without the dashboard. Ray's default renices every worker to 15 so
that its raylet and GCS stay responsive; beside any busy process of the same session at the
normal priority (the trainer's refresh loop, another pool) a niced worker then waits for a
core in the middle of its fits: pinned to one core beside one busy process, a fit took 4.36 s
at niceness 15 and 0.32 s at 0 (README, "Fleet scale"). A cluster (``address``) keeps the
settings its ``ray start`` was given: set ``RAY_worker_niceness=0`` there when its nodes run
other work too. Every task prepares its worker process once (``prepare_worker``: the allocator
keeps its freed heap, which a young process would otherwise fault back in for every fit).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Sequence

from forecaster.engines.base import EngineError, MapStats, Progress, auto_batch_size, batches, worker_batch

log = logging.getLogger(__name__)

CLIENT_ATTEMPTS = 3
WORKER_NICENESS = 0  # Ray's own default is 15 (see above)

try:
    import ray
except ImportError:  # pragma: no cover - reported when the engine is opened
    ray = None  # type: ignore[assignment]


def _connect(address: str | None, num_cpus: int | None, worker_niceness: int | None = WORKER_NICENESS,
             dashboard: bool = False) -> bool:
    """Connect (or start a local Ray when there is no address); True when this call did.
    ``worker_niceness`` (None: Ray's default) and ``dashboard`` only shape a Ray started here."""
    if ray is None:
        raise EngineError("--engine ray needs the ray package: pip install 'foresight[ray]'")
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if not address and not os.environ.get("RAY_ADDRESS"):
        if num_cpus:
            kwargs["num_cpus"] = int(num_cpus)  # a local Ray of exactly this size
        kwargs["include_dashboard"] = bool(dashboard)
        if worker_niceness is not None:
            kwargs["_system_config"] = {"worker_niceness": int(worker_niceness)}
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(address=address or None, **kwargs)
            return True
        except ConnectionAbortedError as exc:
            # the Ray client proxy sometimes loses the server it forks for a new client (a gRPC
            # fork race, ray-project/ray#63202); a new connection gets a new server
            if attempt == CLIENT_ATTEMPTS:
                raise _unreachable(address, exc) from exc
            log.warning("Ray client connection to %s failed (%s); retrying", address, str(exc).splitlines()[0])
            ray.shutdown()
        except Exception as exc:  # any other connection failure reads the same to a user
            raise _unreachable(address, exc) from exc
    return True


def _unreachable(address: str | None, exc: Exception) -> EngineError:
    return EngineError(f"cannot reach Ray at {address or os.environ.get('RAY_ADDRESS') or 'a new local instance'}: "
                       f"{exc}; start one with `ray start --head` or pass --ray-address ray://HOST:10001")


class RayEngine:
    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, max_retries: int = 3,
                 waves: int = 4, worker_niceness: int | None = WORKER_NICENESS, dashboard: bool = False) -> None:
        self.address = address
        self.max_retries = int(max_retries)
        self.waves = int(waves)
        self._owns = _connect(address, num_cpus, worker_niceness, dashboard)
        self._task = ray.remote(worker_batch).options(max_retries=self.max_retries, retry_exceptions=False,
                                                      num_cpus=1)
        self.workers = max(1, self.cluster_cpus())
        self.last_stats = MapStats(workers=self.workers)

    def cluster_cpus(self) -> int:
        """CPUs of the nodes alive now (a task takes one)."""
        return int(ray.cluster_resources().get("CPU", 0))

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any], *, context: Any = None,
            batch_size: int | None = None, progress: Progress | None = None) -> list[Any]:
        items = list(items)
        t0 = time.perf_counter()
        self.workers = max(1, self.cluster_cpus())
        size = batch_size or auto_batch_size(len(items), self.workers, self.waves)
        parts = batches(items, size)
        ctx = ray.put(context)
        index = {self._task.remote(fn, ctx, b): i for i, b in enumerate(parts)}
        results: list[list[Any] | None] = [None] * len(parts)
        pending = list(index)
        spent = cpu = 0.0
        faults = 0
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    res, secs, cpu_secs, flt = ray.get(ref)
                except ray.exceptions.RayTaskError:
                    raise  # the work itself failed: the caller sees its own exception
                except ray.exceptions.RayError as exc:
                    raise EngineError(f"a Ray batch failed after {self.max_retries} retries: {exc}") from exc
                results[index[ref]] = res
                spent += secs
                cpu += cpu_secs
                faults += flt
                if progress:
                    progress(len(res))
        self.last_stats = MapStats(len(items), len(parts), size, self.workers, time.perf_counter() - t0, spent, cpu, faults)
        return [r for part in results for r in part]  # type: ignore[union-attr]

    def close(self) -> None:
        if self._owns and ray.is_initialized():
            ray.shutdown()
            self._owns = False
