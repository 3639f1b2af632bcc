"""What a pool's claims say about its demand, bin by bin, for the policy to learn from.

A bin's demand is the largest number of containers claimed at once during it; its idle count
is the containers that were ready at the bin's first reconcile round and no claim used. The
controller drains closed bins at the start of each round and hands them to the policy, so a
policy only ever learns from the past."""

from __future__ import annotations

from warmpool.reconcile import BinUsage

MAX_GAP_BINS = 1442  # a controller paused for longer reports only this many silent bins


class DemandMeter:
    def __init__(self, bin_seconds: float):
        self.bin_seconds = bin_seconds
        self.bin: int | None = None
        self.busy = 0
        self.peak = 0
        self.warm_claims = 0
        self.resident: int | None = None
        self._closed: list[BinUsage] = []

    def _roll(self, now: float) -> None:
        b = int(now // self.bin_seconds)
        if self.bin is None:
            self.bin, self.peak = b, self.busy
            return
        if b <= self.bin:
            return
        self._closed.append(BinUsage(self.bin, self.peak, max(0, (self.resident or 0) - self.warm_claims)))
        for k in range(max(self.bin + 1, b - MAX_GAP_BINS), b):  # bins no round and no claim saw
            self._closed.append(BinUsage(k, self.busy, 0))
        self.bin, self.peak, self.warm_claims, self.resident = b, self.busy, 0, None

    def claimed(self, now: float, warm: bool) -> None:
        self._roll(now)
        self.busy += 1
        self.peak = max(self.peak, self.busy)
        self.warm_claims += int(warm)

    def released(self, now: float) -> None:
        self._roll(now)
        self.busy = max(0, self.busy - 1)

    def drain(self, now: float) -> list[BinUsage]:
        """Bins closed by ``now``, oldest first; each is returned once."""
        self._roll(now)
        out, self._closed = self._closed, []
        return out

    def open_peak(self, now: float) -> int:
        """Most containers claimed at once so far in the bin of ``now``."""
        self._roll(now)
        return self.peak

    def ready_at_round(self, ready: int) -> None:
        """Containers ready (warm or starting) after this round's actions; the first round of
        a bin sets the bin's count."""
        if self.resident is None:
            self.resident = ready
