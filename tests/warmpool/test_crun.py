"""Real OCI containers with crun/runc (root). Skipped with the reason when they cannot run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.store import MemoryForecastStore, make_forecast
from tests.warmpool.conftest import make_policy
from warmpool.backends.crun import CrunBackend
from warmpool.controller import Controller

pytestmark = pytest.mark.crun
ROOT = Path(__file__).resolve().parents[2]


def runtime_states(backend):
    return {k: v["status"] for k, v in backend._states().items()}


@pytest.fixture
def make(tmp_path, clock):
    made = []

    def _make(runtime="crun", demand=2.0, state_dir=None, **pool):
        policy = make_policy(backend=runtime, runtime_class="runc" if runtime == "runc" else "crun", **pool)
        store = MemoryForecastStore()
        store.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=[demand] * 3, quantiles={"p90": [demand] * 3}, model="t", generated_at=clock()))
        backend = CrunBackend(state_dir or tmp_path / runtime, runtime)
        made.append(backend)
        return Controller(policy, store, {runtime: backend}, clock=clock), store, backend

    yield _make
    for b in made:  # leave nothing behind on the machine
        for cid in b.container_ids():
            subprocess.run([b.binary, "--root", str(b.root), "delete", "-f", cid], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_real_containers_are_prewarmed_claimed_and_expired_by_the_controller(make, clock, runtime, request):
    request.getfixturevalue("crun_ok" if runtime == "crun" else "runc_ok")
    ctl, store, backend = make(runtime, idle_model={"enabled": False})  # only the forecast and the TTL decide here
    ctl.step()
    states = runtime_states(backend)
    assert len(states) == 2 and set(states.values()) == {"created"}  # pre-warm = create
    r = ctl.claim("web")
    assert not r.cold_start and runtime_states(backend)[r.container_id] == "running"  # claim = start
    ctl.release("web", r.container_id)
    store.publish(make_forecast("demo/web", origin=clock(), step_seconds=60, mean=[0.0] * 3, model="t", generated_at=clock()))
    clock.advance(121)
    ctl.step()
    assert runtime_states(backend) == {}  # expire = delete
    assert list(backend.bundles.iterdir()) == [] and list(backend.meta.iterdir()) == []
    assert ctl.coldstart.estimate("container", runtime).components_ms["sandbox"][0] > 0


def test_a_restarted_controller_adopts_its_containers_instead_of_making_new_ones(make, crun_ok, tmp_path):
    ctl, store, backend = make("crun", demand=3.0)
    ctl.step()
    before = sorted(runtime_states(backend))
    ctl2, _, backend2 = make("crun", demand=3.0, state_dir=backend.state_dir)
    actions = ctl2.step()
    assert actions.creates == () and sorted(runtime_states(backend2)) == before
    assert ctl2.describe()["pools"][0]["warm"] == 3


def test_a_dead_warm_container_is_replaced_with_a_new_one(make, crun_ok):
    ctl, store, backend = make("crun")
    ctl.step()
    victim = sorted(runtime_states(backend))[0]
    subprocess.run([backend.binary, "--root", str(backend.root), "kill", victim, "KILL"], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if runtime_states(backend).get(victim) == "stopped":
            break
        time.sleep(0.05)
    ctl.step()
    states = runtime_states(backend)
    assert victim not in states and len(states) == 2 and set(states.values()) == {"created"}


def test_a_failing_runtime_is_retried_with_backoff_and_leaves_nothing_behind(make, crun_ok, clock):
    ctl, store, backend = make("crun")
    real = backend.binary
    backend.binary = "/bin/false"
    try:
        ctl.step()
        ctl.step()  # still backing off: no second attempt
    finally:
        backend.binary = real
    d = ctl.describe()["pools"][0]
    assert d["degraded"] and "crun create failed" in d["reason"] and "retry in" in d["reason"]
    assert ctl.metrics.registry.get_sample_value("foresight_warmpool_creation_failures_total", {"pool": "web"}) == 1
    assert runtime_states(backend) == {} and list(backend.bundles.iterdir()) == [] and list(backend.meta.iterdir()) == []
    clock.advance(1.0)
    ctl.step()
    assert len(runtime_states(backend)) == 2 and not ctl.describe()["pools"][0]["degraded"]


def test_a_controller_killed_mid_reconcile_restarts_without_duplicates_or_orphans(make, crun_ok, tmp_path):
    state = tmp_path / "killed"
    target = 4
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.warmpool.crun_child", str(state), str(target)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert child.stdout.readline().strip() == b"started"
        probe = CrunBackend(state, "crun")
        deadline = time.time() + 30
        while time.time() < deadline and len(probe._states()) < 2:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
    left = probe._states()
    assert 2 <= len(left) < target  # it really died half-way
    ctl, store, backend = make("crun", demand=float(target), state_dir=state)
    ctl.step()
    states = runtime_states(backend)
    assert len(states) == target and set(states.values()) == {"created"}
    assert set(left) <= set(states)  # what it left was adopted, not duplicated
    metas = {p.stem: json.loads(p.read_text())["state"] for p in backend.meta.glob("*.json")}
    assert metas == {cid: "warm" for cid in states}
    assert sorted(p.name for p in backend.bundles.iterdir()) == sorted(states)
