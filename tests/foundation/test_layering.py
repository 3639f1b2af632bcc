"""The house rules, enforced: arrows point down, one module per outside system, light CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.astparse import parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["core", "forecaster", "adapter", "warmpool", "replay", "kubeoperator", "foresight"]
FORBIDDEN = {
    "core": {"forecaster", "adapter", "warmpool", "replay", "kubeoperator", "foresight"},
    "forecaster": {"adapter", "warmpool", "replay", "kubeoperator", "foresight"},
    "adapter": {"warmpool", "replay", "kubeoperator", "foresight"},
    "warmpool": {"adapter", "replay", "kubeoperator", "foresight"},
    "replay": {"kubeoperator", "foresight"},
    "kubeoperator": {"replay", "foresight"},
}
# Side doors, each a pure module that imports no project module (tested below): the operator's
# Observe mode and the dashboard's desired-replicas line run the HPA algorithm the replay models
# instead of a copy of it.
SIDE_DOORS = {"kubeoperator": {"replay.hpa"}, "adapter": {"replay.hpa"}}
# outside system -> the only modules allowed to import its client
OWNERS = {
    "redis": {"core/store.py"},
    "kubernetes": {"core/kubeclient.py", "warmpool/backends/kubernetes.py", "kubeoperator/kube.py"},
}


def imports_of(path: Path) -> set[str]:
    tree = parse(path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_packages_only_import_downwards():
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for f in (ROOT / pkg).rglob("*.py"):
            doors = SIDE_DOORS.get(pkg, set())
            through = {m.split(".")[0] for m in _module_imports(f) if m in doors or m.rpartition(".")[0] in doors}
            direct = {m for m in _module_imports(f) if m.split(".")[0] in forbidden
                      and m not in doors and m.rpartition(".")[0] not in doors}
            hit = (imports_of(f) & forbidden) - (through - {d.split(".")[0] for d in direct})
            if hit:
                bad.append(f"{f.relative_to(ROOT)} imports {sorted(hit)}")
    assert bad == []


def test_a_side_door_imports_no_project_module():
    for doors in SIDE_DOORS.values():
        for mod in doors:
            f = ROOT / (mod.replace(".", "/") + ".py")
            assert _module_imports(f) == set(), f"{mod} is a side door: it must stay free of project imports"


def test_only_one_module_talks_to_each_outside_system():
    bad = []
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            rel = str(f.relative_to(ROOT))
            for system, owners in OWNERS.items():
                if system in imports_of(f) and rel not in owners:
                    bad.append(f"{rel} imports {system} (only {sorted(owners)} may)")
    assert bad == []


def test_cli_help_does_not_import_heavy_libraries():
    code = (
        "import sys; from foresight.cli import build_parser; build_parser(); "
        "heavy = [m for m in ('torch', 'prophet', 'statsmodels', 'matplotlib', 'kubernetes') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def _module_imports(path: Path) -> set[str]:
    """Project modules a file imports, anywhere in it (function-level imports included)."""
    tree = parse(path)
    for node in ast.walk(tree):  # annotations only: not an import at run time
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out |= {n for n in names if n.split(".")[0] in PACKAGES}
    return out


def test_no_two_project_modules_import_each_other():
    files = {".".join(f.relative_to(ROOT).with_suffix("").parts): f for p in PACKAGES for f in (ROOT / p).rglob("*.py")}
    files = {m.removesuffix(".__init__"): f for m, f in files.items()}
    edges = {m: {i for i in _module_imports(f) if i in files and i != m} for m, f in files.items()}
    circles = sorted({tuple(sorted((a, b))) for a, bs in edges.items() for b in bs if a in edges.get(b, ())})
    assert circles == [], f"import circles: {circles}"
