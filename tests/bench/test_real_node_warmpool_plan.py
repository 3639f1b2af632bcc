"""The parts of bench/real_node_warmpool.py that need no node: the functions it picks, and that the
WarmPool it writes for each becomes, through the operator, a pool with the settings the simulator
replays (the bundled example policy's first pool)."""

from __future__ import annotations

import dataclasses

import yaml

from bench.common import serverless_dir
from bench.real_node_warmpool import HOUR_START_MINUTE, QUICK_FUNCTIONS, QUICK_MINUTES, pick_functions, warmpool_object, window
from bench.warmpool_trace import part_indices
from kubeoperator.render import render_warmpool_policy
from kubeoperator.spec import parse_warmpool
from warmpool.policy import parse_policy
from warmpool.tracesim import load_trace, resolve_policy


def test_the_picked_functions_are_held_out_and_invoked_in_some_minutes_of_the_window():
    trace = load_trace(serverless_dir(quick=True))
    picked = pick_functions(trace, HOUR_START_MINUTE, QUICK_MINUTES, QUICK_FUNCTIONS)
    assert len(picked) == len(set(picked)) == QUICK_FUNCTIONS
    assert set(picked) <= set(part_indices(trace, "holdout"))
    sub = window(trace, picked, HOUR_START_MINUTE, QUICK_MINUTES)
    used = (sub.invocations > 0).sum(1)
    assert sub.invocations.shape == (QUICK_FUNCTIONS, QUICK_MINUTES)
    assert ((used >= 2) & (used <= QUICK_MINUTES - 1)).all(), used


def test_a_functions_warmpool_becomes_the_simulators_pool_but_for_backend_cap_and_template():
    tpl = resolve_policy("foresight").template.pools[0]
    obj = warmpool_object(tpl, "fn-7", 170.4, "localhost/foresight/busybox:x")
    obj["metadata"]["generation"] = 1
    (pool,) = parse_policy(yaml.safe_load(render_warmpool_policy(None, [parse_warmpool(obj)]).text)).pools
    assert (pool.backend, pool.max_warm, pool.memory_mb) == ("kubernetes", 100, 170.0)
    same = ("runtime_class", "quantile", "min_warm", "capacity_per_container", "lead_seconds", "idle_ttl", "idle_model")
    assert {k: getattr(pool, k) for k in same} == {k: getattr(tpl, k) for k in same}
    assert dataclasses.replace(pool.template, resources={}).image == "localhost/foresight/busybox:x"
