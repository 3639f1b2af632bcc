"""Shared bits of the benchmark scripts.

The full public traces are NOT part of a user's checkout. Benchmarks read them from one
overridable place: ``$FORESIGHT_DATA_DIR`` (default ``<repo>/../shared/data``), laid out as
``cpu/*.csv.gz`` (long format) and ``serverless/azure2019_functions_{inv,run,mem}.csv.gz``.
Results go to ``bench/results/`` (JSON/CSV figures and PNG plots). Every script also has a
``--quick`` mode (tiny sizes, seconds, the slices bundled in tests/data) that writes to a
temporary folder or ``--out``: tests/bench runs each one so a benchmark that rots fails CI.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def data_dir() -> Path:
    d = Path(os.environ.get("FORESIGHT_DATA_DIR", ROOT.parent / "shared" / "data")).resolve()
    if not d.exists():
        raise SystemExit(
            f"benchmark data not found at {d}; set FORESIGHT_DATA_DIR to a folder holding cpu/ "
            "and serverless/ (see README.md, 'Benchmarks')"
        )
    return d


def save_json(name: str, payload: dict[str, Any], results: Path = RESULTS) -> Path:
    results.mkdir(parents=True, exist_ok=True)
    payload = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **payload,
    }
    p = results / f"{name}.json"
    p.write_text(json.dumps(payload, indent=2, default=float))
    return p


# --- quick mode: every script's `--quick` (tiny sizes, seconds, the bundled data slices) ------

QUICK_CPU = ROOT / "tests" / "data" / "cpu_slice.csv.gz"  # 7 real CPU series (tests/data/ATTRIBUTION.md)
QUICK_SERVERLESS = ROOT / "tests" / "data" / "serverless"  # a slice of Azure Functions 2019


def add_quick_args(ap, sizes: str) -> None:
    """``--quick`` and ``--out`` on a script's parser; ``sizes`` says what quick mode runs."""
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run in seconds ({sizes}) on the bundled data slices; writes to --out "
                    "(default: a new temporary folder), never to bench/results/")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for the results (default bench/results/; with --quick a new temporary folder)")


def results_dir(args) -> Path:
    """Where this run writes: a quick run never replaces the committed full results."""
    if args.out is not None:
        out = Path(args.out).resolve()
        if args.quick and out == RESULTS.resolve():
            raise SystemExit(f"--quick --out {args.out}: a quick run must not overwrite the full results in "
                             f"{RESULTS}; give another folder or leave --out out")
    elif args.quick:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="foresight-bench-quick-"))
    else:
        out = RESULTS
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        print(f"quick mode: results go to {out}", flush=True)
    return out


def cpu_files(quick: bool = False) -> list[Path]:
    """The CPU traces: the bundled slice in quick mode, else every ``$FORESIGHT_DATA_DIR/cpu/*.csv.gz``."""
    if quick:
        return [QUICK_CPU]
    files = sorted((data_dir() / "cpu").glob("*.csv.gz"))
    if not files:
        raise SystemExit(f"no cpu/*.csv.gz under {data_dir()}; set FORESIGHT_DATA_DIR (README.md, 'Benchmarks')")
    return files


def serverless_dir(quick: bool = False) -> Path:
    return QUICK_SERVERLESS if quick else data_dir() / "serverless"


def stop_on_sigterm() -> None:
    """SIGTERM stops the script as Ctrl-C does (KeyboardInterrupt), so its ``finally`` blocks
    stop what it started (Redis, Prometheus, adapters, a node)."""
    def interrupt(signum, frame):  # the signal handler's signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
