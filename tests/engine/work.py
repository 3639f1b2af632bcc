"""Work items the Ray workers import by name (the cluster's PYTHONPATH holds the repo root)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def square_once_killed(ctx: tuple[str, int], x: int) -> int:
    """x * x, logging every attempt; the first attempt at item ``victim`` writes its pid and
    waits to be killed by the test."""
    log_dir, victim = ctx
    d = Path(log_dir)
    with open(d / "attempts", "a") as f:
        f.write(f"{x} {os.getpid()}\n")
    if x == victim and not (d / "killed").exists():
        (d / "victim.pid").write_text(str(os.getpid()))
        time.sleep(120)  # far longer than the test waits: the kill ends it
    time.sleep(0.02)
    return x * x


def slow_square(ctx: tuple[str, float], x: int) -> int:
    """x * x after ``seconds``, logging the start and end of every attempt with the name of the
    Ray node that ran it (the FORESIGHT_TEST_NODE its raylet passed on)."""
    log_dir, seconds = ctx
    group = os.environ.get("FORESIGHT_TEST_NODE", "-")
    with open(Path(log_dir) / "attempts", "a") as f:
        f.write(f"start {x} {group}\n")
    time.sleep(seconds)
    with open(Path(log_dir) / "attempts", "a") as f:
        f.write(f"end {x} {group}\n")
    return x * x


def page_faults_of_churn(prepare: bool, rounds: int = 20) -> int:
    """Minor page faults of ``rounds`` fit-like allocation rounds in this process: each holds
    24 arrays of ~0.8 MB at once (an AR design matrix of 14 days is that size), writes them
    and frees them all. With ``prepare`` the process is first made a worker
    (``forecaster.engines.base.prepare_worker``)."""
    import resource

    import numpy as np

    from forecaster.engines.base import prepare_worker

    if prepare:
        prepare_worker()

    def one_round() -> None:
        held = [np.ones((4032, 24)) for _ in range(24)]
        sum(a.sum() for a in held)

    one_round()  # the first round grows the heap once in any process
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        one_round()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
