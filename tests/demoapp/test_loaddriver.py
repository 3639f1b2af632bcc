"""``foresight load``: refuses targets outside loopback and the test cluster's ranges, follows the
trace's shape, records every arrival, bounds itself, and summarises exactly."""

from __future__ import annotations

import csv
import socket
import threading

import pytest

from foresight.cli import main
from foresight.loaddriver import (
    RequestRecord,
    TargetRefused,
    address_allowed,
    bundled_traces,
    load_segment,
    nearest_rank,
    plan_arrivals,
    resolve_target,
    run_load,
    summarise,
)
from tests.demoapp.conftest import running_demo_app

# azurev1-737498 sits near 13 % until 15:15 and near 58 % from 15:20: a real rise to a peak.
RISE = dict(series_id="azurev1-737498", start="2017-01-25T14:20:00Z", trace_minutes=90)


def _resolver_to(*addresses: str):
    def resolve(host, port, type=0):
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses]
    return resolve


@pytest.mark.parametrize("url", ["http://10.0.0.1/", "http://8.8.8.8:80/", "http://192.168.1.1:8080/x",
                                 "http://[::ffff:8.8.8.8]/", "http://[2001:db8::1]/", "http://198.20.0.1/"])
def test_targets_outside_loopback_and_the_cluster_ranges_are_refused(url):
    with pytest.raises(TargetRefused, match="--target"):
        resolve_target(url)


def test_a_hostname_is_refused_if_any_address_it_resolves_to_is_outside_the_ranges():
    with pytest.raises(TargetRefused, match="93.184.216.34"):
        resolve_target("http://example.test/", resolver=_resolver_to("93.184.216.34"))
    with pytest.raises(TargetRefused, match="8.8.8.8"):
        resolve_target("http://mixed.test/", resolver=_resolver_to("127.0.0.1", "8.8.8.8"))


def test_loopback_pod_and_service_addresses_are_allowed_and_the_connection_goes_to_the_checked_one():
    target = resolve_target("http://localhost:8080/work?x=1")
    assert address_allowed(target.address) and target.port == 8080 and target.path == "/work?x=1"
    assert target.host_header == "localhost:8080"
    svc = resolve_target("http://app.ns.svc.cluster.local/", resolver=_resolver_to("198.19.0.10"))
    assert (svc.address, svc.port, svc.host_header) == ("198.19.0.10", 80, "app.ns.svc.cluster.local")
    assert all(address_allowed(a) for a in ("127.0.0.1", "127.9.9.9", "::1", "198.18.3.4", "198.19.255.254"))


def test_the_command_refuses_a_target_before_it_sends_or_writes_anything(tmp_path, capsys):
    out = tmp_path / "load.csv"
    assert main(["load", "--target", "http://8.8.8.8/", "--peak-rps", "5", "--out", str(out)]) == 2
    assert "--target" in capsys.readouterr().err and not out.exists()


def test_the_command_names_every_out_of_range_flag(capsys):
    assert main(["load", "--target", "http://127.0.0.1:9/", "--peak-rps", "0", "--max-requests", "10000000",
                 "--max-seconds", "0"]) == 2
    err = capsys.readouterr().err
    assert "--peak-rps 0" in err and "--max-requests 10000000" in err and "--max-seconds 0" in err


def test_uniform_arrivals_follow_the_scaled_rate_curve():
    segment = load_segment(bundled_traces(), **RISE)
    offsets = plan_arrivals(segment, peak_rps=40, speed=60, arrivals="uniform")
    assert offsets == sorted(offsets) and offsets[-1] <= segment.length_s / 60
    per_trace_minute = lambda a, b: sum(1 for o in offsets if a * 60 <= o * 60 < b * 60) / (b - a)  # noqa: E731
    low, high = per_trace_minute(0, 50), per_trace_minute(65, 90)
    assert high / low == pytest.approx(58 / 13, rel=0.15)  # the trace's own ratio
    assert high == pytest.approx(40, rel=0.1)  # per wall second at --speed 60: near --peak-rps at the top
    assert len(plan_arrivals(segment, peak_rps=40, speed=60, max_requests=7)) == 7


