"""The trainer's fit worker on an engine: the schedule's due fits as one ``map`` per queue drain."""

from __future__ import annotations

import heapq
import logging
from typing import Any

from forecaster.fitqueue import ThreadFits
from forecaster.training import fit_item

log = logging.getLogger(__name__)


class EngineFits(ThreadFits):
    """``ThreadFits`` whose worker takes every queued fit at once: it pulls the histories here,
    fits them as one ``map`` on ``engine`` (``forecaster.engine``, e.g. a Ray cluster) and adopts
    the fitted states here. Jobs without a per-series part (the global model) run in the thread."""

    def __init__(self, engine, **kwargs: Any) -> None:
        self.engine = engine
        super().__init__(**kwargs)

    def run_one(self) -> bool:
        with self.cond:
            taken = [heapq.heappop(self._heap)[2:] for _ in range(len(self._heap))]
        if not taken:
            return False
        items, keys, trainer = [], [], None
        for key, job in taken:
            try:
                if hasattr(job, "prepare"):
                    items.append(job.prepare())
                    keys.append(key)
                    trainer = job.trainer
                    continue
                job()
            except Exception:  # one failed fit never stops the worker
                log.exception("fit job %s failed", key)
            self.finish(key)
        try:
            if items:
                for got in self.engine.map(fit_item, items, context=trainer.detached()):
                    if isinstance(got, Exception):
                        log.warning("%s", got)
                    else:
                        trainer.adopt(got)
        except Exception:  # the keys are released: the next step queues them again
            log.exception("fits on %s failed", getattr(self.engine, "name", "engine"))
        finally:
            for key in keys:
                self.finish(key)
        return True

    def stop(self, timeout: float | None = 5.0) -> None:
        super().stop(timeout)
        self.engine.close()
