"""kube-scheduler HTTP extender and placement API, driven by node CPU and memory forecasts.

``register_scheduler_routes(app, store, settings)`` adds ``POST /scheduler/filter``,
``POST /scheduler/prioritize`` and ``GET /api/v1/placement`` to a FastAPI app. Scores come
from ``forecaster.nodes`` (shared with the warm pool), read from an in-process snapshot of the
store's ``node/*``, ``node-memory/*`` and ``zone/*`` forecasts, and weigh the pod's memory
request (``podrequest``) against each node's predicted memory room (``answers``). See
manifests/scheduler/README.md for the opt-in scheduler profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapter.scheduler.settings import SchedulerSettings

if TYPE_CHECKING:  # pragma: no cover
    from adapter.scheduler.routes import SchedulerExtender

__all__ = ["SchedulerSettings", "register_scheduler_routes"]


def register_scheduler_routes(app: Any, store: Any, settings: SchedulerSettings | None = None) -> "SchedulerExtender":
    """See ``adapter.scheduler.routes.register_scheduler_routes`` (imported lazily: FastAPI)."""
    from adapter.scheduler.routes import register_scheduler_routes as _register

    return _register(app, store, settings)
