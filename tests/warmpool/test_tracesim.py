"""Trace replay: the measurement model of warm-pools.md on a 59-function slice of the
Azure Functions 2019 trace (tests/data/serverless)."""

import csv
from pathlib import Path

import numpy as np
import pytest

from forecaster.errors import UserError
from warmpool.keepalive import FixedKeepAlive, ForesightPolicy, HybridHistogram, Oracle, SeedDecayingTTL, make_policy
from warmpool.tracesim import CSV_COLUMNS, Trace, load_trace, replay, replay_all

DATA = Path(__file__).resolve().parents[1] / "data" / "serverless"


@pytest.fixture(scope="module")
def trace():
    return load_trace(DATA)


def independent_fixed(trace, k):
    """Fixed keep-alive in the single model, straight from the gaps between invoked minutes."""
    cold = waste = 0.0
    for f in range(trace.n_functions):
        t_inv = np.flatnonzero(trace.invocations[f])
        if len(t_inv) == 0:
            continue
        gaps = np.diff(t_inv)
        cold += 1 + int((gaps > k).sum())
        idle = np.minimum(gaps - 1, k).sum() + min(trace.invocations.shape[1] - 1 - t_inv[-1], k)
        waste += idle * trace.memory_mb[f]
    return cold, waste / 1024


@pytest.mark.parametrize("k", [1, 5, 10])
def test_fixed_keep_alive_matches_an_independent_count_from_idle_gaps(trace, k):
    r = replay(trace, "single", FixedKeepAlive(k))
    cold, waste = independent_fixed(trace, k)
    assert r.cold_minutes == cold
    assert r.wasted_gb_min == pytest.approx(waste)


def test_the_seed_ttl_alone_is_a_two_minute_keep_alive_in_the_single_model(trace):
    a, b = replay(trace, "single", SeedDecayingTTL()), replay(trace, "single", FixedKeepAlive(2))
    assert (a.cold_minutes, a.wasted_gb_min) == (b.cold_minutes, pytest.approx(b.wasted_gb_min))


def test_the_oracle_is_cold_only_on_each_functions_first_invocation_and_wastes_nothing(trace):
    for dm in ("single", "concurrency"):
        r = replay(trace, dm, Oracle())
        assert r.cold_minutes == int((trace.invocations.sum(1) > 0).sum()) and r.wasted_gb_min == 0


def test_concurrency_demand_follows_invocations_times_duration():
    t = Trace(("f",), np.array([[0, 1, 10, 100]]), np.array([30.0]), np.array([128.0]))
    assert t.demand("concurrency").tolist() == [[0, 1, 5, 50]]
    assert t.demand("single").tolist() == [[0, 1, 1, 1]]
    with pytest.raises(UserError, match="unknown demand model"):
        t.demand("burst")


def test_more_keep_alive_means_fewer_cold_starts_and_more_memory(trace):
    rs = [replay(trace, "concurrency", FixedKeepAlive(k)) for k in (1, 10, 60)]
    assert rs[0].cold_minutes >= rs[1].cold_minutes >= rs[2].cold_minutes
    assert rs[0].wasted_gb_min <= rs[1].wasted_gb_min <= rs[2].wasted_gb_min


class _Logged:
    """Wraps a policy and records every residency decision."""

    def __init__(self, inner):
        self.inner, self.name, self.log = inner, inner.name, []
        for hook in ("begin_minute", "end_minute"):
            if hasattr(inner, hook):
                setattr(self, hook, getattr(inner, hook))

    def for_function(self, fn):
        fp, log = self.inner.for_function(fn), self.log

        class W:
            def resident(self, t, offsets):
                ans = fp.resident(t, offsets)
                log.append((t, fn.index, ans if isinstance(ans, int) else tuple(ans)))
                return ans

            def observe(self, t, n):
                fp.observe(t, n)

        return W()


@pytest.mark.parametrize("make", [ForesightPolicy, HybridHistogram, SeedDecayingTTL])
@pytest.mark.parametrize("demand", ["single", "concurrency"])
def test_a_policy_decides_minute_t_without_seeing_minute_t_or_later(trace, make, demand):
    cut = 700
    future = trace.invocations.copy()
    rng = np.random.default_rng(0)
    future[:, cut:] = rng.permutation(future[:, cut:], axis=1)  # a different future
    other = Trace(trace.function_ids, future, trace.duration_seconds, trace.memory_mb)
    a, b = _Logged(make()), _Logged(make())
    replay(trace, demand, a)
    replay(other, demand, b)
    upto = lambda log: [x for x in log if x[0] <= cut]  # noqa: E731
    assert upto(a.log) == upto(b.log) and len(upto(a.log)) > 1000


def test_foresight_beats_fixed_ten_minutes_on_both_axes_on_the_slice(trace):
    f10, ours = replay_all(trace, ["single"], [FixedKeepAlive(10), ForesightPolicy()])
    assert ours.cold_minutes < f10.cold_minutes and ours.wasted_gb_min <= f10.wasted_gb_min * 1.05


def test_policy_names_resolve_and_unknown_ones_are_explained(tmp_path):
    assert make_policy("fixed:20").minutes == 20
    assert [make_policy(n).name for n in ("seed", "hybrid", "oracle", "foresight")] == ["seed", "hybrid", "oracle", "foresight"]
    with pytest.raises(UserError, match="known: fixed:MINUTES, seed, hybrid, oracle, foresight"):
        make_policy("lru")
    with pytest.raises(UserError, match="whole number of minutes"):
        make_policy("fixed:ten")


def test_simulate_command_writes_one_row_per_policy_and_demand_model(tmp_path, capsys):
    from foresight.cli import main

    out = tmp_path / "sim.csv"
    rc = main(["warmpool", "simulate", "--trace", str(DATA), "--limit", "20", "--policy", "fixed:10", "--policy", "oracle", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert [(r["policy"], r["demand"]) for r in rows] == [("fixed:10", "single"), ("oracle", "single"), ("fixed:10", "concurrency"), ("oracle", "concurrency")]
    assert float(rows[0]["wasted_pct_of_fixed10"]) == 100.0
    assert "cold%min" in capsys.readouterr().out


def test_simulate_on_a_folder_without_the_trace_says_what_is_missing(tmp_path, capsys):
    from foresight.cli import main

    assert main(["warmpool", "simulate", "--trace", str(tmp_path), "--out", str(tmp_path / "x.csv")]) == 2
    assert "azure2019_functions_inv.csv.gz" in capsys.readouterr().err
