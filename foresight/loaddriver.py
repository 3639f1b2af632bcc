"""``foresight load``: open-loop HTTP load whose rate follows a real trace segment.

    foresight load --target http://127.0.0.1:8080/ --series azurev1-737498 \\
        --start 2017-01-20T06:00:00Z --trace-minutes 120 --speed 20 --peak-rps 40 \\
        --slo-ms 200 --out load.csv

- Demand: the trace's values (``--data``, default the bundled foresight/data/traces.csv.gz;
  tests/data/cpu_slice.csv.gz works too) for ``--series`` from ``--start`` for
  ``--trace-minutes``, linearly interpolated and scaled so the window's highest value is
  ``--peak-rps``. ``--speed N`` plays N trace seconds per wall second (120 trace minutes at
  ``--speed 20`` take 6 wall minutes). ``--dry-run`` prints the plan and sends nothing.
- Open loop: arrivals are placed on that rate curve up front (``--arrivals poisson``, seeded, or
  ``uniform``) and each is sent at its time whether or not earlier ones were answered, over at
  most ``--concurrency`` connections at once. An arrival that finds them all busy is recorded
  as not sent (error ``not_sent``) instead of waiting, which would quietly turn the load
  closed-loop. Each request is a new connection, so a Service balances every request.
- Records: every arrival, one CSV row (``--out``): seq, scheduled_s, sent_s, sent_unix,
  latency_ms, status, error. Summary per minute of schedule (``--summary-out``, and printed):
  requests, ok (2xx), errors, p50/p99 latency of 2xx answers (nearest rank), and over_slo_share:
  the share of requests not answered 2xx within ``--slo-ms`` (a fast 503 is a breach, not a
  good request).
- Safety: the target must resolve only to loopback (127.0.0.0/8, ::1) or the test cluster's pod
  (198.18.0.0/16) or service (198.19.0.0/16) addresses; every resolved address is checked and
  the connections go to the checked address (no second lookup). A run stops by itself after
  ``--max-requests`` arrivals or ``--max-seconds`` (hard caps: HARD_MAX_REQUESTS,
  HARD_MAX_SECONDS), or at the end of the segment.

As a library (bench/real_node.py): ``resolve_target`` -> ``load_segment`` -> ``plan_arrivals``
-> ``run_load`` (blocking; run one per thread with the same offsets to give two copies of an
app the same demand; ``stop`` ends it early) -> ``summarise`` / ``write_records``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import http.client
import ipaddress
import math
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Callable, Sequence

from core.errors import UserError

ALLOWED_NETWORKS = tuple(ipaddress.ip_network(n) for n in
                         ("127.0.0.0/8", "::1/128", "198.18.0.0/16", "198.19.0.0/16"))
HARD_MAX_REQUESTS = 500_000
HARD_MAX_SECONDS = 6 * 3600.0
HARD_MAX_CONCURRENCY = 1024


class TargetRefused(UserError):
    """The target is (or resolves to) an address outside the allowed ranges."""


# --- the target: resolved once, every address checked ------------------------------------------


@dataclass(frozen=True)
class Target:
    url: str
    host_header: str
    address: str  # the checked address every connection goes to
    port: int
    path: str


def address_allowed(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:  # ::ffff:8.8.8.8 is 8.8.8.8
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in ALLOWED_NETWORKS)


def resolve_target(url: str, resolver: Callable = socket.getaddrinfo) -> Target:
    """Check ``--target`` and pin it to one checked address; ``resolver`` is getaddrinfo's
    signature (tests pass a fake one)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise UserError(f"--target {url!r}: give an http:// URL with a host, e.g. http://127.0.0.1:8080/")
    port = parts.port or 80
    try:
        infos = resolver(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"--target {url!r}: cannot resolve {parts.hostname!r} ({exc}); "
                        f"give an IP address or a name that resolves here") from exc
    addresses = sorted({info[4][0] for info in infos})
    refused = [a for a in addresses if not address_allowed(a)]
    if refused or not addresses:
        raise TargetRefused(
            f"--target {url!r}: {parts.hostname!r} resolves to {', '.join(refused) or 'nothing'}, outside the "
            f"allowed ranges (loopback 127.0.0.0/8 and ::1, pod CIDR 198.18.0.0/16, service CIDR 198.19.0.0/16); "
            f"point --target at a loopback address or a pod or Service address of the test cluster")
    host_header = parts.netloc.rpartition("@")[2]
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url=url, host_header=host_header, address=addresses[0], port=port, path=path)


