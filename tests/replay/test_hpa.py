"""Each HPA v2 rule against a hand-computed case (see ../shared/reference/hpa-algorithm.md)."""

from __future__ import annotations

import pytest

from replay.hpa import (
    HPA,
    HPASpec,
    ScalingPolicy,
    ScalingRules,
    external_average_value_proposal,
    external_value_proposal,
    milli,
    resource_utilization_proposal,
)

SPEC = HPASpec(min_replicas=1, max_replicas=100)


# ------------------------------------------------------------------ tolerance


def test_external_value_within_tolerance_keeps_current_replicas():
    # 0.76 / 0.7 = 1.0857 <= 1.1: no change even though ceil(1.0857 * 10) = 11
    assert external_value_proposal(SPEC, 10, [0.76], 0.7, ready_pods=10) == 10


def test_external_value_just_outside_tolerance_scales_on_ready_pods():
    # 0.78 / 0.7 = 1.114 > 1.1: ceil(1.114 * 8 ready) = 9 (not 10 current replicas)
    assert external_value_proposal(SPEC, 10, [0.78], 0.7, ready_pods=8) == 9


def test_tolerance_bounds_are_inclusive_on_both_sides():
    # ratio exactly 0.9 and exactly 1.1 (in milli-units: 630/700, 770/700) stay put
    assert external_value_proposal(SPEC, 10, [0.63], 0.7, ready_pods=10) == 10
    assert external_value_proposal(SPEC, 10, [0.77], 0.7, ready_pods=10) == 10
    assert external_value_proposal(SPEC, 10, [0.629], 0.7, ready_pods=10) == 9


def test_external_values_are_summed_in_milli_units_rounded_up():
    assert milli(0.0001) == 1
    assert milli(0.7) == 700
    # two items 0.0004 each -> 1 + 1 milli = 2 milli; target 0.001 (1 milli): ratio 2
    assert external_value_proposal(SPEC, 5, [0.0004, 0.0004], 0.001, ready_pods=5) == 10


def test_external_average_value_uses_status_replicas():
    # u = 3.0, A = 0.5: within tolerance of 6 status replicas -> 6; else ceil(u / A)
    assert external_average_value_proposal(SPEC, 5, 6, [3.0], 0.5) == 6
    assert external_average_value_proposal(SPEC, 5, 4, [3.0], 0.5) == 6
    assert external_average_value_proposal(SPEC, 5, 4, [3.6], 0.5) == 8


# ------------------------------------------------------------------ resource metric


def test_cpu_utilization_is_an_integer_percent_floor():
    # 10 ready pods of 1 core using 7.699 cores: 76.99% -> 76%; 76/70 = 1.0857 within tol
    assert resource_utilization_proposal(SPEC, 10, 7699, 10, 1000, 70) == 10
    # 7.7 cores -> 77% -> 1.1 exactly: still within tolerance
    assert resource_utilization_proposal(SPEC, 10, 7700, 10, 1000, 70) == 10
    # 7.8 cores -> 78%: 78/70 * 10 = 11.14 -> 12
    assert resource_utilization_proposal(SPEC, 10, 7800, 10, 1000, 70) == 12


def test_unready_pods_count_as_zero_on_scale_up():
    # 4 ready pods at 100% (4 cores), 4 starting: ratio 100/70 > 1 with unready pods ->
    # recompute over 8 pods: 4000*100 // 8000 = 50% -> 50/70 < 1 flips direction: no change
    assert resource_utilization_proposal(SPEC, 8, 4000, 4, 1000, 70, unready_pods=4) == 8
    # 4 ready at 200% (8 cores), 2 starting: 800*... -> 8000*100 // 6000 = 133%;
    # 133/70 = 1.9 -> ceil(1.9 * 6) = 12
    assert resource_utilization_proposal(SPEC, 6, 8000, 4, 1000, 70, unready_pods=2) == 12
    # the same without the rule would have been ceil(200/70 * 4) = 12 on 4 ready pods: pin
    # a case where they differ: 3 ready at 150% + 3 unready: 4500*100//6000 = 75% -> 1.07
    # within tolerance -> current (6), whereas ignoring unready gives ceil(150/70*3) = 7
    assert resource_utilization_proposal(SPEC, 6, 4500, 3, 1000, 70, unready_pods=3) == 6
    assert resource_utilization_proposal(SPEC, 6, 4500, 3, 1000, 70, unready_pods=0) == 7


def test_unready_pods_are_ignored_on_scale_down():
    # 5 ready pods at 20% with 5 starting: ratio 20/70 < 1 -> ceil(0.2857 * 5) = 2
    assert resource_utilization_proposal(SPEC, 10, 1000, 5, 1000, 70, unready_pods=5) == 2


def test_missing_pods_count_as_full_on_scale_down():
    # 4 ready at 20% + 1 missing: 800 + 1000 (100%) over 5 pods = 36% -> ceil(36/70*5) = 3
    assert resource_utilization_proposal(SPEC, 5, 800, 4, 1000, 70, missing_pods=1) == 3


def test_resource_metric_without_ready_pods_is_invalid():
    assert resource_utilization_proposal(SPEC, 3, 0, 0, 1000, 70, unready_pods=3) is None


# ------------------------------------------------------------------ invalid metrics


def test_all_metrics_invalid_means_no_change():
    hpa = HPA(SPEC)
    res = hpa.sync(0, 5, [None])
    assert res.desired == 5 and res.raw is None
    assert not hpa.recommendations  # nothing recorded


