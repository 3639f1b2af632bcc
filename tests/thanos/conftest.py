"""A real Thanos on loopback: Thanos Query in front of two Prometheus replicas (each behind a
Thanos sidecar) and a store gateway over a bucket of blocks backfilled with promtool and
downsampled by ``thanos compact``. ``thanos`` is built from its Go module at a pinned version by
tests/cluster/build_thanos.sh and cached outside the repository (the first run builds it).

Layout, relative to an anchor time ``T`` (see ``anchor``)::

    bucket (store gateway)  [T-31d, T-3d)  {cluster="e2e", replica="a"}  raw + 5m + 1h blocks
    Prometheus A + sidecar  [T-3d,  T]     {cluster="e2e", replica="a"}  raw
    Prometheus B + sidecar  [T-3d,  T]     {cluster="e2e", replica="b"}  raw, with a 5 h gap
    Thanos Query            --query.replica-label=replica, the store gateway as a strict endpoint
    Thanos Query (chain)    the same endpoints, --deduplication.func=chain

Demand is ``demand(t)``: a daily sine plus a 10-minute sawtooth, one sample a minute. Raw
samples on the hour, 5-minute averages and 1-hour averages all differ, so each
``max_source_resolution`` is told apart by its values, and every value can be predicted exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from tests import stack
from tests.cluster.controlplane import ROOT, Proc, allow_cold_build, free_port, wait_for

DAY = 86400
HOUR = 3600
METRIC = "foresight_e2e_cpu"
SERIES = {"namespace": "shop", "workload": "checkout"}
SELECTOR = f'{METRIC}{{namespace="shop",workload="checkout"}}'
# promtool aligns the blocks it writes to multiples of their duration since the epoch. With
# --max-block-duration=1458h (one of TSDB's exponential block ranges) and the bucket's 28 days
# inside one such aligned slot, the bucket holds exactly one 28-day raw block: long enough for
# the compactor to make both a 5m block (needs > 40 h) and a 1h block (needs > 10 days) of it.
BLOCK = 1458 * HOUR
GAP_B = (-30 * HOUR - 1800, -26 * HOUR + 1800)  # replica b lost these samples (relative to T)


def pytest_collection_modifyitems(config, items):
    allow_cold_build(items, Path(__file__).parent, seconds=2400)


def demand(t):
    """Cores at Unix time(s) ``t`` (seconds, multiples of 60): a daily sine plus a sawtooth that
    steps 0.05 a minute over 10 minutes. Rounded to 6 decimals so promtool writes it exactly."""
    t = np.asarray(t, dtype=np.int64)
    return np.round(2.0 + np.sin(2 * np.pi * (t % DAY) / DAY) + 0.05 * ((t % 600) // 60), 6)


def window_mean(end, seconds: int):
    """What a downsampled block answers at ``end``: the mean of the raw samples in [end-seconds, end)."""
    end = np.atleast_1d(np.asarray(end, dtype=np.int64))
    return np.array([demand(np.arange(e - seconds, e, 60)).mean() for e in end])


def anchor() -> int:
    """The latest multiple of BLOCK (60.75 days) at least an hour in the past: the bucket's
    [T-31d, T-3d) is then one aligned promtool block whatever day the suite runs, and no sample
    is in the future. Everything is read relative to T (``--now`` for `foresight train`)."""
    return int((time.time() - HOUR) // BLOCK * BLOCK)


def _require(binary: str) -> None:
    if not stack.have(binary):
        msg = f"{binary} is not installed; run `make test` (it installs Debian packages as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def thanos_bin(request) -> Path:
    capman = request.config.pluginmanager.getplugin("capturemanager")
    t0 = time.monotonic()
    with capman.global_and_fixture_disabled():  # a cold build prints its progress
        r = subprocess.run(["bash", str(ROOT / "tests/cluster/build_thanos.sh")], stdout=subprocess.PIPE, text=True)
    assert r.returncode == 0, "tests/cluster/build_thanos.sh failed (its log is above)"
    path = Path(r.stdout.strip().splitlines()[-1])
    if time.monotonic() - t0 > 30:
        sys.stderr.write(f"\n[thanos] built {path} in {time.monotonic() - t0:.0f} s\n")
    return path


def _spawn(d: Path, name: str, args: list[str]) -> Proc:
    log = d / f"{name}.log"
    with open(log, "w") as f:
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=d)
    return Proc(name, p, log)


def _backfill(d: Path, name: str, times: np.ndarray, out: Path, max_block: str | None = None) -> None:
    om = d / f"{name}.om"
    stack.write_openmetrics(om, {METRIC: [(SERIES, list(zip(times.astype(float), demand(times).tolist())))]})
    cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics"]
    if max_block:
        cmd.append(f"--max-block-duration={max_block}")
    r = subprocess.run([*cmd, str(om), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, f"promtool backfill failed: {r.stderr[-2000:]}"
    om.unlink()


@dataclass
class ThanosStack:
    bin: Path
    dir: Path
    T: int
    url: str
    procs: dict[str, Proc] = field(default_factory=dict)
    store_args: list[str] = field(default_factory=list)
    store_http: int = 0
    blocks: list[dict] = field(default_factory=list)  # meta.json of every block in the bucket
    url_chain: str = ""  # a querier with --deduplication.func=chain

    def endpoints(self, url: str | None = None) -> list[dict]:
        data = httpx.get(f"{url or self.url}/api/v1/stores", timeout=5).json().get("data") or {}
        return [e for group in data.values() for e in group or []]

    def healthy(self, url: str | None = None) -> int:
        return sum(1 for e in self.endpoints(url) if not e.get("lastError"))

    @contextmanager
    def store_down(self):
        """Stop the store gateway for the block, then start it again on the same ports."""
        self.procs["store"].stop()
        try:
            yield
        finally:
            self.procs["store"] = _spawn(self.dir, "store-restarted", self.store_args)
            self.procs["store"].wait_http(f"http://127.0.0.1:{self.store_http}/-/ready", what="thanos store (restarted)")
            # the querier's gRPC connection may sit in reconnect back-off for a while: wait until
            # a query that needs the bucket succeeds without partial responses
            wait_for("the querier reading the store gateway again", self.reads_bucket, timeout=180,
                     detail=lambda: json.dumps(self.endpoints())[:2000])

    def reads_bucket(self) -> bool:
        r = httpx.post(f"{self.url}/api/v1/query", timeout=10, data={
            "query": SELECTOR, "time": str(self.T - 10 * DAY), "partial_response": "false"})
        return r.status_code == 200 and len(r.json()["data"]["result"]) == 1

    def stop(self) -> None:
        for p in reversed(list(self.procs.values())):
            p.stop()


@pytest.fixture(scope="session")
def thanos(thanos_bin, tmp_path_factory) -> ThanosStack:
    _require("prometheus")
    _require("promtool")
    d = tmp_path_factory.mktemp("thanos")
    T = anchor()
    minute = lambda a, b: np.arange(T + a, T + b, 60, dtype=np.int64)  # noqa: E731

    # The bucket: one 28-day block with the Thanos section a sidecar's shipper writes, then
    # `thanos compact` (which downsamples it to 5m and 1h blocks next to the raw one).
    bucket = d / "bucket"
    _backfill(d, "bucket", minute(-31 * DAY, -3 * DAY), bucket, max_block="1458h")
    raw_metas = list(bucket.glob("*/meta.json"))
    assert len(raw_metas) == 1, f"promtool wrote {len(raw_metas)} blocks; expected one aligned 28-day block"
    for meta in raw_metas:
        m = json.loads(meta.read_text())
        m["thanos"] = {"labels": {"cluster": "e2e", "replica": "a"}, "downsample": {"resolution": 0}, "source": "sidecar"}
        meta.write_text(json.dumps(m))
    objstore = d / "objstore.yaml"
    objstore.write_text(yaml.safe_dump({"type": "FILESYSTEM", "config": {"directory": str(bucket)}}))
    r = subprocess.run([str(thanos_bin), "compact", f"--data-dir={d / 'compact'}", f"--objstore.config-file={objstore}",
                        "--consistency-delay=0s", "--delete-delay=0s", f"--http-address=127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"thanos compact failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    blocks = [json.loads(m.read_text()) for m in bucket.glob("*/meta.json")]
    resolutions = sorted(b["thanos"]["downsample"]["resolution"] for b in blocks)
    assert resolutions == [0, 300_000, 3_600_000], f"blocks after thanos compact: {resolutions}\n{r.stderr[-3000:]}"

    procs: dict[str, Proc] = {}
    st = None
    try:
        # Two Prometheus replicas with the recent 3 days; replica b misses GAP_B.
        side = {}
        for rep in ("a", "b"):
            data = d / f"prom-{rep}"
            times = minute(-3 * DAY, 60)
            if rep == "b":
                times = times[(times < T + GAP_B[0]) | (times >= T + GAP_B[1])]
            _backfill(d, f"prom-{rep}", times, data)
            cfg = d / f"prometheus-{rep}.yml"
            cfg.write_text(yaml.safe_dump({"global": {"external_labels": {"cluster": "e2e", "replica": rep}},
                                           "scrape_configs": []}))
            port = free_port()
            procs[f"prometheus-{rep}"] = p = _spawn(d, f"prometheus-{rep}", [
                "prometheus", f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=3650d"])
            p.wait_http(f"http://127.0.0.1:{port}/-/ready", what=f"prometheus {rep}")
            grpc, http = free_port(), free_port()
            procs[f"sidecar-{rep}"] = s = _spawn(d, f"sidecar-{rep}", [
                str(thanos_bin), "sidecar", f"--tsdb.path={data}", f"--prometheus.url=http://127.0.0.1:{port}",
                f"--grpc-address=127.0.0.1:{grpc}", f"--http-address=127.0.0.1:{http}"])
            s.wait_http(f"http://127.0.0.1:{http}/-/ready", what=f"thanos sidecar {rep}")
            side[rep] = grpc

        store_grpc, store_http = free_port(), free_port()
        store_args = [str(thanos_bin), "store", f"--data-dir={d / 'store'}", f"--objstore.config-file={objstore}",
                      f"--grpc-address=127.0.0.1:{store_grpc}", f"--http-address=127.0.0.1:{store_http}"]
        procs["store"] = s = _spawn(d, "store", store_args)
        s.wait_http(f"http://127.0.0.1:{store_http}/-/ready", what="thanos store")

        qport = free_port()
        procs["query"] = q = _spawn(d, "query", [
            str(thanos_bin), "query", f"--http-address=127.0.0.1:{qport}", f"--grpc-address=127.0.0.1:{free_port()}",
            f"--endpoint=127.0.0.1:{side['a']}", f"--endpoint=127.0.0.1:{side['b']}",
            # strict: a store gateway that goes away stays in the fan-out (and fails the query or
            # makes it partial) instead of silently leaving it, as in production setups
            f"--endpoint-strict=127.0.0.1:{store_grpc}",
            "--query.replica-label=replica"])
        q.wait_http(f"http://127.0.0.1:{qport}/-/ready", what="thanos query")
        # A second querier over the same endpoints with 1:1 ("chain") deduplication instead of
        # the default penalty algorithm, which drops a sample or two where it switches replicas.
        cport = free_port()
        procs["query-chain"] = c = _spawn(d, "query-chain", [
            str(thanos_bin), "query", f"--http-address=127.0.0.1:{cport}", f"--grpc-address=127.0.0.1:{free_port()}",
            f"--endpoint=127.0.0.1:{side['a']}", f"--endpoint=127.0.0.1:{side['b']}",
            f"--endpoint=127.0.0.1:{store_grpc}", "--query.replica-label=replica", "--deduplication.func=chain"])
        c.wait_http(f"http://127.0.0.1:{cport}/-/ready", what="thanos query (chain dedup)")
        st = ThanosStack(bin=thanos_bin, dir=d, T=T, url=f"http://127.0.0.1:{qport}", procs=procs,
                         store_args=store_args, store_http=store_http, blocks=blocks,
                         url_chain=f"http://127.0.0.1:{cport}")
        wait_for("sidecars and store gateway healthy in the querier", lambda: st.healthy() == 3, timeout=120,
                 detail=lambda: json.dumps(st.endpoints())[:2000] + "\n" + q.tail())
        wait_for("the querier reading the bucket", st.reads_bucket, timeout=120, detail=q.tail)
        wait_for("all endpoints healthy in the chain querier", lambda: st.healthy(st.url_chain) == 3, timeout=120,
                 detail=lambda: json.dumps(st.endpoints(st.url_chain))[:2000] + "\n" + c.tail())
        sys.stderr.write(f"\n[thanos] query {st.url}, anchor T={T}, logs in {d}\n")
        yield st
    finally:
        for p in reversed(list(procs.values())):
            p.stop()


def foresight(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foresight", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def history(st: ThanosStack, tmp_path: Path, start: int, end: int, *flags: str, query: str = SELECTOR,
            step: str = "1h", name: str = "h", url: str | None = None):
    """Run `foresight history` through Thanos Query; return (process, frame or None)."""
    import pandas as pd

    out = tmp_path / f"{name}.csv"
    r = foresight("history", f"--source={url or st.url}", f"--query={query}", f"--start={start}", f"--end={end}",
                  f"--step={step}", f"--out={out}", *flags)
    return r, (pd.read_csv(out) if r.returncode == 0 else None)


def series(frame, contains: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(unix seconds, values) of the one series whose id contains ``contains``."""
    ids = [s for s in frame["series_id"].unique() if contains in s]
    assert len(ids) == 1, f"expected one series matching {contains!r}, got {list(frame['series_id'].unique())}"
    import pandas as pd

    f = frame[frame["series_id"] == ids[0]]
    ts = (pd.to_datetime(f["timestamp"]).astype("int64") // 10**9).to_numpy()
    return ts, f["value"].to_numpy(dtype=float)
