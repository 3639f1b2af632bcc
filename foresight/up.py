"""``foresight up``: the embedded default. Everything in one process, no cluster needed.

- History: real CPU traces bundled in the package (foresight/data/traces.csv.gz, attribution
  beside it) replayed as live history. Trace time is mapped onto the wall clock so that the
  trace's day 14 is "now"; with ``--speed N`` the trace advances N times faster than real time
  (every published timestamp and step is mapped the same way, so the adapter's staleness rules
  and lead window keep their meaning).
- Each trace becomes a workload ``demo/<name>`` whose demand (CPU cores) is the trace scaled so
  its 99th percentile needs ``--pods-at-p99`` pods of ``--cpu-request`` cores at 70 %. Ready pods
  are modelled as a reactive HPA would leave them (what the live value is measured against).
- Forecaster: the models' Trainer fits on the history up to now (progress shown) and refreshes
  forecasts from the newest point every tick into the in-memory store (or ``--store redis://``).
- Adapter: the external metrics API, REST and dashboard over HTTPS (self-signed pair generated
  into ``--cert-dir``), so ``curl -k`` works right away.
- Warm pool: an example policy with real crun containers when crun works here, the simulated
  backend otherwise (it says which).
- A table per workload (foresight/uptable.py: model, forecast age, observed and served value,
  source, replicas), redrawn in place on a terminal, appended at each refresh otherwise.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

log = logging.getLogger("foresight.up")

NAMESPACE = "demo"
TRACE_STEP_SECONDS = 300.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run everything in one process on bundled real traces (no cluster needed)",
        description=__doc__.split("\n\n", 1)[0],
    )
    p.add_argument("--data", help="long CSV to replay instead of the bundled traces")
    p.add_argument("--store", default="memory://", help="memory:// (default) or redis://HOST:PORT/DB")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8443, help="HTTPS port of the adapter (0 = any free port)")
    p.add_argument("--cert-dir", default=".foresight/certs", help="where the self-signed pair is written")
    p.add_argument("--models", default="auto", help="comma-separated model names (default auto)")
    p.add_argument("--speed", type=float, default=1.0, help="trace seconds per wall second (default 1)")
    p.add_argument("--history-days", type=float, default=14.0, help="trace days treated as the past at start")
    p.add_argument("--refresh-seconds", type=float, default=15.0, help="wall seconds between forecast refreshes")
    p.add_argument("--pods-at-p99", type=int, default=10)
    p.add_argument("--cpu-request", type=float, default=0.5, help="CPU request per pod (cores)")
    p.add_argument("--policy", help="warm-pool policy YAML (default: the bundled example)")
    p.add_argument("--no-warmpool", action="store_true", help="do not run the warm pool")
    p.add_argument("--warmpool-port", type=int, default=8091, help="claim/release API port (0 = any free port)")
    p.add_argument("--keda-port", type=int, default=-1,
                   help="also serve KEDA's external scaler (gRPC over TLS with the self-signed cert, no client "
                   "certificate: loopback only) on this port (0 = any free port; default: off)")
    p.add_argument("--no-serve", action="store_true", help="do not serve HTTPS (forecasts only)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0 = run until Ctrl-C)")
    p.add_argument("--once", action="store_true", help="fit, publish one round of forecasts, print them, exit")
    p.add_argument("--no-live", action="store_true",
                   help="append the table at each refresh instead of redrawing it in place (the default off a terminal)")
    p.set_defaults(func=run_up)


# --- the pure part: trace -> live workloads ------------------------------------------------


@dataclass
class DemoWorkload:
    series_id: str
    name: str
    trace_ts: Any  # np.ndarray of trace seconds
    cores: Any  # np.ndarray of demand in cores (NaN = gap)
    scale: float
    cpu_request_cores: float
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Clock:
    """Maps trace time onto wall time: wall = wall0 + (trace - trace0) / speed."""

    trace0: float
    wall0: float
    speed: float = 1.0

    def trace_now(self, wall: float) -> float:
        return self.trace0 + (wall - self.wall0) * self.speed

    def to_wall(self, trace_t):
        return self.wall0 + (trace_t - self.trace0) / self.speed


def workload_name(series_id: str) -> str:
    import re

    s = re.sub(r"[^a-z0-9-]+", "-", series_id.lower()).strip("-")
    s = s.replace("azurev1-", "vm-")
    return s[:50].strip("-") or "workload"


def demo_workloads(frame, pods_at_p99: int, cpu_request: float, target: float = 0.7) -> list[DemoWorkload]:
    import numpy as np

    from forecaster.frames import series_arrays

    out = []
    for sid, ts, vals in series_arrays(frame):
        finite = vals[np.isfinite(vals)]
        if len(finite) < 10:
            continue
        p99 = float(np.percentile(finite, 99)) or 1.0
        k = pods_at_p99 * target * cpu_request / p99
        name = workload_name(sid)
        out.append(
            DemoWorkload(
                series_id=f"{NAMESPACE}/{name}",
                name=name,
                trace_ts=ts,
                cores=np.where(np.isfinite(vals), np.maximum(vals, 0.0) * k, np.nan),
                scale=k,
                cpu_request_cores=cpu_request,
                labels={"app": name, "trace": sid},
            )
        )
    return out


def reactive_ready_pods(cores_now: float, cpu_request: float, target: float = 0.7) -> int:
    """What a reactive HPA at ``target`` would have running for the demand just observed."""
    if not math.isfinite(cores_now) or cores_now <= 0:
        return 1
    return max(1, math.ceil(cores_now / (target * cpu_request)))


# --- the runner ----------------------------------------------------------------------------


class Forecasting:
    """Fits per workload once, then refreshes every tick from the newest visible data."""

    def __init__(self, store, workloads: list[DemoWorkload], clock: Clock, models: tuple[str, ...]):
        self.store = store
        self.workloads = workloads
        self.clock = clock
        self.models = models
        self.trainer = None
        try:
            from forecaster.training import Trainer

            self.trainer = Trainer(store, models=models, horizon=12, quantiles=(0.5, 0.9),
                                   step_seconds=TRACE_STEP_SECONDS / clock.speed, observed_points=48)
        except ImportError:  # the models issue not landed: a persistence forecast keeps it honest
            log.warning("forecaster.training is not available: publishing persistence forecasts")

    def visible(self, w: DemoWorkload, wall: float):
        """History visible at wall time ``wall`` (never the future), mapped to wall seconds."""
        import numpy as np

        t_now = self.clock.trace_now(wall)
        n = int(np.searchsorted(w.trace_ts, t_now, side="right"))
        start = max(0, n - int(14 * 86400 / TRACE_STEP_SECONDS))
        return self.clock.to_wall(w.trace_ts[start:n]), w.cores[start:n]

    def fit_all(self, progress: bool = True) -> None:
        from tqdm import tqdm

        if self.trainer is None:
            return
        now = time.time()
        data = {w.series_id: self.visible(w, now) for w in self.workloads}
        caps = {w.series_id: w.cpu_request_cores for w in self.workloads}  # lets the serving policy count pods
        if hasattr(self.trainer, "fit_fleet") and any(m in ("lstm", "auto") for m in self.models):
            print(f"  training global models and selecting per series ({len(data)} workloads) ...", flush=True)
            self.trainer.fit_fleet(data, now=now, capacities=caps)
            return
        for sid in tqdm(data, desc="fitting models", unit="workload", disable=not progress):
            ts, y = data[sid]
            self.trainer.fit(sid, ts, y, now=now, capacity_per_pod=caps[sid])

    def refresh_all(self) -> list:
        import numpy as np

        from core.store import make_forecast

        now = time.time()
        published = []
        for w in self.workloads:
            ts, y = self.visible(w, now)
            finite = y[np.isfinite(y)]
            current = float(finite[-1]) if len(finite) else 0.0
            meta = {
                "namespace": NAMESPACE,
                "workload": w.name,
                "kind": "Deployment",
                "labels": w.labels,
                "ready_pods": reactive_ready_pods(current, w.cpu_request_cores),
                "cpu_request_cores": w.cpu_request_cores,
                "source": "bundled trace (replayed)",
            }
            if self.trainer is not None:
                try:
                    fc = self.trainer.refresh(w.series_id, ts, y, now=now, meta=meta)
                except Exception as exc:  # noqa: BLE001 - one bad series (or a store blip) must not stop the others
                    log.warning("refreshing %s failed: %s: %s", w.series_id, exc.__class__.__name__, exc)
                    continue
            else:
                step = TRACE_STEP_SECONDS / self.clock.speed
                tail = [(float(t), float(v)) for t, v in zip(ts[-36:], y[-36:]) if np.isfinite(v)]
                fc = make_forecast(
                    w.series_id, origin=float(ts[-1]), step_seconds=step, mean=[current] * 12,
                    quantiles={"p50": [current] * 12, "p90": [current] * 12}, model="persistence",
                    status="fallback", reason="models not installed", observed=tuple(tail), meta=meta,
                    generated_at=now,
                )
                self.store.publish(fc)
            published.append(fc)
        return published


class TraceDemand:
    """The adapter's ``DemandReader`` over the replayed traces: with ``--store redis://`` down,
    the adapter serves this observed demand (``observed-direct``) instead of a 503."""

    def __init__(self, forecasting: Forecasting) -> None:
        self.forecasting = forecasting
        self._by_id = {w.series_id: w for w in forecasting.workloads}

    def knows(self, series_id: str) -> bool:
        return series_id in self._by_id

    def observe(self, series_id: str):
        import numpy as np

        from adapter.fallback import Observation

        w = self._by_id.get(series_id)
        if w is None:
            return None
        now = time.time()
        _, y = self.forecasting.visible(w, now)
        finite = y[np.isfinite(y)]
        if not len(finite):
            return None
        cores = float(finite[-1])
        return Observation(cores=cores, at=now, ready_pods=reactive_ready_pods(cores, w.cpu_request_cores),
                           cpu_request_cores=w.cpu_request_cores)


def _start_adapter(args, store, workloads, demand=None):
    from adapter.app import create_app  # noqa: WPS433 (wired here, floor 4)
    from adapter.server import serve_in_thread
    from adapter.settings import AdapterSettings
    from adapter.tls import ensure_serving_cert

    cert, key = ensure_serving_cert(Path(args.cert_dir), hosts=[args.host, "localhost"])
    from adapter.server import tune_process

    settings = AdapterSettings(
        dashboard_title="foresight up (bundled traces)",
        workload_labels={w.series_id: {"workload": w.name, "deployment": w.name, **w.labels} for w in workloads},
        workload_capacity={w.series_id: {"cpu_request_cores": w.cpu_request_cores} for w in workloads},
    )
    tune_process()
    app = create_app(settings, store, demand=demand)
    port = args.port or _free_port(args.host)
    return serve_in_thread(app, args.host, port, certfile=str(cert), keyfile=str(key))


def _start_keda(args, srv):
    """KEDA's external scaler beside the adapter, reading its core; a demo on loopback, so the
    caller needs the self-signed certificate but no client certificate (``foresight serve
    --keda-client-ca`` is the deployed form)."""
    from adapter.cli import is_loopback
    from adapter.keda.server import start_keda_server
    from core.errors import UserError

    if not is_loopback(args.host):
        raise UserError(f"--keda-port with --host {args.host}: foresight up serves the scaler without client "
                        "certificates, so only on loopback; use `foresight serve --keda-client-ca` beyond it")
    cert_dir = Path(args.cert_dir)
    keda = start_keda_server(srv.server.config.app.state.core, args.host, args.keda_port,
                             cert_dir / "apiserver.crt", cert_dir / "apiserver.key", None)
    print(f"  KEDA external scaler (gRPC, TLS, self-signed cert): {args.host}:{keda.port}")
    return keda


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _start_warmpool(args, store):
    from warmpool.embedded import start_embedded

    return start_embedded(store, args.policy, port=args.warmpool_port)


def _run_until_stopped(args, fc: Forecasting, board, clock: Clock, last: float, wall0: float) -> None:
    """Refresh every ``--refresh-seconds`` and redraw the table (every second on a terminal,
    where the ages tick; after each refresh otherwise) until SIGTERM, --duration or the end of
    the traces."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    deadline = wall0 + args.duration if args.duration > 0 else math.inf
    next_refresh = time.time() + args.refresh_seconds
    while not stop.is_set() and time.time() < deadline:
        wake = min(next_refresh, deadline, time.time() + 1.0 if board.table.live else math.inf)
        stop.wait(max(0.0, wake - time.time()))
        if stop.is_set() or time.time() >= deadline:
            break
        if clock.trace_now(time.time()) > last:
            print("foresight up: reached the end of the bundled traces")
            break
        if time.time() >= next_refresh:
            try:
                fc.refresh_all()
            except Exception as exc:  # noqa: BLE001 - keep serving; the adapter falls back on stale data
                log.warning("forecast refresh failed: %s: %s", exc.__class__.__name__, exc)
            next_refresh = time.time() + args.refresh_seconds
        board.draw(time.time())


