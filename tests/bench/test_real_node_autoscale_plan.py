"""The parts of bench/real_node_autoscale.py that need no node: the plan (the trace's rise found
where it is), the backfilled history (it continues the live demand at the same time of day), the
OpenMetrics text promtool reads, and the report's integrals and first-crossing times."""

from __future__ import annotations

import math

from bench.real_node_autoscale import CORES_PER_RPS, FULL, PEAK_RPS, QUICK, history_cores, plan, poisson_counter
from bench.real_node_report import _first, _integral_minutes
from tests.cluster.backfill import counter_samples, openmetrics


def test_the_quick_plan_starts_flat_and_finds_the_trace_rise_five_minutes_in():
    p = plan(*QUICK)
    assert p.rise_offset_s == 300.0  # 15:05 flat, 15:10 the last flat point, 15:15 and 15:20 rising
    assert p.rps(0) < p.rps(p.rise_offset_s + 600) / 3
    assert max(p.rps(t) for t in range(0, int(p.segment.length_s), 30)) <= PEAK_RPS + 1e-9
    assert abs(len(p.offsets) - sum(p.rps(t) for t in range(int(p.segment.length_s)))) < 0.05 * len(p.offsets)


def test_the_history_continues_the_live_demand_and_repeats_the_rise_a_day_earlier():
    p = plan(*QUICK)
    live = 1_800_000_000.0
    cores = history_cores(p, live)
    assert math.isclose(cores(live), p.rps(0) * CORES_PER_RPS, rel_tol=1e-6)  # the join
    day_before_peak = cores(live - 86400 + p.rise_offset_s + 900)
    day_before_flat = cores(live - 86400)
    assert day_before_peak > 3 * day_before_flat  # the trace's daily rise, a day earlier at the same time
    assert cores(live - 14 * 86400 + 60) > 0


def test_the_counter_integrates_the_cores_and_the_openmetrics_text_is_one_family_ending_in_eof():
    s = counter_samples(lambda t: 0.5, 0.0, 120.0, 30.0)
    assert [t for t, _ in s] == [0.0, 30.0, 60.0, 90.0, 120.0]
    assert math.isclose(s[-1][1], 60.0)  # 0.5 cores for 120 s
    text = openmetrics([({"pod": "a-b-c", "namespace": "n"}, s)])
    lines = text.splitlines()
    assert lines[0] == "# TYPE container_cpu_usage_seconds counter" and lines[-1] == "# EOF"
    assert lines[1] == 'container_cpu_usage_seconds_total{namespace="n",pod="a-b-c"} 0.000000 0.000'


def test_a_trace_history_carries_the_arrivals_poisson_noise_around_the_same_level():
    import numpy as np

    exact = counter_samples(lambda t: 0.09, 0.0, 7200.0, 30.0)
    noisy = poisson_counter(lambda t: 0.09, 0.0, 7200.0, 30.0)
    assert [t for t, _ in noisy] == [t for t, _ in exact]
    v = np.array([c for _, c in noisy])
    assert (np.diff(v) >= 0).all()  # still a counter
    assert abs(v[-1] / exact[-1][1] - 1) < 0.02  # the same CPU over two hours
    rate = (v[4:] - v[:-4]) / 120  # what rate(...[2m]) reads
    want = 1 / math.sqrt(0.09 * 120 / CORES_PER_RPS)  # Poisson: 1 / sqrt(requests in the window)
    assert 0.6 * want < rate.std() / rate.mean() < 1.5 * want
    assert poisson_counter(lambda t: 0.09, 0.0, 600.0, 30.0, seed=1) != poisson_counter(lambda t: 0.09, 0.0, 600.0, 30.0)


