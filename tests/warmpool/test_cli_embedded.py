"""`foresight warmpool` commands, the embedded runner for `foresight up`, and layering."""

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.store import MemoryForecastStore, make_forecast
from foresight.cli import main
from warmpool.embedded import EXAMPLE_POLICY, start_embedded

ROOT = Path(__file__).resolve().parents[2]


def test_validate_prints_each_pool_for_a_good_policy_and_every_problem_for_a_bad_one(tmp_path, capsys):
    assert main(["warmpool", "validate", str(EXAMPLE_POLICY)]) == 0
    assert "valid (1 pool(s))" in capsys.readouterr().out
    assert main(["warmpool", "validate", str(ROOT / "warmpool" / "examples" / "kubernetes.yaml")]) == 0
    out = capsys.readouterr().out
    assert "cold start (pod, crun) p50/p90/p99 3.28/3.69/4.42 s: seed (measured" in out
    assert "lead + T_cold p90 = 93.7s" in out
    assert "cold start (pod, kata) p50/p90/p99 3.69/4.18/5.1 s: seed (not measured: no Kata runtime here)" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: foresight/v1alpha1\nkind: WarmPoolPolicy\npools:\n  - name: x\n    workload: {namespace: a, name: b}\n    max_warm: -1\n    lead: 3\n")
    assert main(["warmpool", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "pools[x].max_warm: -1 must be in [0, inf]" in err and "pools[x].lead: unknown key" in err


def test_embedded_pool_runs_on_the_sim_backend_and_says_so():
    store = MemoryForecastStore()
    now = time.time()
    store.publish(make_forecast("demo/vm-618849", origin=now, step_seconds=60, mean=[1.0] * 3, quantiles={"p90": [1.0] * 3}, model="t", generated_at=now))
    h = start_embedded(store, port=0, force_sim=True, interval_seconds=0.05)
    try:
        assert h.describe()["mode"].startswith("sim:")
        deadline = time.time() + 10
        while time.time() < deadline and h.describe()["pools"][0]["warm"] < 2:
            time.sleep(0.05)
        assert h.describe()["pools"][0]["warm"] == 2  # 1.0 core / 0.5 per container
        r = httpx.post(f"{h.url}/api/v1/pools/web/claim", timeout=10).json()
        assert r["cold_start"] is False
    finally:
        h.stop()
    assert h.backend.container_ids() == []


@pytest.mark.crun
def test_embedded_pool_uses_real_crun_when_it_works_and_cleans_up(crun_ok, tmp_path):
    store = MemoryForecastStore()
    now = time.time()
    store.publish(make_forecast("demo/vm-618849", origin=now, step_seconds=60, mean=[0.5] * 3, quantiles={"p90": [0.5] * 3}, model="t", generated_at=now))
    h = start_embedded(store, state_dir=tmp_path, interval_seconds=0.05)
    try:
        assert h.describe()["mode"].startswith("crun:")
        deadline = time.time() + 10
        while time.time() < deadline and h.describe()["pools"][0]["warm"] < 1:
            time.sleep(0.05)
        assert len(h.backend.container_ids()) == 1  # 0.5 cores at 0.5 per container
    finally:
        h.stop()
    assert h.backend.container_ids() == []


@pytest.mark.crun
def test_warmpool_run_serves_claims_from_real_containers_until_terminated(crun_ok, tmp_path):
    port = 18000 + os.getpid() % 2000
    policy = tmp_path / "policy.yaml"  # no forecast in a fresh memory store: min_warm keeps one warm
    policy.write_text(EXAMPLE_POLICY.read_text().replace("min_warm: 0", "min_warm: 1"))
    tokens = tmp_path / "tokens"
    tokens.write_text("test-token\n")
    auth = {"Authorization": "Bearer test-token"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "foresight", "warmpool", "run", "--policy", str(policy), "--store", "memory://",
         "--port", str(port), "--state-dir", str(tmp_path), "--interval", "0.2", "--token-file", str(tokens)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        line = proc.stdout.readline().decode()
        assert "API on http://127.0.0.1:" in line
        deadline = time.time() + 15
        body = {}
        while time.time() < deadline:
            body = httpx.get(f"http://127.0.0.1:{port}/api/v1/pools/web", timeout=5, headers=auth).json()
            if body["warm"] >= 1:
                break
            time.sleep(0.1)
        assert body["warm"] == 1
        r = httpx.post(f"http://127.0.0.1:{port}/api/v1/pools/web/claim", timeout=10, headers=auth).json()
        assert r["cold_start"] is False and r["endpoint"].startswith("crun://")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        proc.stdout.close()
        from warmpool.backends.crun import CrunBackend

        b = CrunBackend(tmp_path / "crun", "crun")
        for cid in b.container_ids():
            subprocess.run([b.binary, "--root", str(b.root), "delete", "-f", cid], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module)
    return mods


def test_only_the_kubernetes_backend_imports_the_kubernetes_client_and_warmpool_never_imports_the_adapter():
    for path in (ROOT / "warmpool").rglob("*.py"):
        mods = _imports(path)
        rel = path.relative_to(ROOT).as_posix()
        if rel != "warmpool/backends/kubernetes.py":
            assert not any(m == "kubernetes" or m.startswith("kubernetes.") for m in mods), rel
        assert not any(m.split(".")[0] in ("adapter", "replay") for m in mods), rel


def _runtime_imports(path: Path) -> set[str]:
    """Imports that run (those under ``if TYPE_CHECKING:`` do not)."""
    mods: set[str] = set()

    def visit(node):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return mods


def test_warmpool_modules_import_each_other_without_a_circle():
    mods = {p.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."): p for p in (ROOT / "warmpool").rglob("*.py")}
    graph = {m: {i for i in _runtime_imports(p) if i in mods and i != m} for m, p in mods.items()}
    assert "warmpool.tracesim" not in graph["warmpool.keepalive"]
    state: dict[str, int] = {}

    def cycle_from(m, stack):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack + [m, n]
            if n not in state and (found := cycle_from(n, stack + [m])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            assert cycle_from(m, []) is None
