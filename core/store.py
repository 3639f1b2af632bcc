"""Forecast store: where published forecasts live between the forecaster and its readers.

One protocol, two implementations:
- ``MemoryForecastStore``: the single-process default (``foresight up``, tests, replay).
- ``RedisForecastStore``: production; several adapter replicas and the warm-pool controller
  read what the trainer publishes.

A forecast is published atomically: readers see the previous forecast or the new one, never
a mix. Every publish bumps a per-series generation so readers can tell forecasts apart.
Only this module talks to Redis.
"""

from __future__ import annotations

from core.errors import UserError

import json
import logging
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from core.breaker import CircuitBreaker, CircuitOpen

__all__ = [
    "Forecast",
    "ForecastStore",
    "MemoryForecastStore",
    "RedisForecastStore",
    "StoreCircuitOpen",
    "StoreError",
    "StorePermissionError",
    "StoreUnavailable",
    "open_store",
    "quantile_key",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# consecutive failed publishes that open the publish breaker, and the pause before one probe
PUBLISH_BREAKER_THRESHOLD = 3
PUBLISH_BREAKER_COOLDOWN_SECONDS = 10.0


class StoreError(UserError):
    """A permanent store problem (bad data, bad URL)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now (retryable): Redis down, timeout, restart."""


class StoreCircuitOpen(StoreUnavailable, CircuitOpen):
    """Redis is in an outage the publish breaker has already logged: this write was not sent."""


class StorePermissionError(StoreError):
    """The store refused this user (permanent): wrong password, or an ACL user that may not
    run the command (a read-only reader trying to publish)."""


def quantile_key(q: float) -> str:
    """Canonical key for a quantile level: 0.9 -> 'p90', 0.5 -> 'p50', 0.975 -> 'p97.5'."""
    pct = round(q * 100, 6)
    if pct.is_integer():
        return f"p{int(pct)}"
    return f"p{pct:g}"


@dataclass(frozen=True)
class Forecast:
    """One published forecast for one series.

    Point ``i`` (0-based) of ``mean`` and of each quantile is the forecast for the timestamp
    ``origin + (i + 1) * step_seconds`` (Unix seconds, UTC). ``origin`` is the timestamp of the
    last observation the model saw. ``quantiles`` maps ``quantile_key(q)`` (e.g. ``"p90"``)
    to values of the same length as ``mean``.

    ``observed`` is the tail of the observed history as ``(timestamp, value)`` pairs, the last
    one being "what is happening now" as far as the forecaster knows; readers use it for
    max(predicted, observed) and for fall-backs. ``meta`` carries what readers need besides
    the numbers (namespace, workload, labels, ready_pods, cpu_request_cores, ...).

    ``status`` is ``"ok"`` or ``"fallback"``; ``reason`` says why a series is on the fallback.
    """

    series_id: str
    generated_at: float
    origin: float
    step_seconds: float
    mean: tuple[float, ...]
    quantiles: Mapping[str, tuple[float, ...]]
    model: str
    backtest_error: float | None = None
    status: str = "ok"
    reason: str = ""
    observed: tuple[tuple[float, float], ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    # the serving policy the trainer chose (forecaster.serving.ServingPolicy.to_dict());
    # applied by forecaster/served.py; empty for forecasts published without one
    policy: Mapping[str, Any] = field(default_factory=dict)
    generation: int = 0

    def __post_init__(self) -> None:
        if not self.series_id:
            raise StoreError("forecast.series_id must be a non-empty string")
        if not (self.step_seconds > 0):
            raise StoreError(f"forecast.step_seconds must be > 0 (got {self.step_seconds!r})")
        n = len(self.mean)
        for name, vals in self.quantiles.items():
            if len(vals) != n:
                raise StoreError(
                    f"forecast.quantiles[{name}] has {len(vals)} points but mean has {n}"
                )
        for name, vals in [("mean", self.mean), *self.quantiles.items()]:
            for i, v in enumerate(vals):
                if not math.isfinite(v):
                    raise StoreError(
                        f"forecast {self.series_id!r}: {name}[{i}] is {v!r}; "
                        "a NaN/Inf forecast is never published (fall back instead)"
                    )

    def timestamps(self) -> list[float]:
        return [self.origin + (i + 1) * self.step_seconds for i in range(len(self.mean))]

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.generated_at

    def to_json(self) -> str:
        d = asdict(self)
        d["schema"] = SCHEMA_VERSION
        d["quantiles"] = {k: list(v) for k, v in self.quantiles.items()}
        d["mean"] = list(self.mean)
        d["observed"] = [list(p) for p in self.observed]
        return json.dumps(d, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Forecast":
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise StoreError(f"stored forecast is not valid JSON: {exc}") from exc
        d.pop("schema", None)
        d["mean"] = tuple(float(v) for v in d["mean"])
        d["quantiles"] = {k: tuple(float(x) for x in v) for k, v in d["quantiles"].items()}
        d["observed"] = tuple((float(t), float(v)) for t, v in d.get("observed", ()))
        d["meta"] = d.get("meta") or {}
        d["policy"] = d.get("policy") or {}
        return cls(**d)


@runtime_checkable
class ForecastStore(Protocol):
    """What every reader and writer of forecasts relies on."""

    def publish(self, forecast: Forecast) -> int:
        """Store ``forecast`` atomically as the latest for its series; return its generation."""

    def latest(self, series_id: str) -> Forecast | None:
        """The latest forecast of one series, or None when there is none (or it expired)."""

    def latest_many(self, series_ids: Iterable[str]) -> dict[str, Forecast]:
        """Latest forecasts of many series in one round trip; missing series are left out."""

    def list_series(self) -> list[str]:
        """Every series with a live forecast, sorted."""

    def generations(self, series_ids: Iterable[str]) -> dict[str, int]:
        """Current generation of many series in one round trip (cheap change detection for
        readers that cache forecasts); missing series are left out."""

    def count_series(self) -> int:
        """Number of series with a live forecast (cheap)."""

    def ping(self) -> bool:
        """True when the store answers (raises nothing)."""

    def close(self) -> None: ...


class MemoryForecastStore:
    """Thread-safe in-process store (the single-process default)."""

    def __init__(self, ttl_seconds: float | None = None, clock=time.time) -> None:
        self._data: dict[str, Forecast] = {}
        self._gen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._ttl = ttl_seconds
        self._clock = clock

    def _alive(self, fc: Forecast) -> bool:
        return self._ttl is None or self._clock() - fc.generated_at <= self._ttl

    def publish(self, forecast: Forecast) -> int:
        with self._lock:
            gen = self._gen.get(forecast.series_id, 0) + 1
            self._gen[forecast.series_id] = gen
            self._data[forecast.series_id] = replace(forecast, generation=gen)
            return gen

    def latest(self, series_id: str) -> Forecast | None:
        with self._lock:
            fc = self._data.get(series_id)
        return fc if fc is not None and self._alive(fc) else None

    def latest_many(self, series_ids: Iterable[str]) -> dict[str, Forecast]:
        with self._lock:
            out = {s: self._data[s] for s in series_ids if s in self._data}
        return {s: f for s, f in out.items() if self._alive(f)}

    def list_series(self) -> list[str]:
        with self._lock:
            items = list(self._data.values())
        return sorted(f.series_id for f in items if self._alive(f))

    def generations(self, series_ids: Iterable[str]) -> dict[str, int]:
        with self._lock:
            items = {s: self._data[s] for s in series_ids if s in self._data}
        return {s: f.generation for s, f in items.items() if self._alive(f)}

    def count_series(self) -> int:
        return len(self.list_series())

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass


class RedisForecastStore:
    """Redis-backed store.

    Layout (prefix ``foresight:`` by default):
    - ``{p}fc:{series}``: the whole forecast as one JSON string, written with SET ... EX ttl
      inside MULTI/EXEC together with the generation bump, so a reader's GET returns one
      complete forecast (old or new), never half of one; dead series expire by TTL.
    - ``{p}gen:{series}``: the generation counter (INCR).
    - ``{p}series``: a sorted set of series ids scored by publish time (the index for
      list_series/count_series: a member older than the TTL has an expired forecast key, so
      listing is one ZRANGEBYSCORE; the publisher trims old members, so readers never write).

    Security: the URL carries the ACL user (``redis://adapter@host:6379/0``); the password
    comes from a file (``?password_file=/var/run/secrets/redis/password``, a mounted Secret)
    or the ``FORESIGHT_REDIS_PASSWORD_FILE`` environment variable, never from the command
    line. ``rediss://`` speaks TLS; ``?ca_file=`` names the CA that signed Redis' certificate.
    Readers need only ``+@read +@connection``; the trainer adds ``+@write +@transaction``.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "foresight:",
        ttl_seconds: int = 3600,
        socket_timeout: float = 2.0,
        client: Any = None,
        password_file: str | None = None,
        ca_file: str | None = None,
        publish_breaker: CircuitBreaker | None = None,
    ) -> None:
        import redis  # only this module talks to Redis

        self._redis_mod = redis
        url, password_file, ca_file = _split_secrets(url, password_file, ca_file)
        self.url = redact_url(url)
        self.prefix = prefix
        self.ttl_seconds = int(ttl_seconds)
        # Publishes only (the trainer's side): with Redis down, one line per outage and a fast
        # failure per workload instead of a socket timeout and a warning each. Readers (the
        # adapter's cache) have their own down-handling and never consult it.
        self.publish_breaker = publish_breaker or CircuitBreaker(
            f"Redis at {self.url} (publishing)", threshold=PUBLISH_BREAKER_THRESHOLD,
            cooldown_seconds=PUBLISH_BREAKER_COOLDOWN_SECONDS, logger=log,
        )
        kwargs: dict[str, Any] = {}
        if password_file:
            kwargs["password"] = _read_secret(password_file)
        if ca_file:
            kwargs["ssl_ca_certs"] = ca_file
        self._r = client or redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            health_check_interval=30,
            **kwargs,
        )

    def _k(self, kind: str, series_id: str = "") -> str:
        return f"{self.prefix}{kind}:{series_id}" if series_id else f"{self.prefix}{kind}"

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except self._redis_mod.AuthenticationError as exc:
            raise StorePermissionError(
                f"Redis at {self.url} rejected the credentials ({exc}); check the user in the URL and "
                "the password file (password_file= or FORESIGHT_REDIS_PASSWORD_FILE)"
            ) from exc
        except self._redis_mod.exceptions.NoPermissionError as exc:
            raise StorePermissionError(
                f"Redis at {self.url}: this ACL user may not do that ({exc}); publishing needs the "
                "trainer's read-write user, readers need +@read"
            ) from exc
        except (self._redis_mod.ConnectionError, self._redis_mod.TimeoutError) as exc:
            raise StoreUnavailable(
                f"Redis at {self.url} is unreachable ({exc.__class__.__name__}: {exc}); "
                "check that redis-server runs and the URL is right"
            ) from exc
        except self._redis_mod.RedisError as exc:
            # e.g. LOADING after a restart, READONLY on a replica: retryable.
            raise StoreUnavailable(f"Redis at {self.url} refused the request: {exc}") from exc

    def publish(self, forecast: Forecast) -> int:
        sid = forecast.series_id
        gen_key = self._k("gen", sid)

        def tx(pipe):
            gen = int(pipe.get(gen_key) or 0) + 1
            payload = replace(forecast, generation=gen).to_json()
            pipe.multi()
            pipe.set(gen_key, gen, ex=self.ttl_seconds * 2)
            pipe.set(self._k("fc", sid), payload, ex=self.ttl_seconds)
            now = time.time()
            pipe.zadd(self._k("series"), {sid: now})
            # forget members whose forecast expired (cheap, bounded by what expired)
            pipe.zremrangebyscore(self._k("series"), "-inf", f"({now - self.ttl_seconds}")
            return gen

        breaker = self.publish_breaker
        if not breaker.allow():
            raise StoreCircuitOpen(f"Redis at {self.url} is unavailable (circuit open; next probe in "
                                   f"{breaker.seconds_until_probe():.0f} s); the forecast of {sid} was not published")
        try:
            gen = int(self._call(self._r.transaction, tx, gen_key, value_from_callable=True))
        except StoreUnavailable as exc:
            breaker.failed(exc.__cause__.__class__.__name__ if exc.__cause__ else exc)
            if breaker.is_open:
                raise StoreCircuitOpen(str(exc)) from exc
            raise
        breaker.succeeded()
        return gen

    def latest(self, series_id: str) -> Forecast | None:
        raw = self._call(self._r.get, self._k("fc", series_id))
        return None if raw is None else Forecast.from_json(raw)

    def latest_many(self, series_ids: Iterable[str]) -> dict[str, Forecast]:
        ids = list(series_ids)
        out: dict[str, Forecast] = {}
        for i in range(0, len(ids), 1000):
            chunk = ids[i : i + 1000]
            raws = self._call(self._r.mget, [self._k("fc", s) for s in chunk])
            for sid, raw in zip(chunk, raws):
                if raw is not None:
                    out[sid] = Forecast.from_json(raw)
        return out

    def _cutoff(self) -> float:
        return time.time() - self.ttl_seconds

    def list_series(self) -> list[str]:
        cutoff = self._cutoff()
        raw = self._call(self._r.zrangebyscore, self._k("series"), cutoff, "+inf")
        return sorted(m.decode() if isinstance(m, bytes) else m for m in raw)

    def count_series(self) -> int:
        return int(self._call(self._r.zcount, self._k("series"), self._cutoff(), "+inf"))

    def generations(self, series_ids: Iterable[str]) -> dict[str, int]:
        ids = list(series_ids)
        out: dict[str, int] = {}
        for i in range(0, len(ids), 5000):
            chunk = ids[i : i + 5000]
            raws = self._call(self._r.mget, [self._k("gen", s) for s in chunk])
            for sid, v in zip(chunk, raws):
                if v is not None:
                    out[sid] = int(v)
        return out

    def ping(self) -> bool:
        try:
            return bool(self._r.ping())
        except Exception:  # noqa: BLE001 - ping reports, it never raises
            return False

    def close(self) -> None:
        try:
            self._r.close()
        except Exception:  # noqa: BLE001
            pass


PASSWORD_FILE_ENV = "FORESIGHT_REDIS_PASSWORD_FILE"


def _split_secrets(url: str, password_file: str | None, ca_file: str | None) -> tuple[str, str | None, str | None]:
    """Take ``password_file`` and ``ca_file`` out of the URL's query (redis-py does not know
    them); the environment names the password file when neither the URL nor the caller does."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    kept = []
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k == "password_file":
            password_file = password_file or v
        elif k == "ca_file":
            ca_file = ca_file or v
        else:
            kept.append((k, v))
    if password_file is None and parts.password is None:
        password_file = os.environ.get(PASSWORD_FILE_ENV) or None
    return urlunsplit(parts._replace(query=urlencode(kept))), password_file, ca_file


def _read_secret(path: str) -> str:
    try:
        with open(path) as f:
            secret = f.read().strip()
    except OSError as exc:
        raise StoreError(f"Redis password file {path}: cannot read it ({exc.strerror}); mount the Secret there") from exc
    if not secret:
        raise StoreError(f"Redis password file {path} is empty; put the ACL user's password in it")
    return secret


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


def open_store(url: str | None, **kwargs: Any) -> ForecastStore:
    """``memory://`` (or None) -> MemoryForecastStore; ``redis://...`` -> RedisForecastStore."""
    if not url or url.startswith("memory:"):
        return MemoryForecastStore(**{k: v for k, v in kwargs.items() if k in ("ttl_seconds",)})
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisForecastStore(url, **kwargs)
    raise StoreError(f"store URL {url!r} is not supported; use memory:// or redis://HOST:PORT/DB")


def make_forecast(
    series_id: str,
    *,
    origin: float,
    step_seconds: float,
    mean: Sequence[float],
    quantiles: Mapping[str, Sequence[float]] | None = None,
    model: str,
    generated_at: float | None = None,
    **kwargs: Any,
) -> Forecast:
    """Convenience constructor that converts sequences to tuples."""
    return Forecast(
        series_id=series_id,
        generated_at=time.time() if generated_at is None else generated_at,
        origin=float(origin),
        step_seconds=float(step_seconds),
        mean=tuple(float(v) for v in mean),
        quantiles={k: tuple(float(x) for x in v) for k, v in (quantiles or {}).items()},
        model=model,
        **kwargs,
    )
