"""Load benchmark: `foresight serve` (real process, HTTPS, keep-alive, Redis store) against
the prometheus-adapter way (an instant PromQL query of the demand expression against a real
Prometheus per HPA request), at 1,000 / 10,000 / 100,000 workloads, side by side in one run.

Load generator: Debian's wrk on loopback, -t2 -c8, keep-alive, each request for a random
workload. Two measurements per target and size:
- throughput: wrk flat out for --seconds;
- latency at an offered ~1,000 req/s: wrk with a Lua delay() so each of PACED_CONNECTIONS
  connections waits 10 ms after each answer before its next request (wrk2-style constant rate is
  not in Debian's wrk): 12 connections give about 1,000 req/s (wrk's timers fire late by about a millisecond).

    .venv/bin/python bench/adapter_load.py            # all sizes, 3 runs each (about 12 minutes)
    .venv/bin/python bench/adapter_load.py --sizes 1000 --seconds 5   # quick look
    .venv/bin/python bench/adapter_load.py --quick    # smoke run: 200 workloads, 1 s runs, temp folder

Saves bench/results/adapter_load.json, .csv and .png (--quick: a temporary folder or --out).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import add_quick_args, results_dir, stop_on_sigterm  # noqa: E402
from tests import stack  # noqa: E402

NS = "bench"
TOKEN = "bench-token"
PODS_PER_WORKLOAD = 2
PACED_CONNECTIONS = 12
EXT = "/apis/external.metrics.k8s.io/v1beta1"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- data ---------------------------------------------------------------------------------

def serving_policy() -> dict:
    """A serving policy as the trainer publishes one with every forecast (default serving
    settings: headroom per state of demand below its recent peak), chosen by the trainer's
    own chooser on a synthetic bursty week: the adapter reads it and the peak gap on every
    request, so forecasts without one would measure less work than what ships."""
    import numpy as np

    from forecaster.serving import ServingSettings, choose_policy
    from forecaster.servingscore import peak_gaps

    rng = np.random.default_rng(0)
    x = 10 + 6 * (rng.random(2016) < 0.1) + rng.normal(0, 0.5, 2016)
    last = x[:-1]
    return choose_policy(x[1:], last, {"p50": last.copy(), "p90": last * 1.1}, 1.0, ServingSettings(),
                         gaps=peak_gaps(x, np.arange(len(x) - 1))).to_dict()


def publish_forecasts(store, start: int, stop: int, now: float) -> None:
    from tqdm import tqdm

    from core.store import make_forecast
    from forecaster.servingscore import OBSERVED_POINTS

    policy = serving_policy()
    for i in tqdm(range(start, stop), desc=f"publishing forecasts {start}..{stop}", mininterval=2):
        base = 0.5 + (i % 17) * 0.1
        p90 = [base * (1.1 + 0.02 * k) for k in range(12)]
        dip = 0.1 * (i % 7)  # the latest sample this far below the peak: spreads the headroom states
        store.publish(
            make_forecast(
                f"{NS}/w{i}",
                origin=now,
                step_seconds=60,
                mean=[v * 0.85 for v in p90],
                quantiles={"p50": [v * 0.85 for v in p90], "p90": p90},
                model="ets",
                generated_at=now,
                observed=tuple((now - 60 * k, base * (1 - dip) if k == 0 else base)
                               for k in range(OBSERVED_POINTS - 1, -1, -1)),
                meta={"namespace": NS, "workload": f"w{i}", "kind": "Deployment", "labels": {"tier": "web"},
                      "ready_pods": 2, "cpu_request_cores": 0.5},
                policy=policy,
            )
        )


def write_cadvisor_history(path: Path, n: int, now: float) -> int:
    """container_cpu_usage_seconds_total for n workloads x PODS_PER_WORKLOAD pods over the
    last 6 minutes at 30 s (enough for rate(...[5m]) at now)."""
    stamps = [now - 360 + 30 * k for k in range(13)]
    series = 0
    with open(path, "w") as f:
        f.write("# TYPE container_cpu_usage_seconds_total gauge\n")
        for i in range(n):
            for p in range(PODS_PER_WORKLOAD):
                rate = 0.2 + (i % 13) * 0.05
                head = (f'container_cpu_usage_seconds_total{{container="app",namespace="{NS}",'
                        f'pod="w{i}-7d9f{p:02d}-x{p}"}}')
                f.write("".join(f"{head} {rate * (t - stamps[0]) + 100.0:.3f} {t:.3f}\n" for t in stamps))
                series += 1
        f.write("# EOF\n")
    return series


def start_prometheus_with(n: int, now: float, workdir: Path) -> stack.PrometheusServer:
    d = workdir / f"prom-{n}"
    data = d / "data"
    data.mkdir(parents=True)
    om = d / "history.om"
    log(f"writing cAdvisor-style history for {n} workloads")
    series = write_cadvisor_history(om, n, now)
    log(f"promtool backfill of {series} series")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                   check=True, capture_output=True)
    om.unlink()
    cfg = d / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = stack.free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=3650d"],
        stdout=open(d / "prometheus.log", "w"), stderr=subprocess.STDOUT,
    )
    srv = stack.PrometheusServer(port=port, dir=d, proc=proc)
    import urllib.request

    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{srv.url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return srv
        except OSError:
            time.sleep(0.2)
    srv.stop()
    raise RuntimeError("prometheus did not become ready")


# --- wrk ------------------------------------------------------------------------------------

LUA = """
local n = {n}
local auth = {auth}
local prefix = {prefix}
local suffix = {suffix}
local pause = {pause}
local counter = 0
function setup(thread) thread:set("seed", math.random(1, 1000000)) end
function init(args) math.randomseed(seed); counter = math.random(0, n - 1) end
function request()
  local i
  if {sequential} then
    i = counter % n
    counter = counter + 1
  else
    i = math.random(0, n - 1)
  end
  local headers = {{}}
  if auth ~= "" then headers["Authorization"] = auth end
  return wrk.format("GET", prefix .. i .. suffix, headers)
