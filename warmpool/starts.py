"""What the controller tells the cold-start model (``warmpool.coldstart``) about the starts it
makes. Part of ``warmpool.controller.Controller`` (the same lock and pool state).

Each pool's starts are of its backend's kind (``Backend.start_kind``: a container or a pod).
A backend measures a container's components when it makes it; a pod's start (create ->
Ready) is known only later, when a listing shows it Ready (``Container.start_ms``). Only
containers this controller started are recorded, each once: their ids wait in
``starting`` until their start is reported or they are gone, so a restarted controller
adopting existing pods records none of them.
"""

from __future__ import annotations

from typing import Mapping

from core.errors import UserError
from warmpool.coldstart import COMPONENTS
from warmpool.policy import PoolSpec
from warmpool.reconcile import Container


class Starts:
    def start_kind(self, spec: PoolSpec) -> str:
        """What the pool's backend starts (the policy's word for it when it is unavailable)."""
        try:
            return self.backend(spec).start_kind
        except UserError:
            return spec.start_kind

    def _observe_start(self, st, c: Container, timings: Mapping[str, float]) -> None:
        """A container this controller just started: what the backend measured now, and its
        whole start later if the backend reports that after the fact (``_learn_starts``)."""
        with self._lock:
            st.starting.add(c.id)
        try:
            self.coldstart.observe(self.start_kind(st.spec), st.spec.runtime_class,
                                   **{f"{k}_ms": float(v) for k, v in timings.items() if k in COMPONENTS})
        except ValueError:
            pass

    def _learn_starts(self, st, listed: list[Container], kind: str) -> None:
        """Record the start of each container this controller started, once, when the backend
        first reports it (a pod: once it is Ready)."""
        with self._lock:
            done = [c for c in listed if c.start_ms is not None and c.id in st.starting]
            st.starting -= {c.id for c in done}
        for c in done:
            try:
                self.coldstart.observe_total(kind, st.spec.runtime_class, c.start_ms)
            except ValueError:
                pass

    def _export_model(self) -> None:
        for kind, rc in {(self.start_kind(p), p.runtime_class) for p in self.policy.pools}:
            est = self.coldstart.estimate(kind, rc)
            for comp, vals in [("total", est.total_ms), *est.components_ms.items()]:
                for q, v in zip(("p50", "p90", "p99"), vals):
                    self.metrics.of("model", kind, rc, comp, q).set(v / 1000.0)

    def coldstart_view(self) -> list[dict]:
        """Every seeded or observed (start kind, runtime class), the pools' first."""
        used = sorted({(self.start_kind(p), p.runtime_class) for p in self.policy.pools})
        rest = [k for k in self.coldstart.keys() if k not in used]
        return [self.coldstart.estimate(*k).as_dict() for k in used + rest]
