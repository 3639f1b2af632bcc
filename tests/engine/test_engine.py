"""The engine seam without a cluster: the registry, the local engine, the config keys, and the
rule that only the Ray engines (forecaster/engines/ray_engine.py, ray_train.py) import ray."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.errors import ConfigError
from forecaster.config import parse_config
from forecaster.engine import EngineError, auto_batch_size, batches, open_engine
from forecaster.engines.local import LocalEngine
from foresight.cli import main
from tests.astparse import parse

ROOT = Path(__file__).resolve().parents[2]


def _cube(offset, x):
    return x ** 3 + offset


def test_an_unknown_engine_is_named_with_the_known_ones():
    with pytest.raises(EngineError, match=r"unknown engine 'spark'; known: \['local', 'ray'\]"):
        open_engine("spark")


def test_a_ray_address_without_the_ray_engine_is_refused():
    with pytest.raises(EngineError, match="needs --engine ray"):
        open_engine("local", address="ray://head:10001")


def test_the_local_pool_returns_every_result_once_in_input_order_across_batches():
    engine = LocalEngine(jobs=2)
    seen: list[int] = []
    items = list(range(23))
    try:
        out = engine.map(_cube, items, context=7, batch_size=4, progress=seen.append)
        again = engine.map(_cube, items[:5], context=1)  # the same processes, a new context
    finally:
        engine.close()
    assert out == [x ** 3 + 7 for x in items] and again == [x ** 3 + 1 for x in items[:5]]
    assert sum(seen) == 23 and engine.last_stats.items == 5


def test_in_process_the_local_engine_passes_the_context_unpickled():
    marker = object()
    assert LocalEngine(1).map(lambda ctx, x: ctx is marker, [1, 2], context=marker) == [True, True]


def test_batches_give_about_four_tasks_per_worker_and_cover_every_item():
    assert auto_batch_size(10_000, 2) == 1250 and auto_batch_size(3, 8) == 1
    parts = batches(list(range(10)), 4)
    assert parts == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def _training(**training):
    return {"training": training, "workloads": [{"namespace": "a", "name": "b"}]}


def test_the_workload_config_takes_engine_ray_and_an_address():
    cfg = parse_config(_training(engine="ray", ray_address="ray://foresight-ray-head-svc:10001"))
    assert (cfg.training.engine, cfg.training.ray_address) == ("ray", "ray://foresight-ray-head-svc:10001")
    assert parse_config(_training()).training.engine == "local"


def test_engine_ray_trains_the_global_lstm_with_ray_train_and_local_keeps_it_in_process():
    from forecaster.models.registry import get_model
    from forecaster.schedule import trainer_from_config

    ray_trainer = trainer_from_config(parse_config(_training(engine="ray", ray_address="ray://h:10001")), None)
    assert get_model("lstm", **ray_trainer.global_params.get("lstm", {})).cfg["engine"] == "ray"
    local = trainer_from_config(parse_config(_training()), None)
    assert get_model("lstm", **local.global_params.get("lstm", {})).cfg["engine"] == "local"


def test_a_bad_engine_and_a_stray_address_are_both_reported_with_their_paths():
    with pytest.raises(ConfigError) as err:
        parse_config(_training(engine="spark", ray_address="ray://x:10001"))
    problems = err.value.problems
    assert any(p.startswith("training.engine: 'spark' must be one of local, ray") for p in problems)
    assert any(p.startswith("training.ray_address: 'ray://x:10001' needs training.engine: ray") for p in problems)


def test_backtest_refuses_a_ray_address_without_the_ray_engine(capsys):
    rc = main(["backtest", "--data", str(ROOT / "tests/data/cpu_slice.csv.gz"), "--models", "persistence",
               "--ray-address", "ray://head:10001", "--no-progress", "--out", "/dev/null"])
    assert rc == 2
    assert "--ray-address" in capsys.readouterr().err


def test_only_the_ray_engine_modules_import_ray():
    importers = []
    for pkg in ("core", "forecaster", "adapter", "warmpool", "replay", "foresight", "kubeoperator", "bench"):
        for f in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(parse(f)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "ray" or n.startswith("ray.") for n in names):
                    importers.append(str(f.relative_to(ROOT)))
    assert sorted(set(importers)) == ["forecaster/engines/ray_engine.py", "forecaster/engines/ray_train.py"]




def test_a_worker_process_keeps_its_heap_instead_of_faulting_it_back_in_for_every_fit():
    """A fresh process hands every freed fit-sized array back to the kernel and faults its pages
    in again on the next one; a prepared worker (pool process, Ray worker) reuses its heap."""
    import multiprocessing as mp

    from tests.engine.work import page_faults_of_churn

    with mp.get_context("spawn").Pool(1) as pool:
        plain = pool.apply(page_faults_of_churn, (False,))
    with mp.get_context("spawn").Pool(1) as pool:
        prepared = pool.apply(page_faults_of_churn, (True,))
    assert plain > 20 * 1000, plain  # the ~19 MB of every round (~4,700 pages) faulted in again
    assert prepared < 20 * 50, prepared
