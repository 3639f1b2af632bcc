"""The manual's generator, loaded from docs/ (docs/ is not a package: mkdocs owns that folder)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="session")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def pages() -> dict[str, str]:
    return {p.name: p.read_text() for p in (DOCS / "reference").glob("*.md")}
