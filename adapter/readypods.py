"""Ready pods as the HPA controller counts them, read from a watch.

For an External metric with a ``Value`` target the HPA multiplies the served ratio by the pods
of its scale target that are Running and Ready *at that sync* (``getReadyPodsCount`` in the
replica calculator). The ratio must be divided by that same count. The trainer's
``meta.ready_pods`` is up to a refresh old: right after a scale-up from N to 2N it would make the
HPA ask for about twice what it needs until the next refresh, positive feedback during exactly
the scale-ups a predictive autoscaler is for.

:class:`PodWatch` keeps, per workload (``namespace/name`` of a Deployment, StatefulSet or
ReplicaSet), the number of pods matching the workload's own selector with phase Running and the
Ready condition True, from one list + watch of pods (the list paged, ``page_size`` pods a page
with ``limit`` and ``continue``; the watch resumed from the list's resourceVersion, relisted on 410
Gone; all through core/kubeclient.py) and the workloads' selectors (re-read every ``resync_seconds``). ``count`` is a dict
read: a workload it does not know yet is queued for a resolver thread that reads its selector at
once, so a request never waits on the API server. Until the first list has completed, until a
new workload is resolved, or for a workload whose object cannot be read, it answers None and the
adapter serves with ``meta.ready_pods`` (the documented degradation).

The same pods give the CPU request per pod (``cpu_request``): the mean over the Ready pods of
each pod's summed container requests, which is what the HPA's Utilization divides by. So neither
ready pods nor requests need kube-state-metrics: the Kubernetes API has both.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

from adapter.quantity import parse_quantity
from core.kubeclient import POD_PAGE_SIZE

log = logging.getLogger("foresight.adapter.readypods")

__all__ = ["PodWatch", "ReadyPods", "label_selector_matches", "pod_counts", "pod_cpu_request", "running_and_ready",
           "workloads_of"]

# /readyz waits this long at most for the first list of pods: a replica that joins the Service
# before it has counted pods answers "ready pod count unknown" where kube-state-metrics is not
# scraped (its HPAs' syncs fail), but an API server that cannot be listed must not keep the
# replica out of the Service for good (discovery would fail for every HPA).
FIRST_LIST_GRACE_SECONDS = 30.0


class ReadyPods(Protocol):
    def count(self, series_id: str, meta: Mapping[str, Any] | None = None) -> int | None:
        """Ready pods of the workload's scale target now, or None when not known (``meta``: the
        forecast's, naming the workload's namespace, kind and name)."""

    def cpu_request(self, series_id: str) -> float | None:
        """The mean CPU request (cores) of those Ready pods, or None when not known."""

    def warming(self) -> bool:
        """True while the first list of pods is still under way (and not given up on)."""


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions) against a pod's labels; an
    empty or missing selector matches nothing (as for a workload's pods)."""
    if not selector:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def running_and_ready(pod: Mapping[str, Any]) -> bool:
    """What the HPA counts: phase Running and condition Ready True."""
    st = pod.get("status") or {}
    if st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def pod_cpu_request(pod: Mapping[str, Any]) -> float | None:
    """A pod's CPU request in cores: its containers' and native sidecars' (init containers with
    restartPolicy Always) requests summed, as the HPA sums them. None when a container has no CPU
    request (the HPA then refuses Utilization for the pod) or one cannot be parsed."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []),
                  *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always")]
    if not containers:
        return None
    total = 0.0
    for c in containers:
        cpu = ((c.get("resources") or {}).get("requests") or {}).get("cpu")
        if cpu is None:
            return None
        try:
            total += float(parse_quantity(str(cpu)))
        except ValueError:
            return None
    return total


def pod_counts(pods: Iterable[Mapping[str, Any]], selectors: Mapping[str, tuple[str, Mapping[str, Any]]]
               ) -> tuple[dict[str, int], dict[str, tuple[float, int]]]:
    """For ``selectors`` (series id -> (namespace, selector)): series id -> ready pods, and
    series id -> (summed CPU request, pods with one) over those ready pods."""
    out = {sid: 0 for sid in selectors}
    req: dict[str, tuple[float, int]] = {sid: (0.0, 0) for sid in selectors}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not running_and_ready(pod):
            continue
        for sid, (ns, sel) in selectors.items():
            if meta.get("namespace") == ns and label_selector_matches(sel, meta.get("labels") or {}):
                out[sid] += 1
                if pod.get("cpu") is not None:
                    total, n = req[sid]
                    req[sid] = (total + pod["cpu"], n + 1)
    return out, req


@dataclass
class _State:
    pods: dict[str, dict] = field(default_factory=dict)  # uid -> pod (metadata and status only)
    selectors: dict[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    requests: dict[str, tuple[float, int]] = field(default_factory=dict)  # sid -> (summed request, pods)
    by_ns: dict[str, list[tuple[str, Mapping[str, Any]]]] = field(default_factory=dict)  # namespace -> (sid, selector)
    synced: bool = False


class PodWatch:
    """Ready pods per workload from a list + watch of pods (see the module doc).

    kube: a ``core.kubeclient.KubeClient``; workloads: a callable returning series id ->
    (namespace, kind, name), re-read at every resync; page_size: pods per page of the list.
    """

    def __init__(self, kube, workloads: Callable[[], Mapping[str, tuple[str, str, str]]],
                 resync_seconds: float = 30.0, timeout_seconds: float = 10.0,
                 page_size: int = POD_PAGE_SIZE) -> None:
        self.kube = kube
        self.page_size = int(page_size)
        self.lists = 0  # completed lists (the first, and one after each 410 Gone)
        self.workloads = workloads
        self.resync_seconds = float(resync_seconds)
        self.timeout = float(timeout_seconds)
        self._st = _State()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._missing: dict[str, float] = {}  # series id -> when its workload could not be read
        self._extra: dict[str, tuple[str, str, str]] = {}  # workloads first seen by count()
        self._wanted: queue.Queue = queue.Queue(maxsize=10_000)
        self._asked: set[str] = set()  # series ids queued for the resolver
        self._resolver: threading.Thread | None = None
        self.errors = 0
        self.changes = 0  # bumped by every change of the counts (adapter/podshare.py publishes on it)
        self._started_at: float | None = None

    # --- what the adapter reads -------------------------------------------------------
    def count(self, series_id: str, meta: Mapping[str, Any] | None = None) -> int | None:
        """A dict read; a workload not known yet is queued for the resolver thread (a request
        never waits on the API server) and answers None until it is resolved."""
        st = self._st
        if not st.synced:
            return None
        if series_id not in st.selectors:
            if series_id not in self._asked:
                self._asked.add(series_id)
                try:
                    self._wanted.put_nowait((series_id, dict(meta or {})))
                except queue.Full:
                    self._asked.discard(series_id)
            return None
        return st.counts.get(series_id)

    def cpu_request(self, series_id: str) -> float | None:
        """The mean CPU request of the workload's Ready pods; None until count() knows the
        workload, or while none of its Ready pods has a request."""
        st = self._st
        if not st.synced or series_id not in st.selectors:
            return None
        total, n = st.requests.get(series_id, (0.0, 0))
        return total / n if n > 0 and total > 0 else None

    def _resolve_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sid, meta = self._wanted.get(timeout=0.5)
            except queue.Empty:
                continue
            self._resolve(sid, meta)
            self._asked.discard(sid)

    def _resolve(self, series_id: str, meta: Mapping[str, Any]) -> bool:
        """Read a workload's selector when it is first asked for (a workload created after the
        last resync must not be divided by a stale count during its first scale-up)."""
        now = time.monotonic()
        if now - self._missing.get(series_id, -math.inf) < self.resync_seconds:
            return False
        ns, _, name = series_id.partition("/")
        target = (str(meta.get("namespace", ns)), str(meta.get("kind", "Deployment")), str(meta.get("workload", name)))
        try:
            sel = self._selector(*target)
        except Exception as exc:  # noqa: BLE001 - served with the published count meanwhile
            log.warning("pod watch: the selector of %s: %s: %s", series_id, exc.__class__.__name__, exc)
            sel = None
        if sel is None:
            self._missing[series_id] = now
            return False
        with self._lock:
            self._extra[series_id] = target
            self._st.selectors = {**self._st.selectors, series_id: (target[0], sel)}
            self._recount()
        return True

    def table(self) -> tuple[int, bool, dict[str, tuple[int, float, int]]]:
        """(changes, listed yet, series id -> (ready pods, summed CPU request, pods with one)) of
        every workload known, consistent at one moment (what adapter/podshare.py publishes)."""
        with self._lock:
            st = self._st
            known = {sid: (st.counts.get(sid, 0), *st.requests.get(sid, (0.0, 0))) for sid in st.selectors}
            return self.changes, st.synced, known

    # --- the loop ----------------------------------------------------------------------
    def warming(self) -> bool:
        if self._st.synced or self._started_at is None:
            return False
        return time.monotonic() - self._started_at < FIRST_LIST_GRACE_SECONDS

    def start(self) -> "PodWatch":
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="foresight-pod-watch", daemon=True)
        self._thread.start()
        self._resolver = threading.Thread(target=self._resolve_loop, name="foresight-pod-watch-resolver", daemon=True)
        self._resolver.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in (self._thread, self._resolver):
            if t is not None:
                t.join(self.timeout + 5)

    def _selector(self, ns: str, kind: str, name: str) -> Mapping[str, Any] | None:
        obj = self.kube.read_workload(ns, kind, name)
        return ((obj or {}).get("spec") or {}).get("selector") or None

    def _run(self) -> None:
        from core.kubeclient import KubeGone

        rv = None
        while not self._stop.is_set():
            try:
                self._resync_selectors()
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
            except KubeGone:
                # a continue token or resourceVersion older than the API server keeps: list again
                # now (not an error: etcd compaction does this every few minutes)
                rv = None
            except Exception as exc:  # noqa: BLE001 - the adapter keeps serving with meta.ready_pods
                self.errors += 1
                log.warning("pod watch: %s: %s (serving with the published ready_pods until it recovers)",
                            exc.__class__.__name__, exc)
                rv = None
                self._stop.wait(min(5.0, self.resync_seconds))

    def _resync_selectors(self) -> None:
        sels: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for sid, (ns, kind, name) in {**self._extra, **dict(self.workloads())}.items():
            sel = self._selector(ns, kind, name)
            if sel:
                sels[sid] = (ns, sel)
        with self._lock:
            if sels != self._st.selectors:
                self._st.selectors = sels
                self._recount()

    def _list(self) -> str:
        """Every pod, ``page_size`` at a time (a cluster of 100k pods is not one response the
        API server builds in memory, nor one this process parses at once); the resourceVersion
        the watch resumes from."""
        items, rv = self.kube.list_pods(self.page_size)
        pods = {}
        for p in items:
            uid = (p.get("metadata") or {}).get("uid")
            if uid:
                pods[uid] = _slim(p)
        with self._lock:
            self._st.pods = pods
            self._recount()
            self._st.synced = True
            self.lists += 1
        return rv

    def _watch(self, rv: str) -> str:
        """Apply watch events until the server closes the stream (after about a resync);
        returns the resourceVersion to resume from (KubeGone: relist)."""
        for ev in self.kube.watch_pods(rv, int(self.resync_seconds)):
            if self._stop.is_set():
                return rv
            obj = ev.get("object") or {}
            typ = ev.get("type")
            meta = obj.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            if typ == "BOOKMARK" or not meta.get("uid"):
                continue
            with self._lock:
                self._apply(meta["uid"], None if typ == "DELETED" else _slim(obj))
        return rv

    def _apply(self, uid: str, pod: dict | None) -> None:
        """One pod added, changed or deleted (None): only the workloads of its namespace whose
        selector it matched before or matches now change their count, so an event costs the
        namespace's workloads, not every pod times every workload."""
        st = self._st
        self.changes += 1
        old = st.pods.pop(uid, None)
        if pod is not None:
            st.pods[uid] = pod
        for p, sign in ((old, -1), (pod, 1)):
            if p is None:
                continue
            for sid in _ready_matches(p, st.by_ns):
                st.counts[sid] = st.counts.get(sid, 0) + sign  # one value per key: count() reads without the lock
                if p.get("cpu") is not None:
                    total, n = st.requests.get(sid, (0.0, 0))
                    st.requests[sid] = (total + sign * p["cpu"], n + sign)

    def _recount(self) -> None:
        # a new dict, swapped in whole: count() reads without the lock
        self.changes += 1
        by_ns: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for sid, (ns, sel) in self._st.selectors.items():
            by_ns.setdefault(ns, []).append((sid, sel))
        self._st.by_ns = by_ns
        self._st.counts, self._st.requests = pod_counts(self._st.pods.values(), self._st.selectors)


