"""A trainer's handover to its successor: it stops at SIGTERM and leaves its history windows
beside the checkpoints, so the next trainer's first refresh pulls only the new samples.

    stop = Stop()                        # SIGTERM sets stop.requested (main thread only)
    with stop: ... stop.pause(seconds)   # the loop checks it between workloads and while it waits
    save_rings(history, ckpt, queries, source_url)   # at SIGTERM, with --checkpoint-dir
    load_rings(history, ckpt, queries, source_url)   # at start; the file is used once

Why SIGTERM needs a handler at all: in a container the trainer is PID 1, and the kernel drops
a signal that PID 1 has no handler for. Without one the pod ignores SIGTERM and is killed after
its grace period (30 s by default); with the chart's ``Recreate`` strategy the new pod starts
only then. The handler only sets a flag: raising from it could stop a ring half-shifted.

Why the rings: a new trainer that has restored its fitted states (``forecaster.checkpoint``)
still needs each workload's whole history window before it can refresh it, and pulling
``history_days`` for every workload is most of its first step (10,000 x 14 days at 300 s:
40 million points). The rings it would pull are the ones the old trainer held a moment
before, so the old trainer writes them at SIGTERM and the new one starts from them. Each keeps
its last pull time: ``HistoryCache.plan`` pulls a ring in full when that is more than
``gap_seconds`` ago, as it does for a trainer that was down that long. After a crash
(SIGKILL, OOM) there is no file and the first step pulls in full, as before.

The file (one, ``history.rings`` in the checkpoint directory, written under a temporary
name and renamed):

    b"FSHR" | format (u16) | header length (u32) | header (JSON) | values | tag (32 bytes)

The header names the source, the grid step, the ring capacity, the byte order and per ring
(series id, demand query, end, last pull, answered span); the values are the rings' float64
arrays in that order; the tag is an HMAC-SHA256 with the checkpoints' key over everything
before it. It is read ring by ring (no second copy of up to gigabytes), and nothing is
installed before the tag checks out. A ring is taken only for a workload configured now with
the same demand query, from the same source on the same grid; a file that does not check out
is skipped with a log line. The file is deleted once read.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import signal
import struct
import sys
import tempfile
import threading
import time
from typing import Callable, Mapping

import numpy as np

from forecaster.checkpoint import CheckpointDir
from forecaster.history import HistoryCache, Ring

log = logging.getLogger("forecaster.schedule")

__all__ = ["Stop", "save_rings", "load_rings", "RINGS_FILE", "RINGS_FORMAT"]

RINGS_FILE = "history.rings"
RINGS_FORMAT = 1
_MAGIC = b"FSHR"
_HEAD = struct.Struct(">4sHI")
_TAG = 32
_PAUSE_POLL_SECONDS = 0.25  # how late a SIGTERM that arrives while the trainer waits is seen
_READ_RINGS = 256  # rings per read (8 MB at 14 days of 300 s)
_TMP_PREFIX = ".tmp-rings-"


class Stop:
    """SIGTERM asks the trainer to stop: ``requested`` turns True. Installed for the ``with``
    block, in the main thread only (elsewhere ``signal`` cannot install handlers: the flag
    then stays False unless ``request`` is called)."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.requested = False
        self._sleep, self._clock = sleep, clock
        self._previous = None

    def request(self, *_: object) -> None:
        self.requested = True

    def __enter__(self) -> "Stop":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self.request)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less once a stop is requested."""
        end = self._clock() + seconds
        while not self.requested and (left := end - self._clock()) > 0:
            self._sleep(min(left, _PAUSE_POLL_SECONDS))


def _header(history: HistoryCache, source: str, rows: list) -> bytes:
    return json.dumps({"source": source, "step": history.step, "capacity": history.capacity,
                       "byteorder": sys.byteorder, "series": rows}).encode()


def save_rings(history: HistoryCache, ckpt: CheckpointDir, queries: Mapping[str, str], source: str) -> tuple[int, int]:
    """Write the rings of the workloads in ``queries`` (series id -> demand query) to
    ``ckpt``'s directory; returns (rings, bytes). A failure (a full disk) is logged and
    returns (0, 0): the next trainer pulls in full."""
    path = ckpt.path / RINGS_FILE
    tmp = None
    try:
        with history.locked() as rings:
            keep = [(sid, r) for sid, r in rings.items()
                    if sid in queries and r.end is not None and r.rows is not None and r.pulled_at is not None]
            rows = [[sid, queries[sid], r.end, r.pulled_at, r.rows[0], r.rows[1]] for sid, r in keep]
            head = _header(history, source, rows)
            fd, tmp = tempfile.mkstemp(dir=ckpt.path, prefix=_TMP_PREFIX)
            tag = hmac.new(ckpt.key, digestmod=hashlib.sha256)
            with os.fdopen(fd, "wb") as f:
                for part in (_HEAD.pack(_MAGIC, RINGS_FORMAT, len(head)), head):
                    f.write(part)
                    tag.update(part)
                for _, r in keep:
                    view = memoryview(r.values).cast("B")
                    f.write(view)
                    tag.update(view)
                f.write(tag.digest())
                size = f.tell()
        os.replace(tmp, path)
    except Exception as exc:  # noqa: BLE001 - an optimisation for the next start, never a failure
        log.warning("history windows not saved to %s (%s: %s); the next trainer pulls them in full",
                    path, exc.__class__.__name__, exc)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return 0, 0
    return len(keep), size


class _Unusable(Exception):
    pass


def _read_exact(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Unusable("truncated")
    return data


def _read_rings(f, history: HistoryCache, ckpt: CheckpointDir, source: str) -> list[tuple[list, Ring]]:
    """Every ring in the file, after its tag checks out; _Unusable if it does not."""
    tag = hmac.new(ckpt.key, digestmod=hashlib.sha256)
    fixed = _read_exact(f, _HEAD.size)
    magic, version, hlen = _HEAD.unpack(fixed)
    if magic != _MAGIC:
        raise _Unusable("not a foresight history file")
    if version != RINGS_FORMAT:
        raise _Unusable(f"format {version}, this trainer reads format {RINGS_FORMAT}")
    raw = _read_exact(f, hlen)
    tag.update(fixed)
    tag.update(raw)
    try:
        head = json.loads(raw)
    except ValueError as exc:
        raise _Unusable(f"header unreadable: {exc}") from exc
    if head.get("byteorder") != sys.byteorder:
        raise _Unusable(f"written on a {head.get('byteorder')}-endian machine")
    # checked before the values are read (and before the tag): it bounds what is allocated
    if (head.get("source"), head.get("step"), head.get("capacity")) != (source, history.step, history.capacity):
        raise _Unusable(f"of another source or grid ({head.get('source')}, step {head.get('step')} s, "
                        f"{head.get('capacity')} points; now {source}, step {history.step} s, {history.capacity} points)")
    rows, got = head.get("series", []), []
    for i in range(0, len(rows), _READ_RINGS):  # a block per read: the read and the tag run without the GIL
        block = np.empty((min(_READ_RINGS, len(rows) - i), history.capacity))
        view = memoryview(block).cast("B")
        if f.readinto(view) != len(view):
            raise _Unusable("truncated")
        tag.update(view)
        got.extend((row, Ring(history.capacity, history.step, values)) for row, values in zip(rows[i:], block))
    if not hmac.compare_digest(_read_exact(f, _TAG), tag.digest()):
        raise _Unusable("authentication failed (corrupt, or not written with this key)")
    return got


def load_rings(history: HistoryCache, ckpt: CheckpointDir, queries: Mapping[str, str], source: str) -> int:
    """Install the saved rings of the workloads configured now with the same demand query;
    returns how many. The file is deleted either way: it describes one stop."""
    path = ckpt.path / RINGS_FILE
    for tmp in ckpt.path.glob(_TMP_PREFIX + "*"):  # a save cut short by SIGKILL: up to gigabytes
        with contextlib.suppress(OSError):
            tmp.unlink()
    t0 = time.monotonic()
    try:
        with open(path, "rb") as f:
            got = _read_rings(f, history, ckpt, source)
    except FileNotFoundError:
        return 0
    except (OSError, _Unusable, KeyError, TypeError, ValueError) as exc:
        log.warning("history windows in %s ignored: %s; the first refresh pulls them in full", path, exc)
        got = None
    with contextlib.suppress(OSError):
        path.unlink()
    if not got:
        return 0
    n = 0
    for (sid, query, end, pulled_at, lo, hi), ring in got:
        if queries.get(sid) == query:
            ring.end, ring.pulled_at, ring.rows = float(end), float(pulled_at), (float(lo), float(hi))
            history.adopt(sid, ring)
            n += 1
    log.info("restored the history windows of %d workloads from %s in %.1f s (%d no longer configured as saved)",
             n, path, time.monotonic() - t0, len(got) - n)
    return n
