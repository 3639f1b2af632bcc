"""kubeoperator sits on floor 3: it may read forecaster (the served value: forecaster/served.py) and replay/hpa.py
(the HPA algorithm, for Observe mode), never the CLI above it, and only kubeoperator/kube.py
talks to the API server."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.astparse import parse

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_only_kube_py_imports_the_kubernetes_client_and_nothing_imports_the_cli_floor():
    files = sorted((ROOT / "kubeoperator").glob("*.py"))
    assert len(files) >= 7
    for f in files:
        mods = _imports(f)
        tops = {m.split(".")[0] for m in mods}
        if f.name != "kube.py":
            assert "kubernetes" not in tops, f"{f.name} imports the kubernetes client"
        assert "foresight" not in tops, f.name
        assert {m for m in mods if m.split(".")[0] == "replay"} <= {"replay.hpa"}, f"{f.name}: only replay.hpa (pure)"
        assert "adapter" not in tops, f"{f.name}: the served value is forecaster.served's; the adapter is a sibling floor"
        assert "warmpool" not in tops or mods <= {"warmpool.policy", "warmpool.metrics"} | {m for m in mods if not m.startswith("warmpool")}


def test_no_package_below_imports_kubeoperator():
    for pkg in ("core", "forecaster", "adapter", "warmpool", "replay"):
        for f in (ROOT / pkg).rglob("*.py"):
            assert "kubeoperator" not in {m.split(".")[0] for m in _imports(f)}, f


def test_only_promql_py_imports_the_promql_parser_and_only_the_operator_confines():
    """One module parses tenants' PromQL; the trainer (forecaster/) runs queries as written: the
    admin's own ConfigMap is trusted, a tenant's query arrives already confined."""
    users = sorted(f.relative_to(ROOT).as_posix() for pkg in ("kubeoperator", "core", "forecaster", "adapter", "warmpool", "replay")
                   for f in (ROOT / pkg).rglob("*.py") if "promql_parser" in {m.split(".")[0] for m in _imports(f)})
    assert users == ["kubeoperator/promql.py"]
