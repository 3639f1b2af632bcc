"""The checks beside the tests: ruff's lint and mypy's type check, configured in pyproject.toml.

Both run from the venv that runs pytest, from the repository root, so `make test` fails on a new
finding exactly as a developer running `ruff check .` or `mypy` would see it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing_in_the_repository():
    r = _run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."], timeout=300)
    assert r.returncode == 0, f"ruff check . failed (fix the findings; `ruff check --fix .` fixes some):\n{r.stdout}{r.stderr}"


@pytest.mark.timeout(900)  # a cold run on a loaded 2-core machine takes a few minutes; warm ones seconds
def test_mypy_finds_no_type_errors_in_the_product_packages():
    r = _run([sys.executable, "-m", "mypy"], timeout=880)
    where = "packages and per-module exceptions: [tool.mypy] in pyproject.toml"
    assert r.returncode == 0, f"mypy failed ({where}):\n{r.stdout}{r.stderr}"
    assert "Success" in r.stdout
