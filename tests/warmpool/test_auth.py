"""Authentication of the claim API over a real uvicorn server: token file (constant-time, re-read
on rotation) and Kubernetes TokenReview (against the boundary fake, driven by the real client)."""

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.store import MemoryForecastStore
from tests.warmpool.conftest import FakeClock, make_policy
from tests.warmpool.k8s_fake import FakeKubernetes
from warmpool.api import create_app
from warmpool.auth import Authenticator, TokenFile
from warmpool.backends.kubernetes import token_reviewer
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.wiring import HttpServer

ROOT = Path(__file__).resolve().parents[2]


def serve(auth, clock):
    ctl = Controller(make_policy(min_warm=1), MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2.0)
    ctl.step()
    return ctl, HttpServer(create_app(ctl, auth), "127.0.0.1", 0).start()


@pytest.fixture
def fake():
    f = FakeKubernetes().start()
    yield f
    f.stop()


def test_token_file_guards_claims_and_metrics_but_not_health(tmp_path, clock):
    tf = tmp_path / "tokens"
    tf.write_text("# claimers\nsecret-one\n\nsecret-two\n")
    ctl, srv = serve(Authenticator(TokenFile(tf)), clock)
    url = f"http://127.0.0.1:{srv.port}"
    try:
        with httpx.Client(timeout=10) as c:
            r = c.post(f"{url}/api/v1/pools/web/claim")
            assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert c.post(f"{url}/api/v1/pools/web/claim", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.post(f"{url}/api/v1/pools/web/claim", headers={"Authorization": "Basic c2VjcmV0LW9uZQ=="}).json()["detail"] \
                == "the Authorization header must be 'Bearer <token>'"
            assert c.get(f"{url}/api/v1/pools").status_code == 401
            assert c.post(f"{url}/api/v1/pools/web/release", json={"container_id": "x"}).status_code == 401
            assert ctl.describe()["pools"][0]["claimed"] == 0  # nothing was claimed by the refused calls
            assert c.get(f"{url}/healthz").status_code == 200
            assert c.get(f"{url}/metrics").status_code == 401  # it lists pools and claims: not everyone's
            assert "foresight_warmpool_warm" in c.get(f"{url}/metrics", headers={"Authorization": "Bearer secret-one"}).text
            ok = c.post(f"{url}/api/v1/pools/web/claim", headers={"Authorization": "Bearer secret-two"})
            assert ok.status_code == 200 and ok.json()["cold_start"] is False
            # rotation: the old token stops working, the new one works, without a restart
            tf.write_text("rotated-token-longer\n")
            assert c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer secret-two"}).status_code == 401
            assert c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer rotated-token-longer"}).status_code == 200
    finally:
        srv.stop()


def test_token_file_must_hold_a_token(tmp_path):
    from core.errors import UserError

    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(UserError, match="holds no token"):
        TokenFile(tmp_path / "empty")
    with pytest.raises(UserError, match="cannot be read"):
        TokenFile(tmp_path / "missing")


def test_token_review_authenticates_service_accounts_caches_and_restricts(fake):
    fake.tokens["sa-token"] = {"username": "system:serviceaccount:shop:checkout", "groups": ["system:serviceaccounts", "shop-claimers"]}
    fake.tokens["other"] = {"username": "system:serviceaccount:dev:x", "groups": ["system:serviceaccounts"]}
    clock = FakeClock()
    auth = Authenticator(token_review=token_reviewer(host=fake.url), allow=("shop-claimers",), clock=clock)
    sim_clock = FakeClock()
    ctl, srv = serve(auth, sim_clock)
    url = f"http://127.0.0.1:{srv.port}"
    try:
        with httpx.Client(timeout=10) as c:
            assert c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer sa-token"}).status_code == 200
            assert c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer sa-token"}).status_code == 200
            assert fake.reviews == 1  # the second answer came from the cache
            clock.advance(11)
            assert c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer sa-token"}).status_code == 200
            assert fake.reviews == 2
            r = c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer other"})
            assert r.status_code == 403 and "system:serviceaccount:dev:x" in r.json()["detail"]
            r = c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer forged"})
            assert r.status_code == 401 and "TokenReview" in r.json()["detail"]
            fake.fail_reviews = True  # the API server cannot answer: an uncached token cannot be checked
            r = c.get(f"{url}/api/v1/pools", headers={"Authorization": "Bearer new-token"})
            assert r.status_code == 503 and r.headers["retry-after"] == "5"
            assert c.get(f"{url}/healthz").status_code == 200
    finally:
        srv.stop()


def test_warmpool_run_refuses_to_serve_unauthenticated_by_default(tmp_path):
    policy = ROOT / "warmpool" / "examples" / "local.yaml"
    r = subprocess.run([sys.executable, "-m", "foresight", "warmpool", "run", "--policy", str(policy), "--store", "memory://"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "--token-file" in r.stderr and "--insecure-no-auth" in r.stderr