def _ready_matches(pod: Mapping[str, Any] | None, by_ns: Mapping[str, list]) -> list[str]:
    """The series ids whose selector a Running and Ready pod matches (none for another pod)."""
    if pod is None or not running_and_ready(pod):
        return []
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return [sid for sid, sel in by_ns.get(meta.get("namespace") or "", ()) if label_selector_matches(sel, labels)]


def _slim(pod: Mapping[str, Any]) -> dict:
    """What counting needs of a pod (namespace, labels, phase, conditions, its CPU request)."""
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    return {"metadata": {"namespace": meta.get("namespace"), "labels": dict(meta.get("labels") or {})},
            "cpu": pod_cpu_request(pod),
            "status": {"phase": st.get("phase"),
                       "conditions": [{"type": c.get("type"), "status": c.get("status")} for c in st.get("conditions") or []]}}


def workloads_of(configured: Mapping[str, tuple[str, str, str]], cache) -> Callable[[], dict[str, tuple[str, str, str]]]:
    """series id -> (namespace, kind, name) of every workload the adapter serves: the configured
    ones, and those whose forecasts it holds (their published meta)."""

    def read() -> dict[str, tuple[str, str, str]]:
        out = dict(configured)
        for fc in cache.forecasts():
            ns, _, name = fc.series_id.partition("/")
            meta = fc.meta or {}
            if meta.get("metric"):  # a declared metric's series: its workload's own entry counts
                continue
            out[fc.series_id] = (str(meta.get("namespace", ns)), str(meta.get("kind", "Deployment")),
                                 str(meta.get("workload", name)))
        return out

    return read
