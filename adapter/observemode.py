"""What the operator's Observe mode says, for the REST API and the dashboard.

The operator runs the shadow HPA (kubeoperator/observe.py) and writes its line into each
PredictiveAutoscaler's ``status.observe``. The adapter lists those objects every
``resync_seconds`` (one request for all of them) and keeps, per workload (``namespace/target``),
the autoscaler's mode and that block. A request reads a dict; it never waits on the API server.

Degradation: an autoscaler list the API server refuses (403: the adapter's ServiceAccount needs
``get, list`` on ``predictiveautoscalers.foresight.dev``) or cannot answer leaves the last view in
place and ``last_error`` saying why (in the ``/readyz`` body as ``observe_view_error``); rows of
workloads never listed carry ``observe: null``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping

log = logging.getLogger("foresight.adapter.observemode")

def view_of(items) -> dict[str, dict]:
    """series id -> {autoscaler, mode, observe, hpa} from a PredictiveAutoscaler list; ``hpa``:
    the target Value and replica bounds its HPA is written with (the dashboard's desired line)."""
    out: dict[str, dict] = {}
    for o in items or ():
        md, spec, st = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
        target = (spec.get("scaleTargetRef") or {}).get("name")
        if not target or not md.get("namespace"):
            continue
        out[f"{md['namespace']}/{target}"] = {
            "autoscaler": md.get("name"), "mode": spec.get("mode") or "Act",
            "observe": st.get("observe") if (spec.get("mode") == "Observe") else None,
            "hpa": {"target_value": (spec.get("serving") or {}).get("targetValue"),
                    "min_replicas": spec.get("minReplicas"), "max_replicas": spec.get("maxReplicas")},
        }
    return out


class ObserveView:
    """The autoscalers' modes and Observe lines, re-listed in a thread."""

    def __init__(self, kube, resync_seconds: float = 15.0, timeout_seconds: float = 10.0) -> None:
        self.kube = kube
        self.resync_seconds = float(resync_seconds)
        self.timeout = float(timeout_seconds)
        self._view: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.synced = False

    def of(self, series_id: str) -> Mapping[str, Any] | None:
        return self._view.get(series_id)

    def refresh(self) -> None:
        from core.kubeclient import KubeUnavailable

        try:
            body = self.kube.list_autoscalers()
        except KubeUnavailable as exc:
            hint = (" (grant the adapter's ServiceAccount get, list on predictiveautoscalers.foresight.dev)"
                    if exc.status == 403 else "")
            what = f"HTTP {exc.status}" if exc.status else str(exc)
            self.last_error = f"listing PredictiveAutoscalers: {what}{hint}"
            return
        if body is None:  # the CRD is not installed: no autoscalers, nothing observed
            self._view, self.last_error, self.synced = {}, None, True
            return
        self._view, self.last_error, self.synced = view_of(body.get("items")), None, True

    def _run(self) -> None:
        said = None  # each new error is logged once, not every resync
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the dashboard keeps its last view
                self.last_error = f"listing PredictiveAutoscalers: {exc.__class__.__name__}: {exc}"
            if self.last_error and self.last_error != said:
                log.warning("observe view: %s", self.last_error)
            said = self.last_error
            self._stop.wait(self.resync_seconds)

    def start(self) -> "ObserveView":
        self._thread = threading.Thread(target=self._run, name="foresight-observe-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)


def observe_row(view: ObserveView | None, series_id: str, ready_now) -> dict | None:
    """The REST row's ``observe``: None for a workload in Act mode (or no autoscaler); else
    the would-have line beside the actual replicas, with the pods ready now from the watch
    (``ready_now``: a callable, asked only for an observed workload)."""
    if view is None:
        return None
    v = view.of(series_id)
    if v is None or v["mode"] != "Observe":
        return None
    ob = dict(v.get("observe") or {})
    line = [{"t": p[0], "would_have": p[1], "actual": None if p[2] < 0 else p[2]} for p in ob.pop("recent", []) or []]
    return {"autoscaler": v["autoscaler"], "would_have_replicas": ob.get("wouldHaveReplicas"),
            "actual_replicas": ob.get("actualReplicas"), "ready_replicas_now": ready_now(),
            "needed_replicas": ob.get("neededReplicas"),
            "under_capacity_minutes": ob.get("underCapacityMinutes"), "since": ob.get("since"),
            "last_sync_at": ob.get("lastSyncAt"), "reason": ob.get("reason"), "line": line,
            "view_error": view.last_error}

