"""Certificates: a self-signed serving pair when none is given (as aggregated API servers do
with --cert-dir), plus small helpers the tests use to mint a CA and client certificates."""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from pathlib import Path
from typing import Sequence

from core.errors import UserError


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str | None = None):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _build(subject, issuer, public_key, signing_key, *, ca: bool, sans: Sequence[str] = (), client: bool = False, days: int = 365):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = _dt.datetime.now(_dt.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        b = b.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
    if sans:
        names = []
        for s in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(s)))
            except ValueError:
                names.append(x509.DNSName(s))
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return b.sign(signing_key, hashes.SHA256())


def write_ca(directory: str | Path, cn: str = "foresight-test-ca") -> tuple[Path, Path, object, object]:
    """A CA pair in ``directory`` (ca.crt, ca.key); returns paths, cert and key objects."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = _new_key()
    cert = _build(_name(cn), _name(cn), key.public_key(), key, ca=True, days=30)
    (d / f"{cn}.crt").write_bytes(_pem_cert(cert))
    (d / f"{cn}.key").write_bytes(_pem_key(key))
    return d / f"{cn}.crt", d / f"{cn}.key", cert, key


def write_signed(directory: str | Path, name: str, ca_cert, ca_key, *, cn: str, client: bool, sans: Sequence[str] = (), org: str | None = None) -> tuple[Path, Path]:
    """A certificate for ``cn`` signed by the CA, written as NAME.crt / NAME.key."""
    d = Path(directory)
    key = _new_key()
    cert = _build(_name(cn, org), ca_cert.subject, key.public_key(), ca_key, ca=False, sans=sans, client=client, days=30)
    (d / f"{name}.crt").write_bytes(_pem_cert(cert))
    (d / f"{name}.key").write_bytes(_pem_key(key))
    os.chmod(d / f"{name}.key", 0o600)
    return d / f"{name}.crt", d / f"{name}.key"


def ensure_serving_cert(cert_dir: str | Path, hosts: Sequence[str] = ("localhost", "127.0.0.1")) -> tuple[Path, Path]:
    """Reuse ``apiserver.crt``/``apiserver.key`` in cert_dir, or generate a self-signed pair
    there (the APIService then needs insecureSkipTLSVerify or this cert as caBundle)."""
    d = Path(cert_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--cert-dir {d}: cannot create it ({exc}); pass a writable directory") from exc
    crt, key_path = d / "apiserver.crt", d / "apiserver.key"
    if crt.exists() and key_path.exists():
        return crt, key_path
    key = _new_key()
    subject = _name(f"foresight-adapter@{int(_dt.datetime.now().timestamp())}")
    cert = _build(subject, subject, key.public_key(), key, ca=False, sans=list(hosts), days=365)
    key_path.write_bytes(_pem_key(key))
    os.chmod(key_path, 0o600)
    crt.write_bytes(_pem_cert(cert))
    return crt, key_path