end
{delay}
"""


def lua_script(path: Path, n: int, prefix: str, suffix: str, auth: str, pause_ms: int | None, sequential: bool = False) -> Path:
    q = lambda s: json.dumps(s)  # noqa: E731 - JSON string literals are valid Lua here
    delay = "function delay() return pause end" if pause_ms else ""
    path.write_text(LUA.format(n=n, auth=q(auth), prefix=q(prefix), suffix=q(suffix), pause=pause_ms or 0, delay=delay,
                               sequential="true" if sequential else "false"))
    return path


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def run_wrk(url: str, script: Path, seconds: float, connections: int, threads: int = 2) -> dict:
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{int(seconds)}s", "--latency", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    res: dict = {"raw": out}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res["rps"] = float(m.group(1)) if m else None
    for pct in ("50", "75", "90", "99"):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        res[f"p{pct}_ms"] = float(m.group(1)) * _UNIT[m.group(2)] if m else None
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    res["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"(\d+) requests in", out)
    res["requests"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors:.*", out)
    res["socket_errors"] = m.group(0) if m else ""
    return res


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its live descendants (uvicorn's workers)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # gone meanwhile
    return total


def run_wrk_cpu(url: str, script: Path, seconds: float, connections: int, pid: int) -> dict:
    """run_wrk, plus the server's CPU time per request: on a shared machine wall-clock
    throughput moves with the neighbours' load, the CPU a request costs much less."""
    before = cpu_seconds(pid)
    res = run_wrk(url, script, seconds, connections)
    res["cpu_us_per_request"] = (cpu_seconds(pid) - before) / res["requests"] * 1e6 if res["requests"] else None
    return res


