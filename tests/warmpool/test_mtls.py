"""mTLS on the claim API: only clients with a certificate signed by --client-ca connect;
/healthz and /metrics answer on the plain probe port. Real TLS over real sockets."""

import datetime
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.store import MemoryForecastStore
from tests.warmpool.conftest import make_policy
from warmpool.api import create_app
from warmpool.backends.sim import SimBackend
from warmpool.controller import Controller
from warmpool.wiring import HttpServer, TLSFiles

ROOT = Path(__file__).resolve().parents[2]


def _cert(d: Path, name: str, cn: str, issuer=None, ca=False, server=False, orgs=()):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                         *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs)])
    iss_name, iss_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(iss_name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            import ipaddress

            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = b.sign(iss_key, hashes.SHA256())
    (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert, key


@pytest.fixture
def pki(tmp_path):
    ca = _cert(tmp_path, "ca", "warmpool-clients-ca", ca=True)
    _cert(tmp_path, "server", "warmpool", issuer=ca, server=True)
    _cert(tmp_path, "client", "claimer", issuer=ca)
    rogue = _cert(tmp_path, "rogue-ca", "rogue", ca=True)
    _cert(tmp_path, "rogue", "claimer", issuer=rogue)
    return tmp_path


def _client(pki, cert=None):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return httpx.Client(verify=ctx, timeout=10)


def test_only_clients_with_a_certificate_from_the_client_ca_can_claim(pki, clock):
    ctl = Controller(make_policy(min_warm=1), MemoryForecastStore(), {"sim": SimBackend(clock, seed=1)}, clock=clock)
    ctl.step()
    clock.advance(2)
    ctl.step()
    srv = HttpServer(create_app(ctl), "127.0.0.1", 0, tls=TLSFiles(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))).start()
    url = f"https://127.0.0.1:{srv.port}"
    try:
        with _client(pki, "client") as c:
            r = c.post(f"{url}/api/v1/pools/web/claim")
            assert r.status_code == 200 and r.json()["cold_start"] is False
        for cert in (None, "rogue"):
            with _client(pki, cert) as c, pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                c.post(f"{url}/api/v1/pools/web/claim")
        assert ctl.describe()["pools"][0]["claimed"] == 1
    finally:
        srv.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_warmpool_run_with_client_ca_serves_probes_in_plain_http(pki, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: foresight/v1alpha1\nkind: WarmPoolPolicy\npools:\n"
                      "  - {name: web, workload: {namespace: demo, name: web}, backend: sim, min_warm: 1}\n")
    port, probe = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "foresight", "warmpool", "run", "--policy", str(policy), "--store", "memory://", "--port", str(port),
         "--interval", "0.2", "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
         "--client-ca", str(pki / "ca.crt"), "--probe-port", str(probe), "--skip-pool-authorization"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline().decode()
        assert f"https://127.0.0.1:{port}" in line and "client certificates (mTLS)" in line and f"probes on http://127.0.0.1:{probe}" in line
        assert httpx.get(f"http://127.0.0.1:{probe}/healthz", timeout=5).json() == {"ok": True}
        assert "foresight_warmpool_warm" in httpx.get(f"http://127.0.0.1:{probe}/metrics", timeout=5).text
        assert httpx.post(f"http://127.0.0.1:{probe}/api/v1/pools/web/claim", timeout=5).status_code == 404  # probes only
        with _client(pki, "client") as c:
            assert c.get(f"https://127.0.0.1:{port}/api/v1/pools/web").json()["pool"] == "web"
    finally:
        proc.terminate()
        proc.wait(20)
        proc.stdout.close()