def run_up(args: argparse.Namespace) -> int:
    import numpy as np

    from core.errors import UserError
    from core.store import open_store, redact_url
    from forecaster.sources.csv import read_long_csv

    if args.speed <= 0:
        raise UserError(f"--speed must be > 0 (got {args.speed})")
    data = Path(args.data) if args.data else Path(str(resources.files("foresight") / "data" / "traces.csv.gz"))
    frame = read_long_csv(data)
    workloads = demo_workloads(frame, args.pods_at_p99, args.cpu_request)
    if not workloads:
        raise UserError(f"{data}: no series with enough data to replay")
    trace0 = min(float(w.trace_ts[0]) for w in workloads) + args.history_days * 86400
    last = max(float(w.trace_ts[-1]) for w in workloads)
    if trace0 >= last:
        raise UserError(f"{data}: the traces are shorter than --history-days {args.history_days}")
    wall0 = time.time()
    clock = Clock(trace0=trace0, wall0=wall0, speed=args.speed)
    store = open_store(args.store)
    print(f"foresight up: replaying {len(workloads)} real traces from {data} as live history "
          f"(speed {args.speed:g}x; {((last - trace0) / args.speed) / 3600:.1f} h of trace left)")
    print(f"  store: {redact_url(args.store)}")

    fc = Forecasting(store, workloads, clock, tuple(m for m in args.models.split(",") if m))
    fc.fit_all()
    fc.refresh_all()

    handles = []
    if not args.no_serve and not args.once:
        try:
            srv = _start_adapter(args, store, workloads, TraceDemand(fc))
            handles.append(srv)
            base = srv.url
            w0 = workloads[0].name
            print(f"  adapter (external metrics API, HTTPS, self-signed cert in {args.cert_dir}):")
            print(f"    dashboard:  {base}/")
            print(f"    curl -k '{base}/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/predicted_cpu_load_ratio?labelSelector=workload%3D{w0}'")
            print(f"    forecasts:  {base}/api/v1/forecasts   docs: {base}/docs")
            if args.keda_port >= 0:
                handles.append(_start_keda(args, srv))
        except ImportError as exc:
            print(f"  adapter: not available in this build ({exc})")
    if not args.no_warmpool and not args.once:
        try:
            wp = _start_warmpool(args, store)
            handles.append(wp)
            d = wp.describe()
            print(f"  warm pool ({d['mode']}):")
            for pool in d.get('pools', []):
                print(f"    pool {pool['pool']}: follows {pool['series']}, {pool['warm']} warm, runtime {pool['runtime_class']}")
            if wp.url:
                print(f"    curl -X POST {wp.url}/api/v1/pools/<pool>/claim    state: {wp.url}/api/v1/pools")
        except ImportError as exc:
            print(f"  warm pool: not available in this build ({exc})")

    from foresight.uptable import Board, LiveTable, title

    board = Board(store, [w.series_id for w in workloads],
                  LiveTable(sys.stdout, live=not (args.once or args.no_live) and sys.stdout.isatty()),
                  lambda now: title(now, args.refresh_seconds, args.speed, running=not args.once))
    print(flush=True)
    board.draw(time.time())
    if args.once:
        return 0
    try:
        _run_until_stopped(args, fc, board, clock, last, wall0)
    except KeyboardInterrupt:
        pass
    finally:
        for h in reversed(handles):
            try:
                h.stop()
            except Exception as exc:  # noqa: BLE001 - shutting down: report, keep going
                log.warning("stopping %s: %s", h, exc)
        store.close()
    print("foresight up: stopped")
    return 0
