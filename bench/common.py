"""Shared bits of the benchmark scripts.

The full public traces are NOT part of a user's checkout. Benchmarks read them from one
overridable place: ``$FORESIGHT_DATA_DIR`` (default ``<repo>/../shared/data``), laid out as
``cpu/*.csv.gz`` (long format) and ``serverless/azure2019_functions_{inv,run,mem}.csv.gz``.
Results go to ``bench/results/`` (JSON/CSV figures and PNG plots).
"""

from __future__ import annotations

import json
import os
import platform
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


def save_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **payload,
    }
    p = RESULTS / f"{name}.json"
    p.write_text(json.dumps(payload, indent=2, default=float))
    return p