def test_replica_minutes_are_a_step_integral_and_first_crossings_are_polled_times():
    rows = [{"t": 0.0, "r": 1}, {"t": 60.0, "r": 3}, {"t": 90.0, "r": 2}]
    assert math.isclose(_integral_minutes(rows, "r", 0.0, 120.0), (60 * 1 + 30 * 3 + 30 * 2) / 60)
    assert math.isclose(_integral_minutes(rows, "r", 30.0, 75.0), (30 * 1 + 15 * 3) / 60)
    assert _first(rows, "r", lambda v: v > 1) == 60.0
    assert _first(rows, "r", lambda v: v > 3) is None


def test_the_observe_line_is_compared_with_the_predictive_hpa_at_each_poll_of_the_live_segment():
    from bench.real_node_report import observe_against_act

    p = plan(*QUICK)
    live = 1_800_000_000.0
    rise = live + p.rise_offset_s
    # the would-have line one poll late at the raise: two polls differ by 2
    rows = [{"t": live + t, "predictive_desired": 1 if t < 400 else 3, "observe_would_have": 1 if t < 404 else 3}
            for t in range(-60, 1300, 2)]
    raw = {"observe_status": {"underCapacityMinutes": {"wouldHave": 0.5, "actual": 4.0}},
           "live_unix": live, "rise_unix": rise, "plan": p}
    o = observe_against_act(raw, rows)
    assert o["polls"] == len([r for r in rows if live <= r["t"] <= live + p.segment.length_s])
    assert o["max_abs_difference"] == 2 and 0.99 < o["equal_share"] < 1.0
    assert (o["first_predictive_raise_after_rise_s"], o["first_would_have_raise_after_rise_s"]) == (400 - p.rise_offset_s, 404 - p.rise_offset_s)
    assert o["under_capacity_minutes"] == {"wouldHave": 0.5, "actual": 4.0}
    assert observe_against_act(raw, [{**r, "observe_would_have": None} for r in rows]) is None


def test_the_replay_against_the_node_plays_the_demand_the_node_driver_sent():
    """The replay's trace, scaled as bench.real_node_replay scales it, equals the driver's rate x
    the CPU a request costs at every second of the segment (a replay scaled by another top put a
    plateau at 0.70 of the pods' requests on the wrong side of the limit)."""
    import numpy as np

    from bench.real_node_replay import replay_trace

    for start, minutes in (QUICK, FULL):
        p = plan(start, minutes)
        ts, vals, k = replay_trace({"segment_start": start, "segment_minutes": minutes})
        t0 = p.segment.start.timestamp()
        for t in range(0, int(minutes * 60), 37):
            assert math.isclose(float(np.interp(t0 + t, ts, vals)) * k, p.rps(t) * CORES_PER_RPS, rel_tol=1e-6), (start, t)


def test_the_ramp_plan_steps_up_after_its_flat_minutes_and_its_history_repeats_the_step_each_day():
    from bench.real_node_autoscale import RAMP_FLAT, RAMP_RISE_S, ramp_plan

    p = ramp_plan()
    rise = p.rise_offset_s
    assert math.isclose(p.rps(0), RAMP_FLAT * PEAK_RPS) and math.isclose(p.rps(rise), RAMP_FLAT * PEAK_RPS)
    assert math.isclose(p.rps(rise + RAMP_RISE_S), PEAK_RPS) and math.isclose(p.rps(p.segment.length_s), PEAK_RPS)
    live = 1_800_000_000.0
    cores = history_cores(p, live)
    assert math.isclose(cores(live), p.rps(0) * CORES_PER_RPS, rel_tol=1e-6)  # the join
    for day in (1, 2, 3):  # the same step at the same time of day, every day of the history
        for t in (0.0, rise, rise + RAMP_RISE_S / 2, rise + RAMP_RISE_S, p.segment.length_s):
            assert math.isclose(cores(live - day * 86400 + t), p.rps(t) * CORES_PER_RPS, rel_tol=1e-6), (day, t)
    assert math.isclose(cores(live - 86400 + rise + 7200), RAMP_FLAT * PEAK_RPS * CORES_PER_RPS)  # back down later that day
