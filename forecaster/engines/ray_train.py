"""The global LSTM on Ray Train: torch DDP across ``workers`` Ray Train workers, one CPU each.

``GlobalLSTM(engine="ray", workers=2).fit_fleet(series)`` builds the training windows here
(``fleet_arrays``), puts them in the object store once, and runs ``GlobalLSTM.train_loop`` on
every worker with the network wrapped in DistributedDataParallel (gloo on CPU). Each global
batch of ``batch`` windows is split between the ranks, so a step sees the same windows and the
same averaged gradient as one process would (the effective batch does not grow with the
workers); rank 0's validation loss and clock decide early stopping on every rank. Rank 0 writes
the checkpoint with ``GlobalLSTM.save`` (the same file the single-process training writes) and
this process reads it back with ``GlobalLSTM.load``.

Ray Train persists checkpoints under ``storage_path`` (default a temporary folder here): on a
multi-node cluster it must be storage that every node and this process see (a shared volume,
s3://...). The run itself is driven from a Ray task, so it works the same through a Ray client
(ray://) connection as on a local Ray.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from forecaster.engines.base import EngineError
from forecaster.engines.ray_engine import _connect, ray

CHECKPOINT_FILE = "lstm.pt"


@dataclass
class _Shard:
    """This worker's place in the DDP group, and a way to agree on rank 0's numbers."""

    rank: int
    world: int

    def agree(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.broadcast(t, src=0)
        return float(t.item())

    def total(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: DDP over the shared windows; rank 0 saves the checkpoint."""
    import ray.train
    import ray.train.torch
    import torch

    torch.set_num_threads(1)  # one CPU per worker
    ctx = ray.train.get_context()
    shard = _Shard(ctx.get_world_rank(), ctx.get_world_size())
    model = config["cls"](**config["params"])  # GlobalLSTM, by reference (no import circle)
    model.season = config["season"]
    arrays = ray.get(config["arrays"])
    net = ray.train.torch.prepare_model(model._build(), parallel_strategy_kwargs={"find_unused_parameters": False})
    model.net_, model.train_report_ = model.train_loop(arrays, net=net, shard=shard)
    metrics = {"best_val_loss": model.train_report_["best_val_loss"], "epochs": len(model.train_report_["epochs"])}
    if shard.rank == 0:
        with tempfile.TemporaryDirectory() as d:
            model.save(Path(d) / CHECKPOINT_FILE)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
    else:
        ray.train.report(metrics)  # every rank reports (a barrier); only rank 0 has a checkpoint


def _run(cls: type, arrays_ref: list, params: dict[str, Any], season: int, workers: int, storage_path: str) -> bytes:
    """The Ray Train run, as a Ray task on the cluster: the checkpoint file's bytes.
    ``arrays_ref`` is ``[ObjectRef]``: in a list, Ray passes the reference on to the workers
    instead of fetching the windows into this task."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        _worker,
        train_loop_config={"cls": cls, "arrays": arrays_ref[0], "params": params, "season": season},
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage_path, name=f"foresight-lstm-{os.getpid()}-{os.urandom(4).hex()}"),
    )
    result = trainer.fit()
    if result.checkpoint is None:
        raise EngineError(f"Ray Train finished without a checkpoint: {result.error}")
    with result.checkpoint.as_directory() as d:
        return (Path(d) / CHECKPOINT_FILE).read_bytes()


def train_on_ray(model, arrays: tuple[np.ndarray, ...], progress: Callable[[dict], None] | None = None):
    """Train ``model`` (a GlobalLSTM with engine ray) on ``arrays`` (its ``fleet_arrays``) with
    Ray Train, and install the network it checkpointed. Uses the Ray this process is connected
    to (``forecaster.engine``'s ray engine), else starts a local one."""
    workers = int(model.cfg["workers"])
    if workers < 1:
        raise EngineError(f"lstm.workers must be >= 1 (got {workers})")
    _connect(None, None)
    storage = model.cfg.get("storage_path") or tempfile.mkdtemp(prefix="foresight-ray-train-")
    params = {k: v for k, v in model.params.items() if k != "_net"}
    params.update(engine="local", storage_path=None)  # the checkpoint's config: loads and refits locally
    run = ray.remote(_run).options(num_cpus=0, max_retries=0)
    blob = ray.get(run.remote(type(model), [ray.put(arrays)], params, int(model.season or 0), workers, str(storage)))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / CHECKPOINT_FILE
        path.write_bytes(blob)
        trained = type(model).load(path)
    model.net_, model.train_report_ = trained.net_, {**trained.train_report_, "engine": "ray", "workers": workers}
    if progress:
        for epoch in model.train_report_["epochs"]:
            progress(epoch)
    return model
