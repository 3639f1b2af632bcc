"""A real KEDA scaler server on 127.0.0.1 over mutual TLS, reading an adapter core over a
memory store, and clients that call it as KEDA does."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from adapter.core import AdapterCore
from adapter.keda import externalscaler_pb2 as pb, externalscaler_pb2_grpc as pb_grpc
from adapter.keda.server import start_keda_server
from adapter.settings import AdapterSettings, CacheSettings
from adapter.tls import write_ca, write_signed
from core.store import MemoryForecastStore


class Certs:
    """A server CA and its serving pair for 127.0.0.1; a client CA with KEDA's pair; and a pair
    from a CA the server does not trust."""

    def __init__(self, d: Path) -> None:
        self.server_ca, _, sca, skey = write_ca(d / "server", "foresight-keda-server-ca")
        self.server_crt, self.server_key = write_signed(d / "server", "scaler", sca, skey, cn="foresight-keda",
                                                        client=False, sans=["127.0.0.1", "localhost"])
        self.client_ca, _, cca, ckey = write_ca(d / "client", "foresight-keda-client-ca")
        self.keda_crt, self.keda_key = write_signed(d / "client", "keda", cca, ckey, cn="keda-operator", client=True)
        _, _, oca, okey = write_ca(d / "other", "someone-elses-ca")
        self.other_crt, self.other_key = write_signed(d / "other", "intruder", oca, okey, cn="keda-operator",
                                                      client=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return Certs(tmp_path_factory.mktemp("keda-certs"))


class Clock:
    """The wall clock, until a test pins it (``clock.now = t``) for the adapter and the scaler alike."""

    now: float | None = None

    def __call__(self) -> float:
        return time.time() if self.now is None else self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> MemoryForecastStore:
    return MemoryForecastStore()


@pytest.fixture
def core(store, clock) -> AdapterCore:
    # a cache this short re-reads the store at each poll: a newly published forecast is seen at once
    return AdapterCore(AdapterSettings(cache=CacheSettings(ttl_seconds=0.05, max_stale_seconds=5.0)), store,
                       clock=clock)


@pytest.fixture
def scaler(core, certs, clock):
    handle = start_keda_server(core, "127.0.0.1", 0, certs.server_crt, certs.server_key, certs.client_ca,
                               stream_poll_seconds=0.05, clock=clock)
    yield handle
    handle.stop()


def channel(port: int, certs: Certs, pair: tuple[Path, Path] | None) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(certs.server_ca).read_bytes(),
        private_key=Path(pair[1]).read_bytes() if pair else None,
        certificate_chain=Path(pair[0]).read_bytes() if pair else None,
    )
    return grpc.secure_channel(f"127.0.0.1:{port}", creds)


@pytest.fixture
def keda(scaler, certs):
    """A client holding the certificate the chart issues to KEDA."""
    ch = channel(scaler.port, certs, (certs.keda_crt, certs.keda_key))
    yield pb_grpc.ExternalScalerStub(ch)
    ch.close()


def ref(namespace: str = "shop", name: str = "checkout-so", **metadata: str) -> pb.ScaledObjectRef:
    meta = {"scalerAddress": "foresight-keda.foresight:9443", "workload": "checkout", "targetValue": "0.5"}
    meta.update(metadata)
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)
