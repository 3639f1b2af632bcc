"""The observed-direct fallback at fleet scale: Redis down, every HPA asking, old path vs new.

Set-up, real processes on loopback: Prometheus backfilled with cAdvisor and kube-state-metrics
series (2 pods per workload, named as Kubernetes names a Deployment's pods), up to now; the
forecast store is a Redis URL nobody listens on (down from the start). In this process, one
adapter core per path over the same workloads config (the defaults: demand, ready pods and
CPU request all from Prometheus), answering the external metrics API exactly as
adapter/hotpath.py does (a request with no reading waits at most ``wait_seconds`` for the read
it started, then answers).

Load: each workload's HPA asks for ``predicted_cpu_load_ratio`` once per refresh interval
(15 s, the HPA sync), paced evenly over the interval, for ``--intervals`` intervals from the
fault. Reported per path, size and interval: the share of requests answered 200, p50/p99
latency, values below the reactive floor (the observed demand / ready capacity, known exactly
here), and the PromQL queries sent per second.

The old path is ``LegacyObservedDirect`` below (the previous implementation, verbatim), the new
one adapter/fallback.py's ``ObservedDirect``, cold (``new``: nothing read before the fault) and
as the adapter runs it (``new-warm``: readings kept warm every TTL while the store was up); all
over the same ``PrometheusDemandReader``.

    .venv/bin/python -m bench.fallback_scale                      # 1,000 and 10,000 workloads
    .venv/bin/python -m bench.fallback_scale --quick              # 50 and 200 workloads, 3-s intervals
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path
from typing import Callable

from adapter.fallback import DemandReader, DemandUnavailable, Observation
from bench.common import add_quick_args, results_dir, save_json, stop_on_sigterm
from forecaster.timing import TIMING
from tests import stack

log = logging.getLogger("foresight.adapter.fallback")
NS, PODS, REQUEST = "demo", 2, 0.5
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
EXT = "/apis/external.metrics.k8s.io/v1beta1"
# old: the previous per-workload reads; new: the batched reads, cold (the first batch starts at
# the fault); new-warm: batched and kept warm while the store was up (what `foresight serve` runs)
PATHS = ("old", "new", "new-warm")


def say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- the previous implementation

class LegacyObservedDirect:
    """adapter/fallback.py's ObservedDirect before the batched reads (commit 3ef2236), verbatim:
    one read per workload on 4 threads, an unbounded queue. Kept only as this benchmark's baseline."""

    def __init__(
        self,
        reader: DemandReader,
        *,
        ttl_seconds: float = 15.0,
        wait_seconds: float = 1.0,
        max_age_seconds: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.reader = reader
        self.ttl_seconds = ttl_seconds
        self.wait_seconds = wait_seconds
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._cache: dict[str, tuple[Observation | None, float]] = {}
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        # A few threads: one stalled query must not hold up every other workload's refresh.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="foresight-observed")
        self._on_error = on_error
        self.last_error: str | None = None
        self.last_ok: float | None = None

    def knows(self, series_id: str) -> bool:
        return self.reader.knows(series_id)

    @property
    def source_up(self) -> bool | None:
        """None until a read was tried; then whether the last one reached the source."""
        if self.last_ok is None and self.last_error is None:
            return None
        return self.last_error is None

    def _read(self, series_id: str) -> Observation | None:
        try:
            obs = self.reader.observe(series_id)
        except DemandUnavailable as exc:
            # Returned, not raised: an awaited future's exception would be logged as never retrieved.
            if self.last_error is None:
                log.warning("observed demand cannot be read directly: %s", exc)
            self.last_error = str(exc)
            if self._on_error:
                self._on_error(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a bad query loses this workload, not the process
            log.warning("observed demand of %s could not be read: %s", series_id, exc)
            obs = None
        if self.last_error is not None:
            log.warning("observed demand is readable again")
        self.last_error = None
        self.last_ok = self.clock()
        with self._lock:
            self._cache[series_id] = (obs, self.clock())
        return obs

    def _refresh(self, series_id: str) -> Future:
        with self._lock:
            fut = self._inflight.get(series_id)
            if fut is not None:
                return fut
            fut = self._pool.submit(self._read, series_id)
            self._inflight[series_id] = fut
        # Outside the lock: a read that already finished (a refused connection is instant)
        # runs the callback right here, and the callback takes the lock.
        fut.add_done_callback(lambda _f, s=series_id: self._done(s))
        return fut

    def _done(self, series_id: str) -> None:
        with self._lock:
            self._inflight.pop(series_id, None)

    def get(self, series_id: str, pending: list[Future] | None = None) -> Observation | None:
        """A usable observation, or None (unknown workload, no data, or source down too).

        With nothing usable cached, a read is started; a caller on an event loop passes
        ``pending`` to get its future back (and awaits it itself) instead of blocking here
        for up to ``wait_seconds``."""
        if not self.reader.knows(series_id):
            return None
        now = self.clock()
        with self._lock:
            hit = self._cache.get(series_id)
        if hit is not None and now - hit[1] <= self.ttl_seconds:
            return hit[0]
        fut = self._refresh(series_id)
        if hit is not None and now - hit[1] <= self.max_age_seconds:
            return hit[0]  # stale-while-revalidate
        if pending is not None:
            pending.append(fut)
            return None
        try:
            return fut.result(timeout=self.wait_seconds)
        except FutureTimeout:
            return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
# ---------------------------------------------------------------- the world


def encode(i: int, width: int) -> str:
    out = ""
    for _ in range(width):
        i, r = divmod(i, len(ALPHABET))
        out += ALPHABET[r]
    return out


def pod_name(i: int, p: int) -> str:
    return f"w{i}-{encode(i, 8)}-{encode(p, 5)}"


def rate_of(i: int) -> float:
    return 0.2 + (i % 13) * 0.05


def write_history(path: Path, n: int, now: float, ahead: float) -> int:
    """CPU counters, Ready, CPU requests at 30 s from 6 minutes before ``now`` (enough for
    rate(...[5m])) to ``ahead`` seconds after it: a query at any moment of the run sees a live
    series, as a scraped one would (a history ending at the start would make rate() fall below
    the true rate as the run goes on, by Prometheus' extrapolation at the window's edge)."""
    stamps = [now - 360 + 30 * k for k in range(int((360 + ahead) // 30) + 1)]
    series = 0
    with open(path, "w") as f:
        for name in ("container_cpu_usage_seconds_total", "kube_pod_status_ready", "kube_pod_container_resource_requests"):
            f.write(f"# TYPE {name} gauge\n")  # promtool's openmetrics import takes gauges
            for i in range(n):
                for p in range(PODS):
                    pod = pod_name(i, p)
                    if name == "container_cpu_usage_seconds_total":
                        head = f'{name}{{container="app",namespace="{NS}",pod="{pod}"}}'
                        rows = (f"{head} {rate_of(i) / PODS * (t - stamps[0]) + 100.0:.3f} {t:.3f}\n" for t in stamps)
                    elif name == "kube_pod_status_ready":
                        head = f'{name}{{condition="true",namespace="{NS}",pod="{pod}"}}'
                        rows = (f"{head} 1 {t:.3f}\n" for t in stamps)
                    else:
                        head = f'{name}{{container="app",namespace="{NS}",pod="{pod}",resource="cpu"}}'
                        rows = (f"{head} {REQUEST} {t:.3f}\n" for t in stamps)
                    f.write("".join(rows))
                    series += 1
        f.write("# EOF\n")
    return series


def start_prometheus(n: int, now: float, workdir: Path, ahead: float) -> stack.PrometheusServer:
    d = workdir / f"prom-{n}"
    data = d / "data"
    data.mkdir(parents=True)
    om = d / "history.om"
    series = write_history(om, n, now, ahead)
    say(f"  promtool backfill: {series} series")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                   check=True, capture_output=True)
    om.unlink()
    cfg = d / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = stack.free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=3650d"],
        stdout=open(d / "prometheus.log", "w"), stderr=subprocess.STDOUT)
    srv = stack.PrometheusServer(port=port, dir=d, proc=proc)
    import urllib.request

    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{srv.url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return srv
        except OSError:
            time.sleep(0.2)
    srv.stop()
    raise RuntimeError("prometheus did not become ready")


def write_config(path: Path, n: int, prom_url: str, store_url: str) -> None:
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "foresight/v1alpha1", "kind": "WorkloadConfig",
        "source": {"url": prom_url.replace("http://", "prometheus://")}, "store": {"url": store_url},
        "workloads": [{"namespace": NS, "name": f"w{i}"} for i in range(n)]}))


def build_core(config: Path, path: str, ttl: float, wait: float):
    """An adapter core as ``foresight serve --config`` builds it, with the old or new fallback."""
    from adapter.core import AdapterCore
    from adapter.factory import build_demand, build_settings
    from adapter.fallback import ObservedDirect
    from core.store import open_store

    settings, store_url = build_settings({"config": str(config)})
    reader, _ = build_demand({"config": str(config)})
    kw = dict(ttl_seconds=ttl, wait_seconds=wait, max_age_seconds=TIMING.max_observed_age_seconds)
    if path == "old":
        od = LegacyObservedDirect(reader, **kw)
    else:
        od = ObservedDirect(reader, keep_warm=(path == "new-warm"), **kw)
    if path == "new-warm":  # the adapter ran before the fault: its first warm-up batch is in
        od.start()
        deadline = time.monotonic() + 300
        while od.batches < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    return AdapterCore(settings, open_store(store_url), observed=od), reader, od


# ---------------------------------------------------------------- the load


async def drive(core, n: int, interval: float, intervals: int, wait: float) -> list[dict]:
    from adapter.quantity import parse_quantity

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    rows: list[dict] = [{"ok": 0, "asked": 0, "below_floor": 0, "lat": []} for _ in range(intervals)]
    truth = {i: rate_of(i) / (PODS * REQUEST) for i in range(n)}

    async def one(k: int, i: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        q = f"labelSelector=workload%3Dw{i}".encode()
        path = f"{EXT}/namespaces/{NS}/predicted_cpu_load_ratio"
        t = time.perf_counter()
        pending: list = []
        code, body = core.answer_apis("GET", path, q, pending, final=False)
        if pending:  # as adapter/hotpath.py: await the started reads, bounded, then answer
            await asyncio.wait([asyncio.wrap_future(f) for f in pending], timeout=wait)
            code, body = core.answer_apis("GET", path, q, [], final=True)
        r = rows[k]
        r["lat"].append(time.perf_counter() - t)
        r["asked"] += 1
        if code == 200:
            r["ok"] += 1
            v = float(parse_quantity(json.loads(body)["items"][0]["value"]))
            if v < truth[i] * (1 - 1e-3):
                r["below_floor"] += 1

    tasks = [asyncio.ensure_future(one(k, i, t0 + k * interval + interval * i / n))
             for k in range(intervals) for i in range(n)]
    await asyncio.gather(*tasks)
    return rows


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def reading_ttl(interval: float) -> float:
    """The readings' TTL as shipped, in proportion to the HPA's interval (5 s of 15 s)."""
    return interval * TIMING.observed_read_seconds / TIMING.hpa_sync_seconds


def measure(config: Path, path: str, n: int, interval: float, intervals: int, wait: float) -> dict:
    core, reader, od = build_core(config, path, ttl=reading_ttl(interval), wait=wait)
    reader.queries = 0  # from the fault on (a warm path's warm-up is before it)
    t = time.monotonic()
    rows = asyncio.run(drive(core, n, interval, intervals, wait))
    took = time.monotonic() - t
    od.close()
    out = {"path": path, "workloads": n, "seconds": round(took, 2), "promql_queries": reader.queries,
           "promql_per_second": round(reader.queries / took, 1), "intervals": []}
    for k, r in enumerate(rows):
        out["intervals"].append({"interval": k + 1, "asked": r["asked"], "answered_200": r["ok"],
                                 "share_200": round(r["ok"] / max(1, r["asked"]), 4), "below_floor": r["below_floor"],
                                 "p50_ms": round(pct(r["lat"], 0.5) * 1000, 2),
                                 "p99_ms": round(pct(r["lat"], 0.99) * 1000, 2)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--interval", type=float, default=TIMING.hpa_sync_seconds,
                    help="seconds between one HPA's requests (the readings' TTL is the shipped share of it)")
    ap.add_argument("--intervals", type=int, default=3, help="refresh intervals measured from the fault")
    ap.add_argument("--wait", type=float, default=1.0, help="the adapter's bound on a request's wait (seconds)")
    add_quick_args(ap, "50 and 200 workloads, two 3-s intervals")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.interval, args.intervals = "50,200", 3.0, 2
    out = results_dir(args)
    logging.basicConfig(level=logging.ERROR)

    stop_on_sigterm()  # finally: stop Prometheus
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="foresight-fallback-") as tmp:
        work = Path(tmp)
        for n in sizes:
            say(f"{n} workloads")
            # the run: backfill and start, then both paths' intervals and set-up, with room
            ahead = 300 + 2 * args.intervals * args.interval + n * 0.03
            prom = start_prometheus(n, time.time(), work, ahead)
            try:
                config = work / f"workloads-{n}.yaml"
                write_config(config, n, prom.url, f"redis://127.0.0.1:{stack.free_port()}/0")  # nobody listens
                for path in PATHS:
                    r = measure(config, path, n, args.interval, args.intervals, args.wait)
                    results.append(r)
                    for iv in r["intervals"]:
                        say(f"  {path:8} {n:>6} interval {iv['interval']}: {iv['share_200']:.1%} answered 200 "
                            f"({iv['answered_200']}/{iv['asked']}), p50 {iv['p50_ms']} ms, p99 {iv['p99_ms']} ms, "
                            f"below floor {iv['below_floor']}")
                    say(f"  {path:8} {n:>6} PromQL {r['promql_queries']} queries ({r['promql_per_second']}/s)")
            finally:
                prom.stop()
    saved = save_json("fallback_scale", {"interval_seconds": args.interval, "wait_seconds": args.wait,
                                         "ttl_seconds": reading_ttl(args.interval),
                                         "quick": args.quick, "results": results}, out)
    say(f"saved {saved}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
