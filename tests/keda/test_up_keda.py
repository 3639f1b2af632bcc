"""``foresight up --keda-port``: the scaler beside the embedded adapter, reading its core."""

from __future__ import annotations

import argparse
from pathlib import Path

import grpc
import pytest

from adapter.app import create_app
from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.server import serve_in_thread
from adapter.settings import AdapterSettings
from adapter.tls import ensure_serving_cert
from core.errors import UserError
from core.store import MemoryForecastStore
from foresight.up import _start_keda
from tests.adapter.helpers import sample_forecast
from tests.keda.conftest import ref


def test_up_serves_the_scaler_from_the_embedded_adapters_store_over_tls(tmp_path):
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", p90=(3.0, 4.0, 5.0), observed=2.0))
    crt, key = ensure_serving_cert(tmp_path, hosts=["127.0.0.1", "localhost"])
    srv = serve_in_thread(create_app(AdapterSettings(), store), "127.0.0.1", 0, certfile=str(crt), keyfile=str(key))
    args = argparse.Namespace(host="127.0.0.1", keda_port=0, cert_dir=str(tmp_path))
    keda = _start_keda(args, srv)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=Path(crt).read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{keda.port}", creds) as ch:
            assert pb_grpc.ExternalScalerStub(ch).IsActive(ref(), timeout=10).result is True
    finally:
        keda.stop()
        srv.stop()


def test_up_refuses_the_scaler_beyond_loopback():
    with pytest.raises(UserError, match="only on loopback"):
        _start_keda(argparse.Namespace(host="0.0.0.0", keda_port=0, cert_dir="."), None)
