"""Chaos benchmark: kill -9 each real part under steady load and watch what the HPA would get.

Set-up, all real processes on loopback: Prometheus (demand history backfilled up to now),
Redis, the trainer (``foresight train``), two adapter replicas (``foresight serve --config``).
Load: wrk against both replicas for the whole run (paced, every workload in turn). A probe
reads every workload's REST row from each replica every second: the served load ratio, its
source, and the reactive floor (the observed demand a plain CPU HPA acts on, known exactly here
because the backfilled demand ends at the start: the last sample is the observed demand).

Faults, one at a time, each ``kill -9`` then a restart after ``--hold`` seconds:
redis, prometheus, trainer, one adapter replica, and redis + prometheus together (the one
documented 503 case). Reported per fault: non-2xx answers and socket errors from wrk, probe
samples below the reactive floor (under-scale), sources seen, and recovery time = from the
restart until every workload is served from a fresh forecast again (for the replica: until it
answers again), against one trainer refresh interval. The trainer checkpoints its fitted states
(``--checkpoint-dir`` in the work directory, as the trainer's emptyDir in the manifests), so a
restarted trainer publishes fitted forecasts from its first refresh.

    .venv/bin/python -m bench.chaos                   # ~6 min; results in bench/results/chaos.json
    .venv/bin/python -m bench.chaos --faults trainer  # one fault: replaces only its row there
    .venv/bin/python -m bench.chaos --quick           # smoke run: 3 workloads, the trainer fault, temp folder
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import ROOT, add_quick_args, results_dir, save_json
from forecaster.timing import TIMING
from tests import stack

REQUEST, PODS = 0.5, 4  # static capacity of every workload
EXT = "/apis/external.metrics.k8s.io/v1beta1"


def log(msg: str) -> None:
    print(msg, flush=True)


# --- the parts -----------------------------------------------------------------------------

class Proc:
    """A process restarted with the same command line (same port, same data dir)."""

    def __init__(self, name: str, cmd: list[str], logfile: Path, ready=None, env=None) -> None:
        self.name, self.cmd, self.logfile, self.ready, self.env = name, cmd, logfile, ready, env
        self.p: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "Proc":
        out = open(self.logfile, "ab")
        self.p = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env)
        deadline = time.monotonic() + timeout
        while self.ready is not None and not self.ready():
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start: {self.logfile.read_text()[-1500:]}")
            time.sleep(0.1)
        return self

    def kill9(self) -> None:
        if self.p and self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait()

    def stop(self) -> None:
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def backfill(d: Path, workloads: list[str], days: float, now: int) -> dict[str, float]:
    """Per-minute demand history (a daily cycle per workload) up to one minute ago; returns
    each workload's last value (the observed demand from here on)."""
    fam, last = [], {}
    for k, w in enumerate(workloads):
        base, amp = 1.0 + 0.25 * k, 0.4 + 0.05 * k
        samples = [(t, round(base + amp * math.sin(2 * math.pi * (t / 86400 + k / len(workloads))), 4))
                   for t in range(now - int(days * 86400), now - 60, 60)]
        fam.append(({"workload": w}, samples))
        last[w] = samples[-1][1]
    (d / "data").mkdir(parents=True)
    stack.write_openmetrics(d / "history.om", {"foresight_chaos_demand": fam})
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(d / "history.om"), str(d / "data")],
                   check=True, capture_output=True)
    (d / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    return last


def write_config(path: Path, prom_url: str, redis_url: str, workloads: list[str], refresh: float) -> None:
    import yaml

    path.write_text(yaml.safe_dump({
        "source": {"url": prom_url, "step_seconds": 60, "history_days": 2, "timeout_seconds": 5},
        "store": {"url": redis_url, "ttl_seconds": 3600},
        "training": {"refresh_interval_seconds": refresh, "retrain_interval_seconds": 86400,
                     "horizon_steps": 12, "quantiles": [0.5, 0.9], "models": ["persistence"]},
        "workloads": [{
            "namespace": "shop", "name": w,
            "demand_query": f'sum(last_over_time(foresight_chaos_demand{{workload="{w}"}}[1h]))',
            "capacity": {"cpu_request_cores": REQUEST, "ready_pods": PODS},
        } for w in workloads],
    }))


# --- load and probe ------------------------------------------------------------------------

def start_wrk(url: str, workloads: list[str], seconds: int, script_dir: Path) -> subprocess.Popen:
    from bench.adapter_load import lua_script

    names = json.dumps(workloads).replace("[", "{").replace("]", "}")
    script = lua_script(script_dir / f"chaos-{abs(hash(url))}.lua", len(workloads),
                        f"{EXT}/namespaces/shop/predicted_cpu_load_ratio?labelSelector=workload%3D", "", "", 20)
    text = script.read_text().replace("prefix .. i .. suffix", "prefix .. names[i + 1] .. suffix")
    script.write_text(f"local names = {names}\n" + text)
    return subprocess.Popen(["wrk", "-t1", "-c4", f"-d{seconds}s", "-s", str(script), url],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wrk_result(p: subprocess.Popen) -> dict:
    import re

    out = p.communicate(timeout=600)[0]
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    req = re.search(r"(\d+) requests in", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"requests": int(req.group(1)) if req else 0, "non_2xx": int(m.group(1)) if m else 0,
            "socket_errors": sum(int(x) for x in sock.groups()) if sock else 0}


class Probe(threading.Thread):
    """Every second: each replica's REST rows (served ratio, source, forecast age)."""

    def __init__(self, urls: list[str], floor: dict[str, float]) -> None:
        super().__init__(daemon=True)
        self.urls, self.floor = urls, floor
        self.samples: list[dict] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=3.0) as c:
            while not self.stop_event.is_set():
                t = time.time()
                for url in self.urls:
                    try:
                        r = c.get(f"{url}/api/v1/forecasts")
                        rows = r.json()["items"] if r.status_code == 200 else []
                    except (httpx.HTTPError, ValueError):
                        rows = None
                    self.samples.append({"t": t, "url": url, "rows": None if rows is None else [
                        {"w": i["workload"], "value": i["served"]["predicted_cpu_load_ratio"].get("value"),
                         "source": i["served"]["predicted_cpu_load_ratio"].get("source"),
                         "generated_at": i.get("generated_at")} for i in rows]})
                self.stop_event.wait(max(0.0, 1.0 - (time.time() - t)))


def summarize(samples: list[dict], floor: dict[str, float], t0: float, t1: float) -> dict:
    under, sources, seen = 0, {}, 0
    for s in samples:
        if not (t0 <= s["t"] <= t1) or s["rows"] is None:
            continue
        for row in s["rows"]:
            seen += 1
            sources[row["source"]] = sources.get(row["source"], 0) + 1
            want = floor[row["w"]] / (PODS * REQUEST)
            if row["value"] is not None and row["value"] < want - 1e-6:
                under += 1
    return {"probe_rows": seen, "below_reactive_floor": under, "sources": sources}


def all_fresh(url: str, since: float) -> bool:
    """Every workload served from a forecast generated after ``since``."""
    try:
        rows = httpx.get(f"{url}/api/v1/forecasts", timeout=5.0).json()["items"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    import calendar

    def ts(v):
        return float(calendar.timegm(time.strptime(v, "%Y-%m-%dT%H:%M:%SZ"))) if v else 0.0

    return bool(rows) and all(r["served"]["predicted_cpu_load_ratio"].get("source") == "forecast"
                              and ts(r["generated_at"]) >= math.floor(since) for r in rows)


def wait_until(ok, timeout: float) -> float | None:
    """Seconds until ``ok()`` held, or None after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if ok():
            return round(time.monotonic() - t0, 1)
        time.sleep(0.5)
    return None


# --- the run -------------------------------------------------------------------------------

def run_phase(name: str, parts: dict, victims: list[str], hold: float, replicas: list[str], probe: Probe,
              floor: dict[str, float], workloads: list[str], refresh: float, work: Path, quick: bool = False) -> dict:
    lead, slack = (1, refresh * 2 + 2) if quick else (5, refresh * 3 + 10)
    wrks = [start_wrk(u, workloads, int(lead + hold + slack), work) for u in replicas]
    time.sleep(lead)
    t_kill = time.time()
    for v in victims:
        parts[v].kill9()
    log(f"  [{name}] kill -9 {' + '.join(victims)}; holding {hold:g} s")
    time.sleep(hold)
    t_back = time.time()
    for v in victims:
        parts[v].start()
    # Recovery counts from the restart command: the process's own start-up is part of it.
    if victims == ["adapter_a"]:
        ok = wait_until(lambda: _http_ok(f"{replicas[0]}{EXT}"), 120)
    else:
        ok = wait_until(lambda: all(all_fresh(u, t_back) for u in replicas), refresh * 6 + 60)
    t_end = time.time()
    recovered = None if ok is None else round(t_end - t_back, 1)
    loads = [wrk_result(w) for w in wrks]
    out = {
        "fault": name, "killed": victims, "held_seconds": hold,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "trainer_checkpoints": True,
        "recovery_seconds": recovered, "refresh_interval_seconds": refresh,
        "recovered_within_one_refresh": recovered is not None and recovered <= refresh,
        "during_fault": summarize(probe.samples, floor, t_kill, t_back),
        "after_restart": summarize(probe.samples, floor, t_back, t_end),
        "load": {u: r for u, r in zip(replicas, loads)},
    }
    log(f"  [{name}] recovery {recovered} s; non-2xx {[r['non_2xx'] for r in loads]} of "
        f"{[r['requests'] for r in loads]}; socket errors {[r['socket_errors'] for r in loads]}; "
        f"below floor {out['during_fault']['below_reactive_floor'] + out['after_restart']['below_reactive_floor']}; "
        f"sources during {out['during_fault']['sources']}")
    return out


FAULTS = {"redis": ["redis"], "prometheus": ["prometheus"], "trainer": ["trainer"],
          "adapter-replica": ["adapter_a"], "redis+prometheus": ["redis", "prometheus"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=12)
    ap.add_argument("--hold", type=float, default=45.0, help="seconds each fault lasts (Redis: > the 30 s cache)")
    ap.add_argument("--refresh", type=float, default=15.0, help="trainer refresh interval (s)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated subset of {', '.join(FAULTS)}")
    add_quick_args(ap, "3 workloads, refresh 3 s, the trainer killed for 2 s; --faults still chooses")
    args = ap.parse_args(argv)
    if args.quick:
        args.workloads, args.hold, args.refresh = 3, 2.0, 3.0
        if args.faults == ",".join(FAULTS):
            args.faults = "trainer"
    unknown = [f for f in args.faults.split(",") if f not in FAULTS]
    if unknown:
        ap.error(f"--faults: unknown {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    out = results_dir(args)
    for b in ("wrk", "redis-server", "prometheus", "promtool"):
        if not shutil.which(b):
            raise SystemExit(f"{b} is not installed; run `make deps`")
    work = Path(tempfile.mkdtemp(prefix="foresight-chaos-"))
    workloads = [f"w{i:02d}" for i in range(args.workloads)]
    now = int(time.time())
    floor = backfill(work / "prom", workloads, 2.5, now)
    prom_port, redis_port, ports = stack.free_port(), stack.free_port(), [stack.free_port(), stack.free_port()]
    prom_url, redis_url = f"http://127.0.0.1:{prom_port}", f"redis://127.0.0.1:{redis_port}/0"
    cfg = work / "workloads.yaml"
    write_config(cfg, prom_url, redis_url, workloads, args.refresh)
    py = [sys.executable, "-m", "foresight"]
    replicas = [f"http://127.0.0.1:{p}" for p in ports]
    parts = {
        "prometheus": Proc("prometheus", ["prometheus", f"--config.file={work / 'prom' / 'prometheus.yml'}",
                                          f"--web.listen-address=127.0.0.1:{prom_port}",
                                          f"--storage.tsdb.path={work / 'prom' / 'data'}",
                                          "--storage.tsdb.retention.time=3650d"],
                           work / "prometheus.log", ready=lambda: _http_ok(f"{prom_url}/-/ready")),
        "redis": Proc("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(work)], work / "redis.log",
                      ready=lambda: stack.have("redis-server") and _port_open(redis_port)),
        "trainer": Proc("trainer", [*py, "train", "--config", str(cfg), "--checkpoint-dir", str(work / "checkpoints")],
                        work / "trainer.log"),
        **{f"adapter_{k}": Proc(f"adapter_{k}", [*py, "serve", "--plain-http", "--host", "127.0.0.1", "--port", str(p),
                                                 "--config", str(cfg), "--store", redis_url],
                                 work / f"adapter_{k}.log", ready=lambda u=u: _http_ok(f"{u}/healthz"))
           for k, p, u in zip("ab", ports, replicas)},
    }
    results: list[dict] = []
    probe = Probe(replicas, floor)
    try:
        for name in ("prometheus", "redis", "trainer", "adapter_a", "adapter_b"):
            parts[name].start()
        log(f"chaos: {len(workloads)} workloads, 2 replicas {replicas}, trainer every {args.refresh:g} s; work dir {work}")
        warm = wait_until(lambda: all(all_fresh(u, now) for u in replicas), 300)
        if warm is None:
            raise RuntimeError(f"no fresh forecasts after 300 s: {(work / 'trainer.log').read_text()[-2000:]}")
        log(f"  forecasts served by both replicas after {warm} s")
        probe.start()
        for name in args.faults.split(","):
            victims = FAULTS[name]
            results.append(run_phase(name, parts, victims, args.hold, replicas, probe, floor, workloads,
                                     args.refresh, work, quick=args.quick))
    finally:
        probe.stop_event.set()
        for p in parts.values():
            p.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    setup = {"workloads": len(workloads), "replicas": 2, "hold_seconds": args.hold,
             "refresh_interval_seconds": args.refresh, "load": "wrk -t1 -c4, 20 ms pause per request, per replica",
             "cache_max_stale_seconds": 30, "observed_direct_ttl_seconds": TIMING.observed_read_seconds}
    path = save_json("chaos", {"setup": setup, "faults": merge_faults(out / "chaos.json", setup, results)}, out)
    log(f"saved {path}")
    return 0


def merge_faults(path: Path, setup: dict, results: list[dict]) -> list[dict]:
    """A run of some faults replaces their rows in the saved results and keeps the others (in
    FAULTS order) when the set-up is the same; a different set-up starts afresh."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return results
    if old.get("setup") != setup:
        return results
    rows = {r["fault"]: r for r in old.get("faults", [])}
    for r in old.get("faults", []):
        r.setdefault("measured_at", old.get("measured_at"))
    rows.update({r["fault"]: r for r in results})
    return [rows[f] for f in FAULTS if f in rows]


def _port_open(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
