"""Chaos at fleet scale: Redis killed under 10,000 workloads, served by two adapter replicas.

Set-up, real processes on loopback:
- Prometheus, backfilled as bench/fallback_scale.py backfills it (cAdvisor CPU counters and
  kube-state-metrics Ready and requests, 2 pods per workload, live through the whole run);
- Redis holding a forecast for every workload. The trainer is not run: fitting 10,000 series
  takes hours on 2 cores and this measures the adapters. The forecasts (a stand-in for the
  trainer's, named so in the results) are flat at 1.2x the true demand, so a value served from a
  forecast and one served from the observed demand tell apart;
- two ``foresight serve --config`` replicas (plain HTTP on loopback), the defaults otherwise:
  the batched observed-direct fallback kept warm, a 30-s forecast cache.

Load: every workload's HPA asks for ``predicted_cpu_load_ratio`` once per interval (15 s, the
HPA sync), paced evenly, each workload on one replica (as a Service spreads them), for
``--before`` intervals, then Redis is ``kill -9``-ed, then ``--intervals`` more.

Reported per interval: the share answered 200, the values' sources (from the replicas'
``foresight_adapter_values_total``), values below the reactive floor (observed demand / ready
capacity, known exactly here), p50/p99 latency; the PromQL query rate (Prometheus' own
``prometheus_http_requests_total``); each replica's resident memory (VmRSS) and peak (VmHWM).

    .venv/bin/python -m bench.chaos_fleet                 # 10,000 workloads (~4 min)
    .venv/bin/python -m bench.chaos_fleet --quick         # 60 workloads, 3-s intervals
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.chaos import Proc, _http_ok, _port_open
from bench.common import add_quick_args, results_dir, save_json
from bench.fallback_scale import EXT, NS, PODS, REQUEST, pct, rate_of, say, start_prometheus, write_config
from forecaster.timing import TIMING
from tests import stack

TARGETS = {"share_200_from_interval_2_min": 0.99, "below_floor_max": 0}
FORECAST_FACTOR = 1.2  # the stand-in forecasts' level over the true demand


def publish_forecasts(redis_url: str, n: int, now: float) -> None:
    """One flat forecast per workload at FORECAST_FACTOR x its true demand (the trainer's stand-in)."""
    from core.store import make_forecast, open_store

    store = open_store(redis_url)
    for i in range(n):
        level = rate_of(i) * FORECAST_FACTOR
        store.publish(make_forecast(
            f"{NS}/w{i}", origin=now, step_seconds=300.0, mean=[level] * 12, quantiles={"p90": [level] * 12},
            model="stand-in", generated_at=now, observed=((now, rate_of(i)),),
            meta={"namespace": NS, "workload": f"w{i}", "kind": "Deployment", "ready_pods": PODS,
                  "cpu_request_cores": REQUEST}))


class Conn:
    """One keep-alive HTTP/1.1 connection (the load must not be the bottleneck at ~700 req/s)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        self.w.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = await self.r.readuntil(b"\r\n\r\n")
        code = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?i)content-length:\s*(\d+)", head)
        body = await self.r.readexactly(int(m.group(1))) if m else b""
        return code, body

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


async def drive(ports: list[int], n: int, interval: float, intervals: int, at_interval, timeout: float) -> list[dict]:
    """Each workload asks once per interval, paced; ``at_interval(k)`` runs as interval k starts."""
    import json

    from adapter.quantity import parse_quantity

    loop = asyncio.get_running_loop()  # its clock is time.monotonic, which the marker thread reads
    pools = {p: asyncio.Queue() for p in ports}
    for p in ports:
        for _ in range(32):
            pools[p].put_nowait(Conn(p))
    rows = [{"asked": 0, "ok": 0, "below_floor": 0, "lat": []} for _ in range(intervals)]
    truth = {i: rate_of(i) / (PODS * REQUEST) for i in range(n)}
    t0 = loop.time() + 1.0

    async def one(k: int, i: int) -> None:
        await asyncio.sleep(max(0.0, t0 + k * interval + interval * i / n - loop.time()))
        port = ports[i % len(ports)]
        conn = await pools[port].get()
        t = time.perf_counter()
        r = rows[k]
        try:
            code, body = await asyncio.wait_for(
                conn.get(f"{EXT}/namespaces/{NS}/predicted_cpu_load_ratio?labelSelector=workload%3Dw{i}"), timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            conn.close()
            code, body = 0, b""
        pools[port].put_nowait(conn)
        r["lat"].append(time.perf_counter() - t)
        r["asked"] += 1
        if code == 200:
            r["ok"] += 1
            if float(parse_quantity(json.loads(body)["items"][0]["value"])) < truth[i] * (1 - 1e-3):
                r["below_floor"] += 1

    def marks() -> None:  # a thread on the same clock: a loaded event loop would fire them late
        for k in range(intervals):
            time.sleep(max(0.0, t0 + k * interval - time.monotonic()))
            at_interval(k)

    marker = threading.Thread(target=marks, daemon=True)
    marker.start()
    await asyncio.gather(*(one(k, i) for k in range(intervals) for i in range(n)))
    marker.join()
    for q in pools.values():
        while not q.empty():
            q.get_nowait().close()
    return rows


def sources(url: str) -> dict[str, float]:
    """The replica's values served so far, by source, for the load ratio."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("foresight_adapter_values_total{") and 'metric="predicted_cpu_load_ratio"' in line:
            src = re.search(r'source="([^"]+)"', line).group(1)
            out[src] = out.get(src, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def promql_queries(prom_url: str) -> float:
    """Queries Prometheus has answered so far (its own /metrics: instant and range queries)."""
    total = 0.0
    for line in httpx.get(f"{prom_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("prometheus_http_requests_total{") and re.search(r'handler="/api/v1/query(_range)?"', line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def memory_mb(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: round(int(re.search(rf"{k}:\s+(\d+)", status).group(1)) / 1024, 1) for k in ("VmRSS", "VmHWM")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=int, default=10000)
    ap.add_argument("--interval", type=float, default=TIMING.hpa_sync_seconds, help="seconds between one HPA's requests")
    ap.add_argument("--before", type=int, default=1, help="intervals measured before Redis is killed")
    ap.add_argument("--intervals", type=int, default=4, help="intervals measured from the fault")
    add_quick_args(ap, "60 workloads, 3-s intervals")
    args = ap.parse_args(argv)
    # quick: the cache and the readings' TTL shrink with the interval, so the fallback is reached.
    # The cache holds a third of the 3-s interval: a forecast read just before the kill is gone
    # well before interval 2 starts, even when a loaded machine delays requests by a second.
    tuning = ["--cache-ttl", "0.5", "--cache-max-stale", "1", "--observed-direct-ttl", "3"] if args.quick else []
    if args.quick:
        args.workloads, args.interval = 60, 3.0
    out = results_dir(args)
    n, total = args.workloads, args.before + args.intervals
    with tempfile.TemporaryDirectory(prefix="foresight-chaos-fleet-") as tmp:
        work = Path(tmp)
        say(f"chaos at fleet scale: {n} workloads, 2 replicas, Redis killed after {args.before} interval(s)")
        prom = start_prometheus(n, time.time(), work, 600 + 2 * total * args.interval + n * 0.05)
        redis_port, ports = stack.free_port(), [stack.free_port(), stack.free_port()]
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        cfg = work / "workloads.yaml"
        write_config(cfg, n, prom.url, redis_url)
        redis = Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(work)], work / "redis.log",
                     ready=lambda: _port_open(redis_port))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        replicas = [Proc(f"adapter_{k}", [sys.executable, "-m", "foresight", "serve", "--plain-http", "--host",
                                          "127.0.0.1", "--port", str(p), "--config", str(cfg), "--store", redis_url, *tuning],
                         work / f"adapter_{k}.log", ready=lambda u=u: _http_ok(f"{u}/healthz"))
                    for k, p, u in zip("ab", ports, urls)]
        try:
            redis.start()
            t = time.monotonic()
            publish_forecasts(redis_url, n, time.time())
            say(f"  published {n} stand-in forecasts in {time.monotonic() - t:.1f} s")
            for r in replicas:
                r.start(timeout=300)
            result = run(args, n, total, prom.url, redis, replicas, urls)
        finally:
            for r in replicas:
                r.stop()
            redis.stop()
            prom.stop()
    result.update({"workloads": n, "replicas": 2, "interval_seconds": args.interval, "quick": args.quick,
                   "forecasts": f"stand-in for the trainer: flat at {FORECAST_FACTOR}x the true demand",
                   "targets": TARGETS})
    after = [iv for iv in result["intervals"] if iv["interval"] >= 2]
    result["checks"] = {
        "share_200_from_interval_2>=99%": all(iv["share_200"] >= TARGETS["share_200_from_interval_2_min"] for iv in after),
        "no_value_below_the_reactive_floor": all(iv["below_floor"] == 0 for iv in result["intervals"] + result["before"]),
    }
    for k, v in result["checks"].items():
        say(f"  {'PASS' if v else 'FAIL'}  {k}" + ("  (quick mode: not judged)" if args.quick else ""))
    say(f"saved {save_json('chaos_fleet', result, out)}")
    return 0


def run(args, n: int, total: int, prom_url: str, redis: Proc, replicas: list[Proc], urls: list[str]) -> dict:
    marks: list[dict] = []

    def at_interval(k: int) -> None:
        marks.append({"t": time.monotonic(), "promql": promql_queries(prom_url),
                      "sources": [sources(u) for u in urls]})
        if k == args.before:  # after the snapshot: what follows counts from the fault
            redis.kill9()
            say("  Redis killed (kill -9)")
        say(f"  interval {k + 1 - args.before:+d} from the fault starts")

    rows = asyncio.run(drive([int(u.rsplit(":", 1)[1]) for u in urls], n, args.interval, total, at_interval, 10.0))
    marks.append({"t": time.monotonic(), "promql": promql_queries(prom_url), "sources": [sources(u) for u in urls]})
    memory = {r.name: memory_mb(r.p.pid) for r in replicas}
    ivs = []
    for k, r in enumerate(rows):
        a, b = marks[k], marks[k + 1]
        src: dict[str, float] = {}
        for sa, sb in zip(a["sources"], b["sources"]):
            for s_, v in sb.items():
                src[s_] = src.get(s_, 0.0) + v - sa.get(s_, 0.0)
        iv = {"interval": k + 1 - args.before, "asked": r["asked"], "answered_200": r["ok"],
              "share_200": round(r["ok"] / max(1, r["asked"]), 4), "below_floor": r["below_floor"],
              "sources": {s_: int(v) for s_, v in src.items() if v},
              "p50_ms": round(pct(r["lat"], 0.5) * 1000, 2), "p99_ms": round(pct(r["lat"], 0.99) * 1000, 2),
              "promql_per_second": round((b["promql"] - a["promql"]) / max(1e-9, b["t"] - a["t"]), 2)}
        ivs.append(iv)
        say(f"  interval {iv['interval']:+d}: {iv['share_200']:.1%} answered 200 ({r['ok']}/{r['asked']}), "
            f"sources {iv['sources']}, p50 {iv['p50_ms']} ms, p99 {iv['p99_ms']} ms, below floor {iv['below_floor']}, "
            f"PromQL {iv['promql_per_second']}/s")
    say(f"  memory: {memory}")
    return {"before": [iv for iv in ivs if iv["interval"] < 1], "intervals": [iv for iv in ivs if iv["interval"] >= 1],
            "memory_mb": memory}


if __name__ == "__main__":
    raise SystemExit(main())
