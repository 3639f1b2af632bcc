"""Metric history from Prometheus or a Thanos Querier (the Prometheus HTTP API).

Only this module talks PromQL. A range query over any span is split into chunks so that no
request exceeds ``max_points`` (11,000 is Prometheus' hard cap per series); the chunks are
stitched onto one regular grid (gaps become NaN; duplicate samples at chunk edges are
dropped). Thanos parameters are passed through when configured. 5xx answers, timeouts and
refused connections are retried with exponential backoff, then raised as ``SourceUnavailable``;
4xx answers raise ``SourceError`` carrying Prometheus' own message (e.g. a PromQL parse error).
Every try goes through one fleet-wide circuit breaker (``core.breaker``): after a few
consecutive failed tries every call fails fast with ``PrometheusCircuitOpen`` until a probe
after the cool-down answers, so a stalled Prometheus costs about one timeout per cool-down
instead of tries x timeout per workload.

The HTTP client is httpx, the one the rest of the project uses (the import contracts in
pyproject.toml allow it here and in no other module that talks to Prometheus).
``prometheus-api-client`` was declared and dropped: it is built on ``requests`` (a second HTTP
client), retries inside urllib3 where the breaker cannot count the tries, reports 4xx and 5xx as
one exception with the status in its message, and would still leave the chunking, the grid
and the Thanos parameters to this module.
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from datetime import datetime, timezone
from typing import Any, Mapping

import httpx
import numpy as np
import pandas as pd

from core.breaker import CircuitBreaker, CircuitOpen
from forecaster.frames import empty_frame
from forecaster.sources.base import SourceError, SourceUnavailable
from forecaster.timing import DURATION_UNITS

log = logging.getLogger(__name__)

PROMETHEUS_MAX_POINTS = 11_000
# consecutive failed tries (timeouts, refused connections, 5xx/429) that open the breaker, and
# the pause before one probe: a bad query (4xx) is the query's fault and never counts
BREAKER_THRESHOLD = 3
BREAKER_COOLDOWN_SECONDS = 30.0


class PrometheusCircuitOpen(SourceUnavailable, CircuitOpen):
    """Prometheus is in an outage the breaker has already logged: this call was not sent."""


def parse_time(value: str | float | int | datetime) -> float:
    """RFC 3339 (``2026-11-29T10:00:00Z``) or Unix seconds -> Unix seconds (float)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip()
    try:
        return float(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SourceError(
            f"time {value!r} is neither RFC 3339 (e.g. 2026-11-29T10:00:00Z) nor Unix seconds"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def parse_duration(value: str | float | int) -> float:
    """``60``, ``60s``, ``5m``, ``1h``, ``1d`` -> seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip()
    for u in ("ms", "s", "m", "h", "d", "w"):
        if s.endswith(u) and s[: -len(u)].replace(".", "", 1).isdigit():
            return float(s[: -len(u)]) * DURATION_UNITS[u]
    try:
        return float(s)
    except ValueError as exc:
        raise SourceError(f"duration {value!r} must look like 60, 60s, 5m or 1h") from exc


def normalize_url(url: str) -> str:
    """``prometheus://host:port`` -> ``http://host:port``; ``prometheus+https://`` -> https."""
    if url.startswith("prometheus+https://"):
        return "https://" + url[len("prometheus+https://") :].rstrip("/")
    if url.startswith("prometheus://"):
        return "http://" + url[len("prometheus://") :].rstrip("/")
    if url.startswith(("http://", "https://")):
        return url.rstrip("/")
    raise SourceError(f"source URL {url!r} must be prometheus://HOST:PORT or http(s)://HOST:PORT")


def series_name(labels: Mapping[str, str]) -> str:
    """A stable series id from a label set: ``{a="x",b="y"}`` (``__name__`` first if present)."""
    if not labels:
        return "{}"
    items = sorted(labels.items(), key=lambda kv: (kv[0] != "__name__", kv[0]))
    name = ""
    if items and items[0][0] == "__name__":
        name = items[0][1]
        items = items[1:]
    def esc(v: str) -> str:  # PromQL string escaping, so the id parses back unambiguously
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return name + "{" + ",".join(f'{k}="{esc(v)}"' for k, v in items) + "}"


class PrometheusSource:
    """``HistorySource`` over the Prometheus HTTP API (Prometheus or Thanos Querier)."""

    def __init__(
        self,
        url: str,
        *,
        bearer_token: str | None = None,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        insecure_skip_verify: bool = False,
        thanos: Mapping[str, Any] | None = None,
        timeout_seconds: float = 30.0,
        max_points: int = PROMETHEUS_MAX_POINTS,
        retries: int = 3,
        backoff_seconds: float = 0.5,
        client: httpx.Client | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.breaker = breaker or CircuitBreaker(
            f"Prometheus at {self.url}", threshold=BREAKER_THRESHOLD, cooldown_seconds=BREAKER_COOLDOWN_SECONDS,
            logger=log,
        )
        self.timeout = timeout_seconds
        if not 2 <= max_points <= PROMETHEUS_MAX_POINTS:
            raise SourceError(f"max_points={max_points} must be in [2, {PROMETHEUS_MAX_POINTS}]")
        self.max_points = int(max_points)
        self.retries = int(retries)
        self.backoff = float(backoff_seconds)
        self.thanos_params = _thanos_params(thanos or {})
        token = bearer_token
        if bearer_token_file:
            try:
                with open(bearer_token_file) as f:
                    token = f.read().strip()
            except OSError as exc:
                raise SourceError(f"bearer_token_file {bearer_token_file!r}: {exc.strerror}") from exc
        # redirects followed as requests did (a proxy moving /api/v1 to https, say)
        self.client = client or httpx.Client(verify=_verify(ca_file, insecure_skip_verify), follow_redirects=True)
        if token:
            self.client.headers["Authorization"] = f"Bearer {token}"
        self.requests_made = 0

    def close(self) -> None:
        self.client.close()

    # -- HTTP -------------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.url}{path}"
        params = {**params, **self.thanos_params}
        last: Exception | None = None
        breaker = self.breaker
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            if not breaker.allow():
                raise PrometheusCircuitOpen(
                    f"Prometheus at {self.url} is unavailable (circuit open; next probe in "
                    f"{breaker.seconds_until_probe():.0f} s){f': {last}' if last else ''}"
                ) from last
            try:
                self.requests_made += 1
                # POST form: long PromQL never hits URL length limits (Prometheus accepts both)
                resp = self.client.post(url, data=params, timeout=self.timeout)
            except httpx.TransportError as exc:  # refused, reset, timed out: Prometheus' fault, retried
                last = exc
                breaker.failed(exc.__class__.__name__)
                # per-try detail at debug: the breaker logs the outage once, the caller the failure
                log.debug("prometheus %s: %s (attempt %d/%d)", url, exc.__class__.__name__, attempt + 1, self.retries + 1)
                continue
            if resp.status_code >= 500 or resp.status_code == 429:
                last = SourceUnavailable(f"{url} answered {resp.status_code}: {_error_text(resp)}")
                breaker.failed(f"HTTP {resp.status_code}")
                log.debug("prometheus %s: HTTP %d (attempt %d/%d)", url, resp.status_code, attempt + 1, self.retries + 1)
                continue
            breaker.succeeded()  # any other answer: Prometheus is up (a 4xx is the query's fault)
            if resp.status_code >= 400:
                raise SourceError(
                    f"Prometheus rejected the query (HTTP {resp.status_code}): {_error_text(resp)}"
                )
            try:
                body = resp.json()
            except ValueError as exc:
                raise SourceError(f"{url} did not answer JSON; is this a Prometheus API URL?") from exc
            if body.get("status") != "success":
                raise SourceError(f"Prometheus error: {body.get('errorType')}: {body.get('error')}")
            for w in body.get("warnings") or []:
                log.warning("prometheus warning: %s", w)
            return body["data"]
        cls = PrometheusCircuitOpen if breaker.is_open else SourceUnavailable
        raise cls(f"Prometheus at {self.url} is unavailable after {self.retries + 1} attempts: {last}") from last

    # -- queries ----------------------------------------------------------------------------

    def chunks(self, start: float, end: float, step: float) -> list[tuple[float, float]]:
        """Split [start, end] on the step grid so each chunk has at most max_points points."""
        if end < start:
            raise SourceError(f"end ({end}) is before start ({start})")
        n_total = int(math.floor((end - start) / step + 1e-9)) + 1
        out = []
        i = 0
        while i < n_total:
            j = min(n_total, i + self.max_points)
            out.append((start + i * step, start + (j - 1) * step))
            i = j
        return out

    def fetch(
        self,
        query: str,
        start: float | str,
        end: float | str,
        step_seconds: float | str,
        series_id: str | None = None,
    ) -> pd.DataFrame:
        """Long frame of a range query. ``series_id`` names the result when the query returns
        exactly one series (the usual case for a workload's demand query); otherwise series are
        named by their label sets."""
        start_s, end_s = parse_time(start), parse_time(end)
        step = parse_duration(step_seconds)
        if step <= 0:
            raise SourceError(f"step must be > 0 (got {step_seconds!r})")
        grid = start_s + step * np.arange(int(math.floor((end_s - start_s) / step + 1e-9)) + 1)
        values: dict[str, np.ndarray] = {}
        for c0, c1 in self.chunks(start_s, end_s, step):
            data = self._get(
                "/api/v1/query_range",
                {"query": query, "start": _fmt(c0), "end": _fmt(c1), "step": _fmt(step)},
            )
            if data.get("resultType") != "matrix":
                raise SourceError(f"query returned {data.get('resultType')}, expected a range vector (matrix)")
            for res in data["result"]:
                name = series_name(res.get("metric", {}))
                arr = values.setdefault(name, np.full(len(grid), np.nan))
                for ts, v in res.get("values", []):
                    idx = int(round((float(ts) - start_s) / step))
                    if 0 <= idx < len(grid):  # edge duplicates land on the same slot
                        fv = float(v)
                        arr[idx] = fv if math.isfinite(fv) else np.nan
        if not values:
            return empty_frame()
        if series_id is not None and len(values) == 1:
            values = {series_id: next(iter(values.values()))}
        elif series_id is not None:
            values = {f"{series_id}{k}": v for k, v in values.items()}
        ts = pd.to_datetime(grid, unit="s", utc=True)
        parts = [
            pd.DataFrame({"series_id": sid, "timestamp": ts, "value": arr})
            for sid, arr in sorted(values.items())
        ]
        return pd.concat(parts, ignore_index=True)

    def instant(self, query: str, time_s: float | None = None) -> list[tuple[dict[str, str], float]]:
        """Instant query -> [(labels, value)]; NaN/Inf samples are dropped."""
        params: dict[str, Any] = {"query": query}
        if time_s is not None:
            params["time"] = _fmt(parse_time(time_s))
        data = self._get("/api/v1/query", params)
        rt = data.get("resultType")
        out: list[tuple[dict[str, str], float]] = []
        if rt == "vector":
            for res in data["result"]:
                v = float(res["value"][1])
                if math.isfinite(v):
                    out.append((dict(res.get("metric", {})), v))
        elif rt == "scalar":
            v = float(data["result"][1])
            if math.isfinite(v):
                out.append(({}, v))
        else:
            raise SourceError(f"instant query returned {rt}, expected a vector or scalar")
        return out

    def ping(self) -> bool:
        try:
            r = self.client.get(f"{self.url}/-/ready", timeout=self.timeout)
            return r.status_code == 200
        except httpx.HTTPError:
            return False


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _thanos_params(thanos: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in thanos.items():
        if k not in ("max_source_resolution", "partial_response", "dedup"):
            raise SourceError(f"thanos.{k} is not a Thanos query parameter; use max_source_resolution, partial_response or dedup")
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _verify(ca_file: str | None, insecure_skip_verify: bool) -> ssl.SSLContext | bool:
    """TLS verification: the given CA bundle, none at all, or the system's CAs."""
    if ca_file:
        try:
            return ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise SourceError(
                f"ca_file {ca_file!r}: {exc}; give a PEM bundle of the CA that signed Prometheus' certificate"
            ) from exc
    return not insecure_skip_verify


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        return f"{body.get('errorType', '')}: {body.get('error', resp.text)}".strip(": ")
    except ValueError:
        return resp.text[:500]


def open_source(url: str, **kwargs: Any):
    """``prometheus://`` / ``http(s)://`` -> PrometheusSource; ``csv://PATH`` -> CsvSource."""
    if url.startswith(("csv://", "file://")):
        from forecaster.sources.csv import CsvSource

        return CsvSource(url.split("://", 1)[1])
    return PrometheusSource(url, **kwargs)
