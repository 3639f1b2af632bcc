"""The lock files the images (requirements/app.txt) and `make` (requirements/dev.txt) install from
agree with pyproject.toml: every declared dependency pinned exactly, with hashes, one version each."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP, DEV = ROOT / "requirements" / "app.txt", ROOT / "requirements" / "dev.txt"
REGENERATE = "regenerate the locks with the command in their header"


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins(lock: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` entry; each must carry a hash."""
    text = lock.read_text()
    entries = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})*)", text, re.MULTILINE)
    unhashed = [n for n, _, hashes in entries if "--hash" not in hashes]
    assert entries and unhashed == [], f"{lock.name}: pins without a hash {unhashed}: {REGENERATE}"
    return {n.lower().replace("_", "-"): v for n, v, _ in entries}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_image_lock_pins_every_runtime_dependency_and_no_extra():
    pins = _pins(APP)
    declared = {_name(r) for r in _project()["dependencies"]}
    assert declared - set(pins) == set(), f"declared in pyproject.toml, missing from app.txt: {REGENERATE}"
    assert "torch" not in pins and "pytest" not in pins  # the app image carries neither models nor tests


def test_the_dev_lock_pins_the_runtime_models_test_and_ray_extras_at_the_same_versions():
    project, pins = _project(), _pins(DEV)
    extras = project["optional-dependencies"]
    declared = {_name(r) for r in [*project["dependencies"], *extras["models"], *extras["test"], *extras["ray"]]}
    declared.discard("foresight")  # the test extra names the project's own models extra
    assert declared - set(pins) == set(), f"declared in pyproject.toml, missing from dev.txt: {REGENERATE}"
    app = _pins(APP)
    # app.txt is resolved for the image's Python (3.11.2), which needs a backport or two the venv's doesn't
    assert {n: (v, pins[n]) for n, v in app.items() if n in pins and pins[n] != v} == {}, "app.txt and dev.txt disagree"
    assert pins["torch"] == "2.13.0"  # the pin pyproject.toml's models extra keeps
