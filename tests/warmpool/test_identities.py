"""Claims bound to the caller's own identity (each token-file token, each client certificate),
and /metrics and /api/v1/coldstart showing a caller only the pools it may read. Real uvicorn
(and real TLS) over real sockets; the per-pool decisions come from an injected authorizer."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from core.accessreview import Decision, User
from core.errors import UserError
from core.store import MemoryForecastStore
from tests.warmpool.conftest import FakeClock
from tests.warmpool.test_mtls import _cert, _client
from warmpool.api import create_app
from warmpool.auth import Authenticator, TokenFile, certificate_user
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.policy import parse_policy
from warmpool.wiring import HttpServer, TLSFiles


def _pool(name, ns, rc):
    return {"name": name, "workload": {"namespace": ns, "name": name}, "backend": "sim", "runtime_class": rc,
            "min_warm": 2, "max_warm": 4, "capacity_per_container": 1.0, "lead_seconds": 90,
            "idle_ttl": {"initial_seconds": 120, "decay": 0.15}}


def _controller(clock, *pools):
    pools = pools or (_pool("web", "demo", "crun"),)
    ctl = Controller(parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": list(pools)}),
                     MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    return ctl


class _ByGroup:
    """A PoolAuthorizer that lets a user read and claim the pools of the namespaces named in
    its groups (what a RoleBinding per namespace gives)."""

    async def allowed(self, user: User, verb: str, pool: str, namespace: str) -> Decision:
        return Decision(namespace in user.groups)

    @staticmethod
    def denial(user, verb, pool, namespace):
        return f'user "{user.name}" may not {verb} warm pool "{pool}"'


def _bearer(token):
    return {"Authorization": f"Bearer {token}"}


def test_each_token_file_token_is_its_own_identity_named_without_revealing_it(tmp_path):
    tf = tmp_path / "tokens"
    tf.write_text("alice-secret\nbob-secret,bob,1001,\"shop,dev\"\n")
    tokens = TokenFile(tf)
    alice, bob = tokens.lookup("alice-secret"), tokens.lookup("bob-secret")
    assert alice.name == "token-file:" + hashlib.sha256(b"alice-secret").hexdigest()[:12]
    assert "alice-secret" not in alice.name
    assert (bob.name, bob.groups) == ("bob", ("shop", "dev"))
    assert tokens.lookup("carol") is None


def test_a_token_file_line_naming_an_empty_user_is_refused_with_its_line_number(tmp_path):
    tf = tmp_path / "tokens"
    tf.write_text("# claimers\nok-token\nbad-token, \n")
    with pytest.raises(UserError, match=r"line 3 names no user after the token; write TOKEN,USER or just TOKEN"):
        TokenFile(tf)


def test_one_token_file_caller_cannot_renew_or_release_anothers_claim(tmp_path):
    clock = FakeClock()
    tf = tmp_path / "tokens"
    tf.write_text("alice-secret\nbob-secret\n")
    ctl = _controller(clock)
    srv = HttpServer(create_app(ctl, Authenticator(TokenFile(tf))), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{srv.port}/api/v1/pools/web"
    try:
        with httpx.Client(timeout=10) as c:
            got = c.post(f"{url}/claim", headers=_bearer("alice-secret"))
            assert got.status_code == 200, got.text
            cid = {"container_id": got.json()["container_id"]}
            for verb in ("renew", "release"):
                r = c.post(f"{url}/{verb}", headers=_bearer("bob-secret"), json=cid)
                assert r.status_code == 403 and "claimed by another caller" in r.json()["detail"], r.text
            assert ctl.describe()["pools"][0]["claimed"] == 1
            assert c.post(f"{url}/release", headers=_bearer("alice-secret"), json=cid).status_code == 200
    finally:
        srv.stop()


def test_metrics_and_coldstart_show_a_caller_only_the_pools_it_may_read(tmp_path):
    clock = FakeClock()
    tf = tmp_path / "tokens"
    tf.write_text('shop-token,shop-dev,1,"shop"\nbank-token,bank-dev,2,"bank"\nnobody-token,nobody\n')
    ctl = _controller(clock, _pool("shop-web", "shop", "crun"), _pool("bank-web", "bank", "kata"))
    srv = HttpServer(create_app(ctl, Authenticator(TokenFile(tf)), _ByGroup()), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{srv.port}"
    try:
        with httpx.Client(timeout=10) as c:
            assert c.get(f"{url}/metrics").status_code == 401
            shop = c.get(f"{url}/metrics", headers=_bearer("shop-token")).text
            assert 'foresight_warmpool_warm{pool="shop-web"}' in shop and "bank-web" not in shop
            assert 'runtime_class="crun"' in shop and 'runtime_class="kata"' not in shop
            assert "foresight_warmpool_memory_price" in shop  # fleet-wide, no pool in it
            bank = c.get(f"{url}/metrics", headers=_bearer("bank-token")).text
            assert 'foresight_warmpool_warm{pool="bank-web"}' in bank and "shop-web" not in bank
            nobody = c.get(f"{url}/metrics", headers=_bearer("nobody-token")).text
            assert "shop-web" not in nobody and "bank-web" not in nobody and "# TYPE foresight_warmpool_warm" in nobody

            def rcs(tok):
                got = c.get(f"{url}/api/v1/coldstart", headers=_bearer(tok)).json()["runtime_classes"]
                return {e["runtime_class"] for e in got}

            assert rcs("shop-token") == {"crun"} and rcs("bank-token") == {"kata"} and rcs("nobody-token") == set()
            assert c.get(f"{url}/api/v1/coldstart").status_code == 401
            # and the claim itself: shop-dev may claim in shop, not in bank
            assert c.post(f"{url}/api/v1/pools/shop-web/claim", headers=_bearer("shop-token")).status_code == 200
            assert c.post(f"{url}/api/v1/pools/bank-web/claim", headers=_bearer("shop-token")).status_code == 403
    finally:
        srv.stop()


def test_a_certificate_subject_is_the_user_and_its_organizations_the_groups():
    peer = {"subject": ((("commonName", "alice"),), (("organizationName", "shop"),), (("organizationName", "dev"),))}
    assert certificate_user(peer) == User("alice", ("shop", "dev"))
    assert certificate_user({"subject": ((("organizationName", "shop"),),)}) is None
    assert certificate_user(None) is None


@pytest.fixture
def pki(tmp_path):
    ca = _cert(tmp_path, "ca", "warmpool-clients-ca", ca=True)
    _cert(tmp_path, "server", "warmpool", issuer=ca, server=True)
    _cert(tmp_path, "alice", "alice", issuer=ca, orgs=("shop",))
    _cert(tmp_path, "bob", "bob", issuer=ca, orgs=("shop",))
    _cert(tmp_path, "eve", "eve", issuer=ca, orgs=("bank",))
    return tmp_path


def test_claims_over_mtls_belong_to_the_certificate_and_its_namespaces(pki):
    clock = FakeClock()
    ctl = _controller(clock, _pool("shop-web", "shop", "crun"))
    tls = TLSFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    srv = HttpServer(create_app(ctl, Authenticator(client_certificates=True), _ByGroup()), "127.0.0.1", 0, tls=tls).start()
    url = f"https://127.0.0.1:{srv.port}/api/v1/pools/shop-web"
    try:
        with _client(pki, "alice") as alice, _client(pki, "bob") as bob, _client(pki, "eve") as eve:
            got = alice.post(f"{url}/claim")
            assert got.status_code == 200, got.text
            cid = {"container_id": got.json()["container_id"]}
            r = bob.post(f"{url}/release", json=cid)  # same namespace, another certificate
            assert r.status_code == 403 and "claimed by another caller" in r.json()["detail"]
            r = eve.post(f"{url}/claim")  # a certificate of another namespace
            assert r.status_code == 403 and 'user "eve"' in r.json()["detail"]
            assert "shop-web" not in eve.get(f"https://127.0.0.1:{srv.port}/metrics").text
            assert alice.post(f"{url}/release", json=cid).status_code == 200
    finally:
        srv.stop()


def test_warmpool_run_with_client_ca_alone_needs_a_cluster_to_authorize_or_an_explicit_skip(pki, tmp_path, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: foresight/v1alpha1\nkind: WarmPoolPolicy\npools: []\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    r = subprocess.run([sys.executable, "-m", "foresight", "warmpool", "run", "--policy", str(policy), "--store", "memory://",
                        "--port", "0", "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                        "--client-ca", str(pki / "ca.crt")],
                       cwd=root, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert "--client-ca authorizes claims with SubjectAccessReviews" in r.stderr and "--skip-pool-authorization" in r.stderr
