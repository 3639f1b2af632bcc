"""The scheduler extender port requires a client certificate: `foresight serve` refuses a
--scheduler-port beyond loopback without --scheduler-client-ca, and the running port (a real
`foresight serve` process) turns away a caller without the scheduler's certificate. The
shipped manifests give the adapter that CA and the scheduler that certificate."""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from adapter.cli import anonymous_scheduler_port
from adapter.tls import write_ca, write_signed
from foresight.cli import build_parser, main
from tests.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
NODE_NAMES = {"Pod": {"metadata": {"name": "p", "namespace": "shop"}}, "NodeNames": ["n1", "n2"]}


def args_of(*argv: str):
    return build_parser().parse_args(["serve", "--store", "memory://", *argv])


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7"])
def test_a_scheduler_port_beyond_loopback_without_a_client_ca_is_refused_naming_the_fixes(host):
    msg = anonymous_scheduler_port(args_of("--host", host, "--token-file", "t", "--scheduler-port", "8444"))
    assert f"--scheduler-port 8444 on --host {host}: without --scheduler-client-ca" in msg
    for fix in ("--scheduler-client-ca CA", "loopback", "--insecure"):
        assert fix in msg


def test_a_client_ca_loopback_or_explicit_insecure_is_accepted():
    assert anonymous_scheduler_port(args_of("--scheduler-port", "8444", "--scheduler-client-ca", "ca.crt")) is None
    assert anonymous_scheduler_port(args_of("--host", "127.0.0.1", "--scheduler-port", "8444")) is None
    assert anonymous_scheduler_port(args_of("--scheduler-port", "8444", "--insecure")) is None
    assert anonymous_scheduler_port(args_of()) is None  # no scheduler port at all


def test_serve_exits_2_before_listening(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("t\n")
    assert main(["serve", "--store", "memory://", "--token-file", str(token), "--scheduler-port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "without --scheduler-client-ca" in err
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    assert main(["serve", "--store", "memory://", "--host", "127.0.0.1", "--plain-http", "--scheduler-port", "8444",
                 "--scheduler-client-ca", str(ca)]) == 2
    assert "--scheduler-client-ca needs HTTPS" in capsys.readouterr().err


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("sched-pki")
    ca, _, ca_cert, ca_key = write_ca(d, "serving-ca")
    server = write_signed(d, "server", ca_cert, ca_key, cn="foresight-adapter", client=False, sans=["127.0.0.1"])
    sched_ca, _, sc_cert, sc_key = write_ca(d, "scheduler-ca")
    sched = write_signed(d, "scheduler", sc_cert, sc_key, cn="kube-scheduler", client=True)
    _, _, o_cert, o_key = write_ca(d, "other-ca")
    other = write_signed(d, "other", o_cert, o_key, cn="kube-scheduler", client=True)
    (d / "token").write_text("t\n")
    return {"dir": d, "ca": ca, "server": server, "sched_ca": sched_ca, "sched": sched, "other": other}


def _ctx(pki, cert=None):
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if cert:
        ctx.load_cert_chain(*(str(p) for p in cert))
    return ctx


def test_foresight_serve_answers_the_extender_only_to_the_schedulers_certificate(pki):
    port, sched_port = free_port(), free_port()
    log = pki["dir"] / "serve.log"
    # every address, as in a pod: the refusal above does not apply because the client CA is set
    cmd = [sys.executable, "-m", "foresight", "serve", "--store", "memory://", "--host", "0.0.0.0", f"--port={port}",
           f"--cert={pki['server'][0]}", f"--key={pki['server'][1]}", f"--token-file={pki['dir'] / 'token'}",
           f"--scheduler-port={sched_port}", f"--scheduler-client-ca={pki['sched_ca']}"]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
    url = f"https://127.0.0.1:{sched_port}/scheduler/filter"
    try:
        for _ in range(300):  # bounded: up to ~60 s for the process to listen
            try:
                r = httpx.post(url, json=NODE_NAMES, verify=_ctx(pki, pki["sched"]), timeout=5)
                break
            except httpx.ConnectError:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.2)
        else:
            raise AssertionError(f"the scheduler port never answered: {log.read_text()[-2000:]}")
        assert r.status_code == 200 and r.json()["nodenames"] == ["n1", "n2"]
        assert "(client certificate required)" in log.read_text()
        for cert in (None, pki["other"]):  # no certificate, or one another CA signed
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.post(url, json=NODE_NAMES, verify=_ctx(pki, cert), timeout=5)
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_shipped_manifests_pair_the_adapters_client_ca_with_the_schedulers_certificate():
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/adapter/deployment.yaml").read_text()) if d]
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["args"][0] == "serve"]
    args = build_parser().parse_args(c["args"])
    assert args.scheduler_port and anonymous_scheduler_port(args) is None
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    ca_vol = vols[mounts[str(Path(args.scheduler_client_ca).parent)]]
    assert ca_vol["configMap"]["name"] == "foresight-scheduler-client-ca"
    cfg = yaml.safe_load((ROOT / "manifests/scheduler/kube-scheduler-configuration.yaml").read_text())
    (ext,) = cfg["extenders"]
    sdocs = [d for d in yaml.safe_load_all((ROOT / "manifests/scheduler/deployment.yaml").read_text()) if d]
    [sdep] = [d for d in sdocs if d["kind"] == "Deployment"]
    smounts = {m["mountPath"]: m["name"] for m in sdep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    svols = {v["name"]: v for v in sdep["spec"]["template"]["spec"]["volumes"]}
    for key in ("certFile", "keyFile"):
        vol = svols[smounts[ext["tlsConfig"][key].rsplit("/", 1)[0]]]
        assert vol["secret"]["secretName"] == "foresight-scheduler-client-tls"
