"""The house's layering, enforced: import-linter's contracts in pyproject.toml ([tool.importlinter])
must hold (forecaster imports no room above it; only core/kubeclient.py, and the two modules
that build typed objects, import the ``kubernetes`` client; httpx only in the one module per outside
system that speaks HTTP, ``requests`` nowhere)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), f"{lint}: install the test extra (pip install -e '.[test]') for import-linter"
    out = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _imports(path: Path, top: set[str]) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in top for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in top:
            return True
    return False


def _allowed_and_found(forbidden: list[str]) -> tuple[set[str], set[str]]:
    """The modules a forbidden contract lets import ``forbidden``, and those that do (by AST): a
    second look, so an allowance left behind after a module stops importing the client (or a
    contract that silently checks nothing) shows up."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in cfg["contracts"] if c.get("forbidden_modules") == forbidden)
    allowed = {line.split("->")[0].strip() for line in contract["ignore_imports"]}
    found = set()
    for pkg in cfg["root_packages"]:
        for path in (ROOT / pkg).rglob("*.py"):
            if _imports(path, set(forbidden)):
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return allowed, found


def test_the_modules_allowed_to_import_kubernetes_are_exactly_those_that_do():
    allowed, found = _allowed_and_found(["kubernetes"])
    assert "core.kubeclient" in found
    assert found == allowed


def test_the_modules_allowed_to_import_an_http_client_are_exactly_those_that_do():
    allowed, found = _allowed_and_found(["httpx", "requests"])
    assert "forecaster.sources.prometheus" in found
    assert found == allowed
