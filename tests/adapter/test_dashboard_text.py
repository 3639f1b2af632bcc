"""The dashboard's plain words: the policy sentence, relative times, and the served line drawn
from AdapterCore's values (never recomputed in the page)."""

from __future__ import annotations

import re
from dataclasses import replace

from fastapi.testclient import TestClient

from adapter.app import create_app
from adapter.dashboard import ago
from adapter.dashboard_text import policy_sentence
from adapter.settings import METRIC_CORES
from core.store import MemoryForecastStore
from forecaster.servingpolicy import ServingPolicy
from tests.adapter.helpers import sample_forecast

NOW = 1_800_000_000.0


def test_a_policy_with_headroom_states_reads_as_one_sentence():
    pol = ServingPolicy(quantile="p90", headroom=1.0, gap_edges=(0.015, 0.056, 0.2, 0.5),
                        headrooms=(1.0, 1.0, 1.0, 1.0, 1.05), fallback_headrooms=(1.0,) * 5).to_dict()
    s = policy_sentence(pol, "p90", headroom_now=1.0)
    assert s.startswith("Serves the p90 forecast plus 5% when demand sits more than 50% below its recent peak, otherwise as is.")
    assert "Without a fresh forecast: the last observed value as is." in s
    assert s.endswith("Right now: no headroom.")
    assert "x1/" not in s and "<=" not in s


def test_persistence_says_the_forecast_did_not_pay_for_itself():
    pol = ServingPolicy(source="persistence", quantile="p90", headroom=1.15, hold=3, fallback_headroom=1.15).to_dict()
    assert policy_sentence(pol, "p90") == ("Serves the last observed value (the highest of the last 3 samples) plus 15% "
                                          "(the forecast did not pay for itself on recent history).")


def test_a_middle_state_names_its_range_and_no_policy_says_so():
    pol = ServingPolicy(quantile="p50", gap_edges=(0.1, 0.4), headrooms=(1.0, 1.2, 1.5),
                        fallback_headrooms=(1.0, 1.0, 1.0)).to_dict()
    s = policy_sentence(pol, "p90")
    assert s.startswith("Serves the p50 forecast plus 20% to 50% depending on how far demand sits below its recent peak "
                        "(as is within 10% of it).")
    one_step = ServingPolicy(quantile="p50", gap_edges=(0.1, 0.4), headrooms=(1.0, 1.2, 1.0),
                             fallback_headrooms=(1.0, 1.1, 1.3)).to_dict()
    assert policy_sentence(one_step, "p90") == (
        "Serves the p50 forecast plus 20% when demand sits 10%–40% below its recent peak, otherwise as is. "
        "Without a fresh forecast: the last observed value with up to 30% headroom.")
    assert "no serving policy" in policy_sentence(None, "p90")


def test_ages_read_as_people_say_them():
    assert [ago(s) for s in (5, 150, 170, 3 * 3600, 3 * 86400)] == ["just now", "3 min ago", "3 min ago", "3 h ago", "3 days ago"]


def test_the_card_shows_what_adaptercore_serves_now_and_ahead():
    fc = sample_forecast(now=NOW - 30, p90=tuple(3.0 + 0.5 * k for k in range(8)), observed=2.0)
    pol = ServingPolicy(quantile="p90", headroom=1.15).to_dict()
    store = MemoryForecastStore(clock=lambda: NOW)
    store.publish(replace(fc, policy=pol))
    app = create_app(None, store, clock=lambda: NOW)
    with TestClient(app) as c:
        page = c.get("/").text
        core = app.state.core
        served_now = core.served(METRIC_CORES, "shop/checkout", core.lookup("shop/checkout")[0], NOW).value
    assert f"HPA gets {served_now:.3g} cores" in page
    assert "Serves the p90 forecast plus 15%." in page
    assert re.search(r'class="served-now" cx="[\d.]+" cy="[\d.]+"', page)
    assert 'class="served"' in page and 'class="clock"' in page and ">now<" in page
    assert '<span class="ago" data-t="1799999970">just now</span>' in page
    # 8 steps of 60 s published 30 s ago: from 300 s of age on, AdapterCore serves observed demand
    assert page.count('class="stale-at"') == 1 and "forecast too old: served observed" in page


def test_a_node_series_is_labelled_as_a_share_of_capacity_not_cores():
    from core.store import make_forecast

    store = MemoryForecastStore(clock=lambda: NOW)
    store.publish(make_forecast("node-memory/n1", origin=NOW, step_seconds=60, mean=[0.5] * 5,
                                quantiles={"p90": [0.6] * 5}, model="ar", generated_at=NOW, observed=((NOW, 0.5),),
                                meta={"kind": "NodeMemory", "node": "n1", "memory_bytes": 2.0**34}))
    with TestClient(create_app(None, store, clock=lambda: NOW)) as c:
        page = c.get("/").text
    assert "serves 0.6 (share of allocatable memory)" in page and ">share of allocatable memory</text>" in page
    assert "HPA gets" not in page and ">CPU cores<" not in page
