"""Ready before the rise (replay/rises.py): the moment demand outgrew the capacity and the lead."""

import numpy as np

from replay.rises import HORIZON_SECONDS, rise_readiness, summarize_leads

STEP = 15.0


def _ramp():
    # 2 pods of 1 core carry 1.4 cores at 70%; demand crosses 1.4 at t = 600 s and keeps rising
    t = np.arange(0, 1800, STEP)
    demand = np.where(t < 300, 1.0, 1.0 + (t - 300) / 750.0)
    reactive = np.where(t < 690, 2, 3)  # the reactive HPA raises 90 s after the crossing
    return t, demand, reactive


def test_pods_ready_before_demand_outgrows_the_capacity_count_as_in_time_with_their_lead():
    t, demand, reactive = _ramp()
    crossing = float(t[np.argmax(demand > 1.4)])
    early = np.where(t >= crossing - 120, 3, 2)  # a third pod Ready two minutes before the crossing
    (rise,) = rise_readiness(t, demand, reactive, early, request=1.0, limit=0.7)
    assert rise.pods_before == 2 and rise.outgrown_t == crossing and rise.raise_t == 690
    assert rise.in_time and rise.lead_seconds == 120


def test_pods_ready_after_the_moment_have_a_negative_lead_and_the_summary_counts_them():
    t, demand, reactive = _ramp()
    crossing = float(t[np.argmax(demand > 1.4)])
    late = np.where(t >= crossing + 150, 3, 2)
    (rise,) = rise_readiness(t, demand, reactive, late, request=1.0, limit=0.7)
    assert not rise.in_time and rise.lead_seconds == -150
    never = rise_readiness(t, demand, reactive, np.full(len(t), 2), request=1.0, limit=0.7)
    assert never[0].lead_seconds == -HORIZON_SECONDS
    s = summarize_leads([rise, *rise_readiness(t, demand, reactive, np.full(len(t), 5), request=1.0, limit=0.7)])
    assert s["rises"] == 2 and s["ready_in_time_share"] == 0.5


def test_a_raise_on_a_metric_that_already_fell_back_is_not_a_rise_and_always_ready_is_capped():
    t = np.arange(0, 3600, STEP)
    demand = np.full(len(t), 1.0)  # never above 2 pods x 0.7
    reactive = np.where(t < 1000, 2, 3)
    assert rise_readiness(t, demand, reactive, np.full(len(t), 3), request=1.0, limit=0.7) == []
    t2, d2, r2 = _ramp()
    (always,) = rise_readiness(t2, d2, r2, np.full(len(t2), 9), request=1.0, limit=0.7)
    assert always.lead_seconds == min(always.outgrown_t, HORIZON_SECONDS)
    assert np.isnan(summarize_leads([])["ready_in_time_share"])