# --- the demand: a trace segment scaled to a peak rate -------------------------------------------


@dataclass(frozen=True)
class Segment:
    series_id: str
    start: datetime
    offsets_s: tuple[float, ...]  # trace seconds from start, increasing
    values: tuple[float, ...]

    @property
    def length_s(self) -> float:
        return self.offsets_s[-1]


def bundled_traces() -> Path:
    return Path(str(resources.files("foresight") / "data" / "traces.csv.gz"))


def _parse_time(text: str, flag: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return datetime.fromtimestamp(float(text), tz=timezone.utc)
        except ValueError:
            raise UserError(f"{flag} {text!r}: give an RFC 3339 time such as 2017-01-20T06:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def load_segment(path: str | Path, series_id: str | None, start: str | None, trace_minutes: float) -> Segment:
    """The rows of ``series_id`` (default: the file's first series) in [start, start + minutes]."""
    opener = gzip.open if str(path).endswith(".gz") else open
    rows: list[tuple[datetime, float]] = []
    with opener(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            series_id = series_id or row["series_id"]
            if row["series_id"] == series_id and row["value"] not in ("", "nan", "NaN"):
                rows.append((_parse_time(row["timestamp"], "--data timestamp"), float(row["value"])))
    if not rows:
        raise UserError(f"--series {series_id!r}: no rows in {path}; list the ids with "
                        f"`zcat {path} | cut -d, -f1 | sort -u`")
    rows.sort()
    t0 = _parse_time(start, "--start") if start else rows[0][0]
    t1 = t0 + timedelta(minutes=trace_minutes)
    window = [(t, v) for t, v in rows if t0 <= t <= t1]
    if len(window) < 2:
        raise UserError(f"--start {t0.isoformat()} --trace-minutes {trace_minutes:g}: fewer than 2 points of "
                        f"{series_id} in that window (the series runs {rows[0][0].isoformat()} .. {rows[-1][0].isoformat()})")
    return Segment(series_id, window[0][0], tuple((t - window[0][0]).total_seconds() for t, _ in window),
                   tuple(v for _, v in window))


def plan_arrivals(segment: Segment, peak_rps: float, speed: float, arrivals: str = "poisson",
                  seed: int = 0, max_requests: int = HARD_MAX_REQUESTS) -> list[float]:
    """Send offsets in wall seconds from the start: arrivals of the rate curve, the k-th where the
    expected count reaches k - 0.5 (uniform) or a unit-rate Poisson process's k-th event
    (poisson), both through the inverse of the cumulative rate. At most ``max_requests``."""
    import numpy as np

    if max(segment.values) <= 0:
        raise UserError(f"--series {segment.series_id}: the window's values are all <= 0; pick another --start")
    wall_s = segment.length_s / speed
    grid = np.linspace(0.0, wall_s, max(2, int(wall_s / 0.01) + 1))
    rate = np.interp(grid * speed, segment.offsets_s, segment.values) / max(segment.values) * peak_rps
    cumulative = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
    total = cumulative[-1]
    if arrivals == "uniform":
        targets = np.arange(0.5, total, 1.0)
    elif arrivals == "poisson":
        gaps = np.random.default_rng(seed).exponential(1.0, size=int(total + 6 * math.sqrt(total) + 10))
        targets = np.cumsum(gaps)
        targets = targets[targets < total]
    else:
        raise UserError(f"--arrivals {arrivals!r}: use poisson or uniform")
    return [float(x) for x in np.interp(targets[:max_requests], cumulative, grid)]


# --- the run: open loop, every arrival recorded ----------------------------------------------


@dataclass
class RequestRecord:
    seq: int
    scheduled_s: float
    sent_s: float | None = None
    sent_unix: float | None = None
    latency_ms: float | None = None
    status: int | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _send(target: Target, record: RequestRecord, t0: float, t0_unix: float, timeout_s: float) -> None:
    start = time.monotonic()
    record.sent_s = start - t0
    record.sent_unix = t0_unix + record.sent_s
    conn = None
    try:
        conn = http.client.HTTPConnection(target.address, target.port, timeout=timeout_s)
        conn.request("GET", target.path, headers={"Host": target.host_header, "Connection": "close"})
        response = conn.getresponse()
        response.read()
        record.status = response.status
    except Exception as exc:  # noqa: BLE001 (every failure is an outcome to record, not a crash)
        record.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        record.latency_ms = (time.monotonic() - start) * 1000.0
        if conn is not None:
            conn.close()


def run_load(target: Target, offsets: Sequence[float], *, concurrency: int = 64, timeout_s: float = 10.0,
             max_seconds: float = 3600.0, max_requests: int = HARD_MAX_REQUESTS,
             stop: threading.Event | None = None, start_at: float | None = None) -> list[RequestRecord]:
    """Send one GET per offset (wall seconds from ``start_at``, a time.monotonic() value, default
    now), open-loop; returns a record per arrival reached. Stops at the last offset, after
    ``max_requests`` arrivals or ``max_seconds`` (capped at HARD_MAX_REQUESTS, HARD_MAX_SECONDS),
    or when ``stop`` is set; requests in flight
    then finish within their ``timeout_s``."""
    max_seconds = min(max_seconds, HARD_MAX_SECONDS)
    stop = stop or threading.Event()
    t0 = time.monotonic() if start_at is None else start_at
    t0_unix = time.time() + (t0 - time.monotonic())
    slots = threading.BoundedSemaphore(min(concurrency, HARD_MAX_CONCURRENCY))
    records: list[RequestRecord] = []

    def send(record: RequestRecord) -> None:
        try:
            _send(target, record, t0, t0_unix, timeout_s)
        finally:
            slots.release()

    with ThreadPoolExecutor(max_workers=min(concurrency, HARD_MAX_CONCURRENCY),
                            thread_name_prefix="load-driver") as pool:
        for seq, offset in enumerate(offsets[:min(max_requests, HARD_MAX_REQUESTS)]):
            if offset > max_seconds or stop.wait(max(0.0, t0 + offset - time.monotonic())):
                break
            record = RequestRecord(seq=seq, scheduled_s=offset)
            records.append(record)
            if not slots.acquire(blocking=False):
                record.error = f"not_sent: all {concurrency} connections busy (raise --concurrency)"
                continue
            pool.submit(send, record)
    return records


# --- the summary ------------------------------------------------------------------------------


def nearest_rank(sorted_values: Sequence[float], percent: float) -> float | None:
    """The smallest value with at least ``percent`` % of the values at or below it."""
    if not sorted_values:
        return None
    return sorted_values[max(1, math.ceil(percent / 100.0 * len(sorted_values))) - 1]


def _summary_row(bucket_s: float | str, records: Sequence[RequestRecord], slo_ms: float) -> dict:
    ok = sorted(r.latency_ms for r in records if r.ok)
    good = sum(1 for v in ok if v <= slo_ms)
    n = len(records)
    return {"minute_start_s": bucket_s, "requests": n, "ok": len(ok), "errors": n - len(ok),
            "p50_ms": nearest_rank(ok, 50), "p99_ms": nearest_rank(ok, 99),
            "over_slo": n - good, "over_slo_share": (n - good) / n if n else 0.0}


def summarise(records: Sequence[RequestRecord], slo_ms: float, bucket_seconds: float = 60.0) -> tuple[list[dict], dict]:
    """Per bucket of *scheduled* time (so a bucket holds the trace's demand for that minute even
    when the driver ran late) and in total."""
    buckets: dict[int, list[RequestRecord]] = {}
    for r in records:
        buckets.setdefault(int(r.scheduled_s // bucket_seconds), []).append(r)
    rows = [_summary_row(k * bucket_seconds, buckets[k], slo_ms) for k in sorted(buckets)]
    return rows, _summary_row("total", records, slo_ms)


def write_records(path: str | Path, records: Sequence[RequestRecord]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([fl.name for fl in fields(RequestRecord)])
        for r in records:
            w.writerow(["" if v is None else (round(v, 3) if isinstance(v, float) else v) for v in asdict(r).values()])


def write_summary(path: str | Path, rows: Sequence[dict], total: dict) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(total))
        w.writeheader()
        for row in [*rows, total]:
            w.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})


def format_summary(rows: Sequence[dict], total: dict, slo_ms: float) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.1f}"
    lines = [f"{'minute':>7} {'requests':>8} {'ok':>7} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'>' + f'{slo_ms:g}ms':>8}"]
    for r in [*rows, total]:
        label = r["minute_start_s"] if r is total else f"{r['minute_start_s'] / 60:.0f}"
        lines.append(f"{label:>7} {r['requests']:>8} {r['ok']:>7} {r['errors']:>6} {ms(r['p50_ms']):>8} "
                     f"{ms(r['p99_ms']):>8} {r['over_slo_share']:>8.1%}")
    return "\n".join(lines)


# --- the command --------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """``load`` and, with it, ``demo-app`` (foresight/demoapp.py): the two halves of a load test
    come from one entry of foresight.cli's COMMAND_MODULES."""
    from foresight import demoapp

    demoapp.register(sub)
    p = sub.add_parser("load", help="open-loop HTTP load following a real trace segment (local/test-cluster targets only)",
                       description=__doc__.split("\n\n", 1)[0],
                       epilog="example: foresight load --target http://127.0.0.1:8080/ --series azurev1-737498 "
                              "--trace-minutes 120 --speed 20 --peak-rps 40 --out load.csv")
    p.add_argument("--target", required=True,
                   help="http://HOST:PORT/PATH; HOST must resolve to 127.0.0.0/8, ::1, 198.18.0.0/16 or 198.19.0.0/16")
    p.add_argument("--data", help="long CSV (series_id,timestamp,value), .gz ok (default: the bundled traces)")
    p.add_argument("--series", help="series id in --data (default: its first series)")
    p.add_argument("--start", help="trace time the segment starts, RFC 3339 (default: the series' first point)")
    p.add_argument("--trace-minutes", type=float, default=60.0, help="segment length in trace minutes (default 60)")
    p.add_argument("--speed", type=float, default=10.0, help="trace seconds per wall second (default 10)")
    p.add_argument("--peak-rps", type=float, required=True, help="requests per second at the segment's highest value")
    p.add_argument("--arrivals", choices=("poisson", "uniform"), default="poisson", help="arrival process (default poisson)")
    p.add_argument("--seed", type=int, default=0, help="seed of the poisson arrivals (default 0)")
    p.add_argument("--slo-ms", type=float, default=200.0, help="latency SLO for the summary (default 200 ms)")
    p.add_argument("--concurrency", type=int, default=64, help="connections open at once at most (default 64)")
    p.add_argument("--timeout-seconds", type=float, default=10.0, help="per-request timeout (default 10)")
    p.add_argument("--max-requests", type=int, default=50_000,
                   help=f"stop after this many arrivals (default 50000, at most {HARD_MAX_REQUESTS})")
    p.add_argument("--max-seconds", type=float, default=1800.0,
                   help=f"stop after this many wall seconds (default 1800, at most {HARD_MAX_SECONDS:.0f})")
    p.add_argument("--out", default="load-requests.csv", help="one row per request (default load-requests.csv)")
    p.add_argument("--summary-out", help="per-minute summary CSV (default: --out with .summary.csv)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (requests per minute), send nothing")
    p.set_defaults(func=run_load_command)


def check_args(args: argparse.Namespace) -> list[str]:
    problems = []
    if not 0 < args.peak_rps <= 5000:
        problems.append(f"--peak-rps {args.peak_rps:g}: must be in (0, 5000]")
    if not 0 < args.speed <= 10_000:
        problems.append(f"--speed {args.speed:g}: must be in (0, 10000] trace seconds per wall second")
    if args.trace_minutes <= 0:
        problems.append(f"--trace-minutes {args.trace_minutes:g}: must be > 0")
    if not 1 <= args.max_requests <= HARD_MAX_REQUESTS:
        problems.append(f"--max-requests {args.max_requests}: must be in [1, {HARD_MAX_REQUESTS}]")
    if not 0 < args.max_seconds <= HARD_MAX_SECONDS:
        problems.append(f"--max-seconds {args.max_seconds:g}: must be in (0, {HARD_MAX_SECONDS:.0f}]")
    if not 1 <= args.concurrency <= HARD_MAX_CONCURRENCY:
        problems.append(f"--concurrency {args.concurrency}: must be in [1, {HARD_MAX_CONCURRENCY}]")
    if not 0 < args.timeout_seconds <= 120:
        problems.append(f"--timeout-seconds {args.timeout_seconds:g}: must be in (0, 120]")
    if args.slo_ms <= 0:
        problems.append(f"--slo-ms {args.slo_ms:g}: must be > 0")
    return problems


def run_load_command(args: argparse.Namespace) -> int:
    problems = check_args(args)
    if problems:
        raise UserError("; ".join(problems))
    target = resolve_target(args.target)  # before anything else: a refused target costs nothing
    segment = load_segment(args.data or bundled_traces(), args.series, args.start, args.trace_minutes)
    offsets = plan_arrivals(segment, args.peak_rps, args.speed, args.arrivals, args.seed, HARD_MAX_REQUESTS)
    wall_s = segment.length_s / args.speed
    print(f"foresight load: {segment.series_id} from {segment.start.isoformat()} for {segment.length_s / 60:g} trace min "
          f"= {wall_s:.0f} s at --speed {args.speed:g}; {len(offsets)} requests planned, peak {args.peak_rps:g} rps; "
          f"target {target.url} ({target.address})", flush=True)
    if len(offsets) > args.max_requests or wall_s > args.max_seconds:
        print(f"foresight load: the plan is cut to --max-requests {args.max_requests} / --max-seconds "
              f"{args.max_seconds:g}", file=sys.stderr, flush=True)
    offsets = [o for o in offsets[:args.max_requests] if o <= args.max_seconds]
    if args.dry_run:
        plan = [RequestRecord(seq=i, scheduled_s=o, status=200, latency_ms=0.0) for i, o in enumerate(offsets)]
        for row in summarise(plan, args.slo_ms)[0]:
            print(f"minute {row['minute_start_s'] / 60:>4.0f}: {row['requests']} requests")
        return 0
    records = run_load(target, offsets, concurrency=args.concurrency, timeout_s=args.timeout_seconds,
                       max_seconds=args.max_seconds, max_requests=args.max_requests)
    rows, total = summarise(records, args.slo_ms)
    summary_out = args.summary_out or str(Path(args.out).with_suffix("")) + ".summary.csv"
    write_records(args.out, records)
    write_summary(summary_out, rows, total)
    print(format_summary(rows, total, args.slo_ms))
    print(f"foresight load: {len(records)} requests recorded in {args.out}, summary in {summary_out}")
    return 0
