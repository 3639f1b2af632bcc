"""Only the caller that made a claim may renew or release it; `warmpool run` refuses plain HTTP
beyond loopback. Real uvicorn over real sockets; identities from an injected TokenReview."""

import subprocess
import sys
from pathlib import Path

import httpx

from core.store import MemoryForecastStore
from tests.warmpool.conftest import make_policy
from warmpool.api import create_app
from warmpool.auth import Authenticator
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.wiring import HttpServer

ROOT = Path(__file__).resolve().parents[2]
USERS = {"alice-token": {"username": "alice", "groups": ["shop"]},
         "bob-token": {"username": "bob", "groups": ["shop"]}}


def _auth():
    return Authenticator(token_review=USERS.get)


def _post(url, path, token, **kw):
    return httpx.post(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10, **kw)


def test_renew_and_release_are_refused_to_anyone_but_the_claimer(clock):
    ctl = Controller(make_policy(min_warm=2), MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    srv = HttpServer(create_app(ctl, _auth()), "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{srv.port}"
    try:
        r = _post(url, "/api/v1/pools/web/claim", "alice-token")
        assert r.status_code == 200, r.text
        cid = {"container_id": r.json()["container_id"]}
        for verb in ("renew", "release"):
            denied = _post(url, f"/api/v1/pools/web/{verb}", "bob-token", json=cid)
            assert denied.status_code == 403 and "claimed by another caller" in denied.json()["detail"], denied.text
        assert ctl.describe()["pools"][0]["claimed"] == 1  # bob's release did not free it
        assert _post(url, "/api/v1/pools/web/renew", "alice-token", json=cid).status_code == 200
        assert _post(url, "/api/v1/pools/web/release", "alice-token", json=cid).status_code == 200
        assert ctl.describe()["pools"][0]["claimed"] == 0
        # bob may claim the container alice gave back; now alice may not release it
        again = _post(url, "/api/v1/pools/web/claim", "bob-token", params={"allow_cold": "false"})
        assert again.status_code == 200
        assert _post(url, "/api/v1/pools/web/release", "alice-token", json={"container_id": again.json()["container_id"]}).status_code == 403
    finally:
        srv.stop()


def test_a_claim_made_before_a_restart_has_no_known_holder_and_is_not_renewable(clock):
    ctl = Controller(make_policy(min_warm=1), MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    first = HttpServer(create_app(ctl, _auth()), "127.0.0.1", 0).start()
    try:
        cid = _post(f"http://127.0.0.1:{first.port}", "/api/v1/pools/web/claim", "alice-token").json()["container_id"]
    finally:
        first.stop()
    second = HttpServer(create_app(ctl, _auth()), "127.0.0.1", 0).start()  # a new API: holders not carried over
    try:
        r = _post(f"http://127.0.0.1:{second.port}", "/api/v1/pools/web/renew", "alice-token", json={"container_id": cid})
        assert r.status_code == 403 and "before a controller restart" in r.json()["detail"]
    finally:
        second.stop()


def _run(tmp_path, *extra):
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: foresight/v1alpha1\nkind: WarmPoolPolicy\npools:\n"
                      "  - {name: web, workload: {namespace: demo, name: web}, backend: sim}\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("t0k3n\n")
    return subprocess.run([sys.executable, "-m", "foresight", "warmpool", "run", "--policy", str(policy), "--store", "memory://",
                           "--token-file", str(tokens), "--port", "0", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_warmpool_run_refuses_plain_http_beyond_loopback_naming_the_fix(tmp_path):
    r = _run(tmp_path, "--host", "0.0.0.0")
    assert r.returncode != 0
    assert "--host 0.0.0.0: a non-loopback address without TLS" in r.stderr
    for fix in ("--tls-cert", "--host 127.0.0.1", "--plain-http"):
        assert fix in r.stderr


def test_skipping_pool_authorization_needs_kubernetes_identities(tmp_path):
    r = _run(tmp_path, "--skip-pool-authorization")
    assert r.returncode != 0 and "--skip-pool-authorization applies to --token-review or --client-ca identities" in r.stderr


def test_the_shipped_warmpool_manifest_serves_tls_and_may_ask_access_reviews():
    import yaml

    from foresight.cli import build_parser
    from warmpool.cli import _check_transport

    docs = [d for p in ("deployment.yaml", "rbac.yaml") for d in yaml.safe_load_all((ROOT / "manifests/warmpool" / p).read_text()) if d]
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(c["args"])
    assert args.host == "0.0.0.0" and not args.plain_http and not args.skip_pool_authorization and args.token_review
    _check_transport(args)  # raises on a non-loopback bind without TLS
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols[mounts[str(Path(args.tls_cert).parent)]]["secret"]["secretName"] == "foresight-warmpool-tls"
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    assert any("subjectaccessreviews" in r["resources"] and "create" in r["verbs"] for r in roles["foresight-warmpool"]["rules"])
    # what Prometheus needs to scrape every pool's figures from the now-authorized /metrics
    assert roles["foresight-warmpool-metrics"]["rules"] == [{"apiGroups": ["foresight.dev"], "resources": ["warmpools"], "verbs": ["get"]}]
