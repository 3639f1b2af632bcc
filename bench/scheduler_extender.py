"""Benchmark: the kube-scheduler extender's prioritize call over 5,000 nodes.

One real uvicorn process on loopback (uvloop + httptools, one worker) serves, side by side:
- ours:  ``register_scheduler_routes`` (scores from the in-process snapshot, pre-serialized);
- naive: the same scoring rule, but each request reads the requested nodes' forecasts from
  the store (Redis MGET of 5,000 keys + JSON decoding) and scores them, as an extender
  without a snapshot would.

The store is a real Redis holding 5,000 ``node/*`` CPU and 5,000 ``node-memory/*`` memory
forecasts (15 one-minute points, p50/p90, synthetic loads; latency does not depend on the
values) in 3 zones. Requests are the scheduler's ExtenderArgs in nodeCacheCapable mode
(``NodeNames``, ~100 KB) for a pod requesting 100m CPU and 512Mi of memory, so the memory
request is weighed on every call. Latency is measured client-side over one keep-alive
connection (httpx, sequential: what one scheduler sees); req/s also with wrk (4 connections)
when wrk is installed. Also reported: filter over 5,000 names, prioritize for a 12Gi pod
(beyond most nodes' memory slack: the exact per-node path) and prioritize in full ``Nodes``
mode (whole v1.Node objects, ~9 MB).

    .venv/bin/python bench/scheduler_extender.py [--nodes 5000] [--seconds 25]
    .venv/bin/python bench/scheduler_extender.py --quick   # smoke run: 100 nodes, 1 s runs, temp folder

Saves bench/results/scheduler_extender.json and bench/results/scheduler_extender.png
(--quick: a temporary folder or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# module level: FastAPI resolves the handler's (string) annotations in these globals
from fastapi import Request  # noqa: E402
from fastapi.responses import Response  # noqa: E402

from bench.common import add_quick_args, results_dir  # noqa: E402

# -- the server side (imported by uvicorn in the child process) ---------------------------------


def create_bench_app():
    """uvicorn factory: ours at /scheduler/*, the naive baseline at /naive/prioritize."""
    from fastapi import FastAPI

    from adapter.scheduler import SchedulerSettings, register_scheduler_routes
    from adapter.scheduler.podrequest import pod_memory_request
    from adapter.scheduler.protocol import BadExtenderArgs, error_body, parse_extender_args
    from core.store import RedisForecastStore
    from forecaster.nodes import NEUTRAL_SCORE, NODE_MEMORY_PREFIX, NODE_PREFIX, ZONE_PREFIX, assess_nodes, score_for_pod

    store = RedisForecastStore(os.environ["FORESIGHT_BENCH_REDIS"])
    settings = SchedulerSettings()
    app = FastAPI()
    register_scheduler_routes(app, store, settings)
    zones = [s for s in store.list_series() if s.startswith(ZONE_PREFIX)]

    @app.post("/naive/prioritize")
    async def naive(request: Request) -> Response:
        try:
            args = parse_extender_args(await request.body())
            req = pod_memory_request(args.pod)
        except BadExtenderArgs as exc:
            return Response(error_body(str(exc)), status_code=400, media_type="application/json")
        ids = [NODE_PREFIX + n for n in args.node_names] + [NODE_MEMORY_PREFIX + n for n in args.node_names]
        fcs = store.latest_many(ids + zones)
        loads, _ = assess_nodes(fcs, time.time(), settings.scoring())
        out = [{"host": n, "score": score_for_pod(loads[n], req) if n in loads else NEUTRAL_SCORE} for n in args.node_names]
        return Response(json.dumps(out).encode(), media_type="application/json")

    return ServerTiming(app)


class ServerTiming:
    """Pure ASGI middleware: ``x-server-ms`` = time from request to response start, so
    the figures can be split into server work and client/transport overhead."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()

        async def timed_send(message):
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - t0) * 1000
                message = {**message, "headers": [*message.get("headers", []), (b"x-server-ms", f"{ms:.3f}".encode())]}
            await send(message)

        return await self.app(scope, receive, timed_send)


# -- the client side ----------------------------------------------------------------------------


def publish_nodes(redis_url: str, n: int) -> list[str]:
    import numpy as np
    from tqdm import tqdm

    from core.store import RedisForecastStore, make_forecast

    store = RedisForecastStore(redis_url)
    rng = np.random.default_rng(7)
    now = time.time()
    names = [f"node-{i:05d}" for i in range(n)]
    zones = ["zone-a", "zone-b", "zone-c"]
    for i, name in enumerate(tqdm(names, desc="publishing node CPU and memory forecasts", unit="node")):
        base = float(rng.uniform(0.05, 0.95))
        mean = np.clip(base + 0.05 * rng.standard_normal(15).cumsum() / 4, 0, 1)
        p90 = np.clip(mean + 0.08, 0, 1)
        store.publish(make_forecast(
            f"node/{name}", origin=now - 30, step_seconds=60, mean=mean, quantiles={"p50": mean, "p90": p90},
            model="ar", generated_at=now, observed=((now - 30, base),),
            meta={"kind": "Node", "node": name, "zone": zones[i % 3], "cpu_cores": 8.0},
        ))
        mem = np.clip(float(rng.uniform(0.2, 0.85)) + 0.02 * rng.standard_normal(15).cumsum() / 4, 0, 1)
        store.publish(make_forecast(
            f"node-memory/{name}", origin=now - 30, step_seconds=60, mean=mem, quantiles={"p50": mem, "p90": np.clip(mem + 0.03, 0, 1)},
            model="ar", generated_at=now, observed=((now - 30, float(mem[0])),),
            meta={"kind": "NodeMemory", "node": name, "zone": zones[i % 3], "memory_bytes": 30.0 * 2**30, "capacity": "allocatable"},
        ))
    for z in zones:
        store.publish(make_forecast(
            f"zone/{z}", origin=now - 30, step_seconds=60, mean=[0.5] * 15, quantiles={"p50": [0.5] * 15, "p90": [0.6] * 15},
            model="ar", generated_at=now, meta={"kind": "Zone", "zone": z},
        ))
    store.close()
    return names


def node_object(name: str, zone: str) -> dict:
    """A realistic-size v1.Node (labels, conditions, images), as the scheduler marshals it."""
    return {
        "metadata": {
            "name": name, "uid": f"5f1c-{name}", "resourceVersion": "123456", "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "eu-1",
                       "node.kubernetes.io/instance-type": "m6i.2xlarge"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": "10.244.0.0/24", "providerID": f"aws:///eu-1a/i-{name}"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "110", "ephemeral-storage": "95Gi"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True", "reason": f"Kubelet{t}",
                            "lastHeartbeatTime": "2026-11-29T10:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z",
                            "message": "kubelet is posting ready status"} for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.31.4", "containerRuntimeVersion": "containerd://1.7.22", "osImage": "Ubuntu 24.04",
                         "kernelVersion": "6.8.0", "architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def pod(memory: str) -> dict:
    return {"metadata": {"name": "web-7d4b9", "namespace": "shop", "uid": "p-1"},
            "spec": {"schedulerName": "foresight-scheduler", "containers": [{"name": "web", "image": "nginx",
                     "resources": {"requests": {"cpu": "100m", "memory": memory}}}]}}


POD = pod("512Mi")
BIG_POD = pod("12Gi")


def measure(client, url: str, body: bytes, n: int, warmup: int, check, seconds: float = 0.0) -> dict:
    """``n`` sequential calls, or as many as fit in ``seconds`` when that is > 0 (long enough
    to include the extender's background re-scores every 2 s and store re-reads every 10 s)."""
    import numpy as np

    for _ in range(warmup):
        r = client.post(url, content=body, headers={"content-type": "application/json"})
        r.raise_for_status()
    check(r)
    lat: list[float] = []
    server: list[float] = []
    t_all = time.perf_counter()
    while (len(lat) < n) if seconds <= 0 else (time.perf_counter() - t_all < seconds):
        t0 = time.perf_counter()
        r = client.post(url, content=body, headers={"content-type": "application/json"})
        lat.append(time.perf_counter() - t0)
        server.append(float(r.headers.get("x-server-ms", "nan")))
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:200]}")
    wall = time.perf_counter() - t_all
    n = len(lat)
    lat = np.asarray(lat)
    server = np.asarray(server)
    ms = lat * 1000
    return {
        "requests": n, "p50_ms": round(float(np.percentile(ms, 50)), 3), "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3), "max_ms": round(float(ms.max()), 3),
        "server_p50_ms": round(float(np.percentile(server, 50)), 3), "server_p99_ms": round(float(np.percentile(server, 99)), 3),
        "server_max_ms": round(float(server.max()), 3), "_server_ms": server.tolist(),
        "req_per_s_sequential": round(n / wall, 1), "request_bytes": len(body), "response_bytes": len(r.content),
        "_latencies_ms": ms.tolist(),
    }


def run_wrk(url: str, body: bytes, seconds: int, connections: int) -> dict | None:
    if not shutil_which("wrk"):
        return None
    with tempfile.TemporaryDirectory() as d:
        bf = Path(d) / "body.json"
        bf.write_bytes(body)
        lua = Path(d) / "post.lua"
        lua.write_text(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'local f = io.open("{bf}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
        )
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua), url],
            capture_output=True, text=True, timeout=seconds + 60,
        ).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def ms(m):
        if not m:
            return None
        return round(float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)], 3)

    return {"connections": connections, "seconds": seconds, "req_per_s": float(rps.group(1)) if rps else None,
            "p50_ms": ms(p50), "p99_ms": ms(p99), "non_2xx": int(errors.group(1)) if errors else 0}


def shutil_which(name: str):
    import shutil

    return shutil.which(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=25.0, help="how long to call ours sequentially (covers background rebuilds)")
    ap.add_argument("--naive-requests", type=int, default=40)
    ap.add_argument("--wrk-seconds", type=int, default=8)
    add_quick_args(ap, "100 nodes, 1 s of sequential calls, 5 naive calls, 1 s of wrk")
    args = ap.parse_args()
    n_big, n_full = 200, 20
    if args.quick:
        args.nodes, args.seconds, args.naive_requests, args.wrk_seconds = 100, 1.0, 5, 1
        n_big, n_full = 10, 5

    import httpx
    import numpy as np

    from tests import stack

    out = results_dir(args)
    redis = stack.start_redis()
    server = None
    try:
        names = publish_nodes(redis.url, args.nodes)
        port = stack.free_port()
        env = {**os.environ, "FORESIGHT_BENCH_REDIS": redis.url, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "scheduler_extender:create_bench_app", "--app-dir", str(ROOT / "bench"),
             "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http", "httptools",
             "--no-access-log", "--log-level", "warning", "--workers", "1"],
            env=env,
        )
        stack._wait_port(port, "uvicorn", timeout=60)
        base = f"http://127.0.0.1:{port}"
        names_body = json.dumps({"Pod": POD, "Nodes": None, "NodeNames": names}).encode()
        big_body = json.dumps({"Pod": BIG_POD, "Nodes": None, "NodeNames": names}).encode()
        zones = ["zone-a", "zone-b", "zone-c"]
        full_body = json.dumps({"Pod": POD, "Nodes": {"metadata": {}, "items": [node_object(n, zones[i % 3]) for i, n in enumerate(names)]},
                                "NodeNames": None}).encode()

        def check_prioritize(r):
            hp = r.json()
            assert len(hp) == len(names) and [h["host"] for h in hp] == names
            assert all(isinstance(h["score"], int) and 0 <= h["score"] <= 10 for h in hp)

        def check_filter(r):
            doc = r.json()
            assert len(doc["nodenames"]) + len(doc["failedNodes"]) == len(names)

        results: dict = {"loadavg_1m_at_start": os.getloadavg()[0], "nodes": args.nodes, "server": "uvicorn 1 worker, uvloop+httptools, loopback, keep-alive",
                         "store": f"Redis (real), {args.nodes:,} node CPU + {args.nodes:,} node memory forecasts", "cpu_count": os.cpu_count(),
                         "pod_memory_request": "512Mi (12Gi for ours_prioritize_nodenames_12Gi_pod)"}
        with httpx.Client(timeout=60) as client:
            ours = measure(client, f"{base}/scheduler/prioritize", names_body, 0, 20, check_prioritize, seconds=args.seconds)
            naive = measure(client, f"{base}/naive/prioritize", names_body, args.naive_requests, 3, check_prioritize)
            # the snapshot is scored up to refresh_seconds earlier than the naive call, so a
            # node whose combined load sits on a rounding edge may differ by one point
            diffs = []
            for body in (names_body, big_body):
                a = client.post(f"{base}/scheduler/prioritize", content=body).json()
                b = client.post(f"{base}/naive/prioritize", content=body).json()
                diffs += [abs(x["score"] - y["score"]) for x, y in zip(a, b)]
            big = measure(client, f"{base}/scheduler/prioritize", big_body, n_big, 5, check_prioritize)
            flt = measure(client, f"{base}/scheduler/filter", names_body, 0, 5, check_filter, seconds=args.seconds / 2)
            full = measure(client, f"{base}/scheduler/prioritize", full_body, n_full, 2, check_prioritize)
        results["ours_prioritize_nodenames"] = ours
        results["naive_prioritize_nodenames"] = naive
        results["score_agreement_ours_vs_naive"] = {"identical": sum(d == 0 for d in diffs), "nodes": len(diffs), "max_abs_diff": max(diffs)}
        results["ours_filter_nodenames"] = flt
        results["ours_prioritize_full_nodes"] = full
        results["ours_prioritize_nodenames_12Gi_pod"] = big
        results["wrk_ours_prioritize"] = run_wrk(f"{base}/scheduler/prioritize", names_body, args.wrk_seconds, 4)
        results["wrk_naive_prioritize"] = run_wrk(f"{base}/naive/prioritize", names_body, args.wrk_seconds, 4)
        results["loadavg_1m_at_end"] = os.getloadavg()[0]
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        redis.stop()

    server_ms = results["ours_prioritize_nodenames"]["_server_ms"]
    keys = ("ours_prioritize_nodenames", "naive_prioritize_nodenames", "ours_filter_nodenames", "ours_prioritize_full_nodes",
            "ours_prioritize_nodenames_12Gi_pod")
    for k in keys:
        results[k].pop("_server_ms")
    lat = {k: results[k].pop("_latencies_ms") for k in keys}
    (out / "scheduler_extender.json").write_text(json.dumps(results, indent=2) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.2))
    for key, label in (("ours_prioritize_nodenames", "ours: prioritize (snapshot)"),
                       ("ours_filter_nodenames", "ours: filter (snapshot)"),
                       ("ours_prioritize_nodenames_12Gi_pod", "ours: prioritize, 12Gi pod (exact per-node path)"),
                       ("naive_prioritize_nodenames", "naive: prioritize (store per request)")):
        v = np.sort(lat[key])
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=f"{label}  p99={np.percentile(v, 99):.1f} ms")
    ax.axvline(20, color="grey", ls="--", lw=1, label="target p99 20 ms")
    ax.set_xscale("log")
    ax.set_xlabel("latency per call, 5,000 node names (ms, log)")
    ax.set_ylabel("fraction of calls")
    ax.set_title("kube-scheduler extender over 5,000 nodes (uvicorn, loopback, keep-alive)")
    ax.legend(fontsize=8, loc="lower right")
    seq = np.asarray(lat["ours_prioritize_nodenames"])
    ax2.plot(np.arange(len(seq)), seq, lw=0.5, label="client-side")
    ax2.plot(np.arange(len(seq)), server_ms, lw=0.5, label="server-side (x-server-ms)")
    ax2.set_yscale("log")
    ax2.legend(fontsize=8)
    ax2.axhline(20, color="grey", ls="--", lw=1)
    ax2.set_xlabel("call # (sequential, one keep-alive connection)")
    ax2.set_ylabel("ms (log)")
    ax2.set_title("ours, prioritize: spikes = background re-score (2 s) / store re-read (10 s) or other load")
    ax2.title.set_fontsize(8)
    fig.tight_layout()
    fig.savefig(out / "scheduler_extender.png", dpi=120)

    def line(name, r):
        return (f"{name:32s} p50 {r['p50_ms']:8.2f} ms  p99 {r['p99_ms']:8.2f} ms  {r['req_per_s_sequential']:7.1f} req/s (1 conn)"
                f"  | server p50 {r['server_p50_ms']:.2f} p99 {r['server_p99_ms']:.2f} max {r['server_max_ms']:.1f} ms")

    print(line("ours   prioritize (NodeNames)", results["ours_prioritize_nodenames"]))
    print(line("naive  prioritize (NodeNames)", results["naive_prioritize_nodenames"]))
    print(line("ours   filter     (NodeNames)", results["ours_filter_nodenames"]))
    print(line("ours   prioritize (full Nodes)", results["ours_prioritize_full_nodes"]))
    print(line("ours   prioritize (12Gi pod)", results["ours_prioritize_nodenames_12Gi_pod"]))
    for k in ("wrk_ours_prioritize", "wrk_naive_prioritize"):
        if results.get(k):
            w = results[k]
            print(f"{k:38s} {w['req_per_s']} req/s, p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms ({w['connections']} conns, non-2xx {w['non_2xx']})")
    print(f"machine load average (1 min) {results['loadavg_1m_at_start']:.1f} -> {results['loadavg_1m_at_end']:.1f} on {os.cpu_count()} cores (shared)")
    print(f"scores ours vs naive (same rule, snapshot vs per-request): {results['score_agreement_ours_vs_naive']}")
    print(f"saved {out / 'scheduler_extender.json'} and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
