"""The history-source seam: anything that returns a long frame for a query and a span."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pandas as pd

from core.errors import UserError


class SourceError(UserError):
    """A permanent problem with a query or a source (bad PromQL, 4xx, unreadable file)."""


class SourceUnavailable(SourceError):
    """The source cannot answer right now (connection refused, 5xx, timeout after retries)."""


@runtime_checkable
class HistorySource(Protocol):
    def fetch(self, query: str, start: float, end: float, step_seconds: float) -> pd.DataFrame:
        """Long frame (series_id, timestamp, value) of ``query`` over [start, end] (Unix seconds),
        on a regular grid of ``step_seconds``; gaps are NaN rows."""
