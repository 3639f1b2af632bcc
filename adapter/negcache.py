"""A bounded negative cache: names the store did not have, remembered briefly.

Callers choose which names they ask for (REST paths, ``workload in (...)`` selectors), so
whatever the adapter remembers about names it was asked for must be bounded by
construction: a fixed number of entries, least recently read evicted first, each trusted
for ``ttl_seconds`` only (after that the name is read from the store again, once, when
somebody asks for it again; nothing re-reads it in the background).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

DEFAULT_MAX_ENTRIES = 10_000


class MissingNames:
    """An LRU of ``name -> read at`` with a fixed maximum size and a freshness window."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, ttl_seconds: float = 2.0) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: {max_entries} must be at least 1")
        if ttl_seconds < 0:
            raise ValueError(f"ttl_seconds: {ttl_seconds} must be >= 0")
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._at: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()  # requests (event loop) and the refresher both write
        self.evicted = 0

    def add(self, name: str, now: float) -> None:
        with self._lock:
            self._at[name] = now
            self._at.move_to_end(name)
            while len(self._at) > self.max_entries:
                self._at.popitem(last=False)
                self.evicted += 1

    def fresh(self, name: str, now: float) -> bool:
        """True when ``name`` was found missing within the last ``ttl_seconds``."""
        at = self._at.get(name)
        if at is None:
            return False
        if now - at > self.ttl_seconds:
            self.discard(name)  # stale: the caller reads the store again
            return False
        return True

    def discard(self, name: str) -> None:
        with self._lock:
            self._at.pop(name, None)

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, name: object) -> bool:
        return name in self._at