def test_the_driver_sends_more_in_the_traces_high_minutes_and_records_every_request(tmp_path):
    out = tmp_path / "load.csv"
    with running_demo_app("--cpu-ms-per-request", "1", "--workers", "4", "--queue", "500") as app:
        rc = main(["load", "--target", f"http://127.0.0.1:{app.port}/", "--series", RISE["series_id"],
                   "--start", RISE["start"], "--trace-minutes", "90", "--speed", "1080", "--peak-rps", "80",
                   "--slo-ms", "5000", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(open(out)))
    summary = list(csv.DictReader(open(tmp_path / "load.summary.csv")))
    segment = load_segment(bundled_traces(), **RISE)
    assert len(rows) == len(plan_arrivals(segment, 80, 1080)) > 100  # every planned arrival has a row
    assert sorted(int(r["seq"]) for r in rows) == list(range(len(rows)))
    assert all(r["sent_s"] and r["latency_ms"] and (r["status"] or r["error"]) for r in rows)
    sent_trace_minute = [float(r["sent_s"]) * 1080 / 60 for r in rows]
    low = sum(1 for m in sent_trace_minute if 0 <= m < 25)  # ~13 % of CPU in the trace
    high = sum(1 for m in sent_trace_minute if 65 <= m < 90)  # ~58 %
    assert high > 2 * low > 0
    assert summary[-1]["minute_start_s"] == "total" and int(summary[-1]["requests"]) == len(rows)


def test_a_run_stops_at_max_seconds_and_records_arrivals_that_found_no_free_connection():
    with running_demo_app("--cpu-ms-per-request", "1000", "--workers", "1", "--queue", "10") as app:
        target = resolve_target(f"http://127.0.0.1:{app.port}/")
        records = run_load(target, [0.0, 0.0, 0.0, 0.5, 1000.0], concurrency=1, max_seconds=5.0)
    assert [r.seq for r in records] == [0, 1, 2, 3]  # the arrival at 1000 s is past --max-seconds
    assert records[0].status == 200
    assert [r.error.split(":")[0] for r in records[1:3]] == ["not_sent", "not_sent"]


def test_a_stop_event_ends_the_run_early():
    stop = threading.Event()
    stop.set()
    target = resolve_target("http://127.0.0.1:9/")
    assert run_load(target, [0.5, 1.0], stop=stop) == []


def test_a_run_stops_after_max_requests():
    target = resolve_target("http://127.0.0.1:9/")  # nothing listens: each arrival is a quick error
    records = run_load(target, [0.0, 0.01, 0.02, 0.03], max_requests=2)
    assert [r.seq for r in records] == [0, 1] and all(r.error for r in records)


def _rec(seq, minute, latency_ms, status=200, error=""):
    return RequestRecord(seq=seq, scheduled_s=minute * 60 + 1, sent_s=minute * 60 + 1, latency_ms=latency_ms,
                         status=status, error=error)


def test_the_summary_on_a_hand_made_latency_set():
    minute0 = [_rec(i, 0, float(i + 1)) for i in range(100)]  # 1, 2, ..., 100 ms, all 200
    minute2 = [_rec(100, 2, 10.0), _rec(101, 2, 1.0, status=503), _rec(102, 2, 10000.0, None, "TimeoutError")]
    rows, total = summarise(minute0 + minute2, slo_ms=90)
    assert [r["minute_start_s"] for r in rows] == [0, 120]
    assert rows[0] == {"minute_start_s": 0, "requests": 100, "ok": 100, "errors": 0, "p50_ms": 50.0,
                       "p99_ms": 99.0, "over_slo": 10, "over_slo_share": 0.1}
    # the fast 503 and the timeout are breaches of the SLO, and not latencies of answers
    assert rows[1] == {"minute_start_s": 120, "requests": 3, "ok": 1, "errors": 2, "p50_ms": 10.0,
                       "p99_ms": 10.0, "over_slo": 2, "over_slo_share": 2 / 3}
    assert (total["requests"], total["ok"], total["errors"], total["over_slo"]) == (103, 101, 2, 12)
    assert nearest_rank([], 99) is None and nearest_rank([5.0], 50) == 5.0


def test_a_dry_run_prints_the_plan_per_minute_and_sends_nothing(tmp_path, capsys):
    out = tmp_path / "load.csv"
    assert main(["load", "--target", "http://127.0.0.1:9/", "--series", RISE["series_id"],
                 "--start", RISE["start"], "--trace-minutes", "90", "--speed", "45", "--peak-rps", "10",
                 "--arrivals", "uniform", "--dry-run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    minutes = [int(line.split(":")[1].split()[0]) for line in printed.splitlines() if line.startswith("minute")]
    assert len(minutes) == 2 and minutes[1] > minutes[0]  # the rise is in the second wall minute
    assert not out.exists()