def test_some_invalid_metrics_block_a_scale_down_but_not_a_scale_up():
    hpa = HPA(SPEC)
    assert hpa.sync(0, 5, [2, None]).desired == 5
    assert hpa.sync(15, 5, [7, None]).desired == 7


def test_empty_or_nan_external_metric_is_invalid():
    assert external_value_proposal(SPEC, 5, [], 0.7, 5) is None
    assert external_value_proposal(SPEC, 5, None, 0.7, 5) is None
    assert external_value_proposal(SPEC, 5, [float("nan")], 0.7, 5) is None


# ------------------------------------------------------------------ min / max


def test_desired_is_clamped_to_max_and_min():
    hpa = HPA(HPASpec(min_replicas=2, max_replicas=10))
    assert hpa.sync(0, 8, [50]).desired == 10  # rate limit allows 16, max caps at 10
    hpa2 = HPA(HPASpec(min_replicas=2, max_replicas=10, scale_down=ScalingRules(0, "Max", (ScalingPolicy("Percent", 100, 15),))))
    assert hpa2.sync(0, 8, [0]).desired == 2


def test_replicas_outside_min_max_are_moved_inside_without_metrics():
    spec = HPASpec(min_replicas=3, max_replicas=10)
    assert HPA(spec).sync(0, 12, [None]).desired == 10
    assert HPA(spec).sync(0, 1, [None]).desired == 3


def test_zero_replicas_with_nonzero_min_disables_scaling():
    assert HPA(SPEC).sync(0, 0, [5]).desired == 0


# ------------------------------------------------------------------ scale-up rate limits


def test_default_scale_up_is_max_of_4_pods_and_100_percent_per_15s():
    hpa = HPA(SPEC)
    assert hpa.sync(0, 2, [50]).desired == 6  # max(2 + 4, 2 * 2) = 6
    # next sync exactly 15 s later: the event is out of the half-open period
    assert hpa.sync(15, 6, [50]).desired == 12  # max(6 + 4, 12)
    assert hpa.sync(30, 12, [50]).desired == 24


def test_scale_up_events_inside_the_period_lower_the_start():
    spec = HPASpec(scale_up=ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 60),)))
    hpa = HPA(spec)
    assert hpa.sync(0, 2, [50]).desired == 6
    # 15 s later the +4 is still in the 60 s period: start = 6 - 4 = 2 -> limit 6
    assert hpa.sync(15, 6, [50]).desired == 6
    assert hpa.sync(59, 6, [50]).desired == 6
    # at exactly 60 s the event is out: 6 + 4
    assert hpa.sync(60, 6, [50]).desired == 10


def test_min_select_policy_takes_the_smallest_scale_up():
    spec = HPASpec(scale_up=ScalingRules(0, "Min", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))))
    assert HPA(spec).sync(0, 10, [50]).desired == 14  # min(14, 20)
    spec2 = HPASpec(scale_up=ScalingRules(0, "Disabled", (ScalingPolicy("Pods", 4, 15),)))
    assert HPA(spec2).sync(0, 10, [50]).desired == 10


def test_percent_scale_up_rounds_up():
    spec = HPASpec(scale_up=ScalingRules(0, "Max", (ScalingPolicy("Percent", 10, 15),)))
    assert HPA(spec).sync(0, 3, [50]).desired == 4  # ceil(3.3)


# ------------------------------------------------------------------ scale-down rules


def test_scale_down_waits_for_the_300s_stabilization_window():
    hpa = HPA(SPEC)
    assert hpa.sync(0, 10, [10]).desired == 10  # seeds 10 at t=0 and records 10
    for t in range(15, 300, 15):
        assert hpa.sync(t, 10, [4]).desired == 10  # max over window still 10
    # at t=300 the records from t=0 are exactly 300 s old: out (half-open) -> 4
    assert hpa.sync(300, 10, [4]).desired == 4


def test_stabilization_takes_the_max_recommendation_in_the_window():
    hpa = HPA(SPEC)
    hpa.sync(0, 10, [10])
    hpa.sync(100, 10, [8])
    hpa.sync(200, 10, [6])
    assert hpa.sync(300, 10, [3]).desired == 8  # records at 100 (8) and 200 (6) remain
    assert hpa.sync(400, 8, [3]).desired == 6
    assert hpa.sync(500, 6, [3]).desired == 3


def test_scale_down_percent_policy_floors_and_counts_recent_events():
    spec = HPASpec(scale_down=ScalingRules(0, "Max", (ScalingPolicy("Percent", 50, 60),)))
    hpa = HPA(spec)
    assert hpa.sync(0, 9, [1]).desired == 4  # floor(9 * 0.5) = 4
    # 30 s later: 5 removed within 60 s -> start 9 -> limit 4: no further change
    assert hpa.sync(30, 4, [1]).desired == 4
    assert hpa.sync(60, 4, [1]).desired == 2  # event out at exactly 60 s


def test_scale_down_pods_policy():
    spec = HPASpec(scale_down=ScalingRules(0, "Max", (ScalingPolicy("Pods", 2, 15),)))
    assert HPA(spec).sync(0, 9, [1]).desired == 7


def test_scale_up_stabilization_window_takes_the_min():
    spec = HPASpec(scale_up=ScalingRules(60, "Max", (ScalingPolicy("Percent", 900, 15),)))
    hpa = HPA(spec)
    assert hpa.sync(0, 5, [5]).desired == 5
    assert hpa.sync(15, 5, [20]).desired == 5  # min over window (5, 20) = 5 -> no up
    assert hpa.sync(30, 5, [12]).desired == 5
    # at 60 s the records from t=0 are out: min(15, 20, 12) = 12
    assert hpa.sync(60, 5, [15]).desired == 12
