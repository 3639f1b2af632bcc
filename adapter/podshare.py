"""One pod watch per adapter replica, however many uvicorn workers it runs.

Each worker process builds its own app, and so its own :class:`adapter.readypods.PodWatch`: with
``--workers=2`` a replica would hold two cluster-wide pod lists and watches, and two replicas
four. :class:`SharedPodWatch` wraps a worker's PodWatch so that only one worker of the replica
runs it, and the others read what it counts:

- the workers share a private directory (``foresight serve`` makes one per replica and passes it
  to its workers; /tmp is the pod's own emptyDir in the chart);
- the worker holding an exclusive ``flock`` on ``leader.lock`` starts its watch and writes its
  counts to ``snapshot`` (marshal, replaced atomically) when they change, at most every
  ``publish_seconds``, and at least every ``max_age_seconds / 3`` so readers can tell a live
  leader from a dead one; the kernel drops the lock when that process dies, and the next worker
  to try takes over (it lists pods afresh);
- the other workers reload the snapshot when its mtime changes (a stat every
  ``publish_seconds``, in a thread: ``count`` stays a dict read) and forward workloads they are
  asked about but do not know to the leader's resolver through an append-only ``wanted`` file.

Why files and not a socket or shared memory: readers need the whole table (one small dict per
workload), writes come at most once a second, and a file needs no server, no protocol and no
cleanup beyond the directory. A follower serves counts at most ``publish_seconds`` older than the
leader's, against the HPA's 15-s sync. A snapshot older than ``max_age_seconds`` counts as none:
the workers degrade to the published ``meta.ready_pods`` as when no watch runs.
"""

from __future__ import annotations

import fcntl
import json
import logging
import marshal
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from adapter.readypods import FIRST_LIST_GRACE_SECONDS, PodWatch

log = logging.getLogger("foresight.adapter.podshare")

__all__ = ["SharedPodWatch"]

# the wanted file is emptied by the leader once it has read this much (its lines are re-sent by
# followers that still miss a workload)
WANTED_MAX_BYTES = 1 << 20


class SharedPodWatch:
    """ReadyPods (adapter/readypods.py) for one worker among several of a replica (module doc)."""

    def __init__(self, watch: PodWatch, share_dir: str | os.PathLike, *, publish_seconds: float = 1.0,
                 max_age_seconds: float = 15.0, clock: Callable[[], float] = time.time) -> None:
        self.watch = watch
        self.dir = Path(share_dir)
        self.publish_seconds = float(publish_seconds)
        self.max_age_seconds = float(max_age_seconds)
        self.clock = clock
        self.leader = False
        self._lock_file: Any = None
        self._snap: dict[str, Any] = {}  # what a follower read: written, synced, known
        self._snap_mtime = -1
        self._published_version = -1
        self._published_at = -float("inf")
        self._wanted_offset = 0
        self._asked: dict[str, float] = {}  # series id -> when a follower last forwarded it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: float | None = None

    # --- what the adapter reads (the ReadyPods protocol) ---------------------------------
    def count(self, series_id: str, meta: Mapping[str, Any] | None = None) -> int | None:
        if self.leader:
            return self.watch.count(series_id, meta)
        known = self._fresh()
        if known is None:
            return None
        hit = known.get(series_id)
        if hit is None:
            self._ask(series_id, meta)
            return None
        return hit[0]

    def cpu_request(self, series_id: str) -> float | None:
        if self.leader:
            return self.watch.cpu_request(series_id)
        hit = (self._fresh() or {}).get(series_id)
        if hit is None:
            return None
        _, total, n = hit
        return total / n if n > 0 and total > 0 else None

    def warming(self) -> bool:
        if self.leader:
            return self.watch.warming()
        if self._started_at is None or self._fresh() is not None:
            return False
        return time.monotonic() - self._started_at < FIRST_LIST_GRACE_SECONDS

    def _fresh(self) -> dict | None:
        """The follower's table when the leader published it recently and had listed pods."""
        snap = self._snap
        if not snap or not snap.get("synced") or self.clock() - snap.get("written", 0.0) > self.max_age_seconds:
            return None
        return snap["known"]

    def _ask(self, series_id: str, meta: Mapping[str, Any] | None) -> None:
        now = self.clock()
        if now - self._asked.get(series_id, -float("inf")) < self.watch.resync_seconds:
            return
        self._asked[series_id] = now
        line = json.dumps([series_id, dict(meta or {})], separators=(",", ":"), default=str) + "\n"
        try:
            # O_APPEND: each short line lands whole, whichever worker writes it
            fd = os.open(self.dir / "wanted", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            log.debug("pod watch share: cannot forward %s: %s", series_id, exc)

    # --- the loop ----------------------------------------------------------------------
    def start(self) -> "SharedPodWatch":
        self._started_at = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_file = open(self.dir / "leader.lock", "a+")  # held for the process's life
        self._step()
        self._thread = threading.Thread(target=self._run, name="foresight-pod-watch-share", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.publish_seconds + 5)
        if self.leader:
            self.watch.stop()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock: another worker takes over
            self._lock_file = None
        self.leader = False

    def _run(self) -> None:
        while not self._stop.wait(self.publish_seconds):
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - a follower keeps its last table; the leader its watch
                log.warning("pod watch share: %s: %s", exc.__class__.__name__, exc)

    def _step(self) -> None:
        if not self.leader and self._try_lead():
            log.info("pod watch: this worker (pid %d) watches pods for the replica", os.getpid())
            self.watch.start()
        if self.leader:
            self._take_wanted()
            self._publish()
        else:
            self._reload()

    def _try_lead(self) -> bool:
        try:
            fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.leader = True
        return True

    def _publish(self) -> None:
        w = self.watch
        now = self.clock()
        if w.changes == self._published_version and now - self._published_at < self.max_age_seconds / 3:
            return
        version, synced, known = w.table()
        tmp = self.dir / f"snapshot.{os.getpid()}"
        tmp.write_bytes(marshal.dumps({"written": now, "synced": synced, "known": known}))
        os.replace(tmp, self.dir / "snapshot")
        self._published_version, self._published_at = version, now

    def _reload(self) -> None:
        path = self.dir / "snapshot"
        try:
            mtime = path.stat().st_mtime_ns
            if mtime == self._snap_mtime:
                return
            snap = marshal.loads(path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return  # no leader yet, or a file being replaced: the next step reads it
        self._snap, self._snap_mtime = snap, mtime

    def _take_wanted(self) -> None:
        path = self.dir / "wanted"
        try:
            with open(path, "rb") as f:
                f.seek(self._wanted_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next step
        self._wanted_offset += end
        for line in data[:end].splitlines():
            try:
                sid, meta = json.loads(line)
            except ValueError:
                continue
            self.watch.count(str(sid), meta)  # queues an unknown workload for the resolver
        if self._wanted_offset > WANTED_MAX_BYTES:
            os.truncate(path, 0)
            self._wanted_offset = 0