def measure(label: str, base_url: str, n: int, prefix: str, suffix: str, auth: str, seconds: float, workdir: Path,
            pid: int, warm_seconds: int | None = None, repeat: int = 1) -> dict:
    flat = lua_script(workdir / f"{label}-flat.lua", n, prefix, suffix, auth, None)
    paced = lua_script(workdir / f"{label}-paced.lua", n, prefix, suffix, auth, 10)
    # Warm-up: every workload asked once or more (in a running cluster every HPA has asked
    # before), walking the workloads in order from a random start per connection.
    warm = lua_script(workdir / f"{label}-warm.lua", n, prefix, suffix, auth, None, sequential=True)
    run_wrk(base_url, warm, warm_seconds or max(3, int(n / 2500)), 8)
    # The machine is shared: repeat and keep the median run of each kind (all runs saved).
    thrs = [run_wrk_cpu(base_url, flat, seconds, 8, pid) for _ in range(repeat)]
    lats = [run_wrk_cpu(base_url, paced, seconds, PACED_CONNECTIONS, pid) for _ in range(repeat)]
    for r in thrs + lats:
        if r["rps"] is None or r["p99_ms"] is None:
            raise RuntimeError(f"could not read wrk's output for {label}:\n{r['raw']}")
    thr = sorted(thrs, key=lambda r: r["rps"])[len(thrs) // 2]
    lat = sorted(lats, key=lambda r: r["p99_ms"])[len(lats) // 2]
    log(f"  {label:10s} n={n:>6}: {thr['rps']:.0f} req/s flat out (p50 {thr['p50_ms']:.2f} ms, p99 {thr['p99_ms']:.2f} ms); "
        f"at ~{lat['rps']:.0f} req/s offered: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms; "
        f"server CPU {thr['cpu_us_per_request']:.0f} us/request; non-2xx {thr['non_2xx'] + lat['non_2xx']}")
    return {
        "target": label, "workloads": n,
        "throughput_rps": thr["rps"], "throughput_p50_ms": thr["p50_ms"], "throughput_p99_ms": thr["p99_ms"],
        "paced_rps": lat["rps"], "paced_p50_ms": lat["p50_ms"], "paced_p99_ms": lat["p99_ms"],
        "non_2xx": sum(r["non_2xx"] for r in thrs + lats), "requests": sum(r["requests"] for r in thrs + lats),
        "cpu_us_per_request": thr["cpu_us_per_request"], "paced_cpu_us_per_request": lat["cpu_us_per_request"],
        "runs_throughput_rps": [r["rps"] for r in thrs], "runs_paced_p99_ms": [r["p99_ms"] for r in lats],
        "runs_cpu_us_per_request": [r["cpu_us_per_request"] for r in thrs],
        "socket_errors": " ".join(x for x in (thr["socket_errors"], lat["socket_errors"]) if x),
    }


# --- the run --------------------------------------------------------------------------------

def wait_adapter(port: int, n: int, proc, timeout: float = 600) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("foresight serve exited")
        try:
            r = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=60,
                          headers={"Authorization": f"Bearer {TOKEN}"})
            body = r.json() if r.status_code == 200 else {}
            if body and "cached_forecasts" not in body:  # a renamed field must fail now, not after the timeout
                raise RuntimeError(f"/readyz has no 'cached_forecasts' (keys: {sorted(body)}): update wait_adapter")
            if body.get("cached_forecasts", 0) >= n:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("adapter did not load the forecasts in time")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn workers of foresight serve (1: wrk needs the other core)")
    ap.add_argument("--skip-prometheus", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median run is reported")
    add_quick_args(ap, "200 workloads, 1 s per wrk run, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.seconds, args.repeat = "200", 1.0, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    for b in ("wrk", "redis-server", "prometheus", "promtool"):
        if not stack.have(b):
            print(f"{b} is missing: run `make deps` (Debian packages)", file=sys.stderr)
            return 2
    from core.store import RedisForecastStore

    stop_on_sigterm()
    out = results_dir(args)
    workdir = Path(tempfile.mkdtemp(prefix="foresight-bench-adapter-"))
    (workdir / "redis").mkdir()
    redis = stack.start_redis(workdir / "redis")
    store = RedisForecastStore(redis.url)
    (workdir / "token").write_text(TOKEN)
    rows: list[dict] = []
    published = 0
    load_before = os.getloadavg()
    try:
        for n in sizes:
            if n > published:
                publish_forecasts(store, published, n, time.time())
                published = n
            # --- foresight serve (HTTPS, keep-alive, Redis) ---
            port = stack.free_port()
            serve_log = open(workdir / f"serve-{n}.log", "w")
            proc = subprocess.Popen(
                [sys.executable, "-m", "foresight", "serve", "--store", redis.url, "--host", "127.0.0.1",
                 "--port", str(port), "--cert-dir", str(workdir / "certs"), "--token-file", str(workdir / "token"),
                 "--workers", str(args.workers), "--max-forecast-age", "3600"],
                cwd=ROOT, stdout=serve_log, stderr=subprocess.STDOUT,
            )
            try:
                log(f"foresight serve with {n} workloads in Redis: waiting for its cache to load")
                wait_adapter(port, n, proc)
                rows.append(measure(
                    "foresight", f"https://127.0.0.1:{port}", n,
                    f"{EXT}/namespaces/{NS}/predicted_cpu_load_ratio?labelSelector=workload%3Dw", "",
                    f"Bearer {TOKEN}", args.seconds, workdir, proc.pid, warm_seconds=1 if args.quick else None,
                    repeat=args.repeat))
            finally:
                proc.terminate()
                proc.wait(20)
                serve_log.close()
            # --- prometheus-adapter's way: PromQL per request ---
            if not args.skip_prometheus:
                prom = start_prometheus_with(n, time.time(), workdir)
                try:
                    q = f'sum(rate(container_cpu_usage_seconds_total{{namespace="{NS}",pod=~"w'
                    q_end = '-.*"}[5m]))'
                    import httpx

                    probe = httpx.get(f"{prom.url}/api/v1/query", params={"query": q + "0" + q_end}).json()
                    assert probe["status"] == "success" and probe["data"]["result"], f"PromQL found no data: {probe}"
                    rows.append(measure(
                        "prometheus", prom.url, n, "/api/v1/query?query=" + quote(q, safe=""),
                        quote(q_end, safe=""), "", args.seconds, workdir, prom.proc.pid, warm_seconds=1 if args.quick else 3,
                        repeat=args.repeat))
                    rows[-1]["series"] = n * PODS_PER_WORKLOAD
                finally:
                    prom.stop()
    finally:
        store.close()
        redis.stop()
    shutil.rmtree(workdir, ignore_errors=True)  # a failed run keeps it: the adapter's and Prometheus' logs
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, shared; load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}",
        "foresight": f"foresight serve, HTTPS (self-signed), bearer token auth, {args.workers} uvicorn workers, Redis store",
        "prometheus": f"Prometheus (Debian), plain HTTP, {PODS_PER_WORKLOAD} pods per workload, instant query "
        f"sum(rate(container_cpu_usage_seconds_total{{namespace=..,pod=~\"NAME-.*\"}}[5m]))",
        "wrk": f"-t2 -c8 -d{args.seconds}s flat out; paced: -c{PACED_CONNECTIONS} with a 10 ms delay after each answer (~1,000 req/s)",
        "seconds": args.seconds,
        "repeat": f"{args.repeat} runs of each measurement, median reported (all in runs_*)",
    }
    (out / "adapter_load.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    with open(out / "adapter_load.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    plot(rows, out / "adapter_load.png")
    print("\n  target      workloads   req/s   p50 ms   p99 ms  CPU us/req | paced req/s  p50 ms  p99 ms")
    for r in rows:
        print(f"  {r['target']:10s} {r['workloads']:>9} {r['throughput_rps']:>7.0f} {r['throughput_p50_ms']:>8.2f} "
              f"{r['throughput_p99_ms']:>8.2f} {r['cpu_us_per_request']:>11.0f} | {r['paced_rps']:>11.0f} "
              f"{r['paced_p50_ms']:>7.2f} {r['paced_p99_ms']:>7.2f}")
    print(f"saved {out / 'adapter_load.json'}, .csv, .png")
    return 0


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for target, color in (("foresight", "#1f77b4"), ("prometheus", "#d62728")):
        rs = [r for r in rows if r["target"] == target]
        if not rs:
            continue
        xs = [r["workloads"] for r in rs]
        axes[0].plot(xs, [r["throughput_rps"] for r in rs], "o-", color=color, label=target)
        axes[1].plot(xs, [r["paced_p99_ms"] for r in rs], "o-", color=color, label=f"{target} p99")
        axes[1].plot(xs, [r["paced_p50_ms"] for r in rs], "o--", color=color, alpha=0.6, label=f"{target} p50")
    axes[0].set(xscale="log", xlabel="workloads", ylabel="req/s (wrk -c8, flat out)", title="throughput")
    axes[1].set(xscale="log", yscale="log", xlabel="workloads", ylabel="latency ms", title="latency at ~1,000 req/s offered")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("HPA metric request: foresight serve (HTTPS, Redis) vs a PromQL query per request")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
