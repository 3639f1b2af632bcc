"""The KEDA scaler's gRPC server: grpc.aio on its own event loop in a daemon thread of the
adapter's process, beside the HTTPS server and reading the same ``AdapterCore``.

Mutual TLS: with a client CA the handshake refuses any caller without a certificate that CA
signed (KEDA presents the TriggerAuthentication's ``tlsClientCert``/``tlsClientKey``).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import grpc

from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.scaler import MAX_STREAMS, STREAM_POLL_SECONDS, ExternalScalerService, KedaScaler

__all__ = ["KedaServerHandle", "start_keda_server"]

READ_THREADS = 4  # cache reads are microseconds; a few threads cover a store read past its TTL


@dataclass
class KedaServerHandle:
    port: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    server: Any
    service: ExternalScalerService
    executor: ThreadPoolExecutor
    scaler: KedaScaler = field(repr=False, default=None)  # type: ignore[assignment]

    def stop(self, grace_seconds: float = 2.0) -> None:
        """End open streams, stop the server and its loop."""
        async def _stop() -> None:
            self.service.stopping.set()
            await self.server.stop(grace_seconds)

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(grace_seconds + 5)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(grace_seconds + 5)
        self.executor.shutdown(wait=False)


def server_credentials(certfile: str | Path, keyfile: str | Path, client_ca_file: str | Path | None):
    """TLS with the serving pair; with a client CA, a client certificate it signed is required."""
    pair = [(Path(keyfile).read_bytes(), Path(certfile).read_bytes())]
    if client_ca_file is None:
        return grpc.ssl_server_credentials(pair)
    return grpc.ssl_server_credentials(pair, root_certificates=Path(client_ca_file).read_bytes(),
                                       require_client_auth=True)


def start_keda_server(core: Any, host: str, port: int, certfile: str | Path | None, keyfile: str | Path | None,
                      client_ca_file: str | Path | None, *, allowed_names: Sequence[str] = (),
                      stream_poll_seconds: float = STREAM_POLL_SECONDS, max_streams: int = MAX_STREAMS,
                      startup_timeout: float = 15.0, clock: Any = None) -> KedaServerHandle:
    """Serve ``externalscaler.ExternalScaler`` on host:port (port 0: a free one) and return once
    it listens. Without ``certfile`` it serves plaintext (tests and loopback only: the CLI
    refuses that anywhere else)."""
    scaler = KedaScaler(core, allowed_names=allowed_names, **({"clock": clock} if clock else {}))
    executor = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="foresight-keda-read")
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def _start() -> None:
        service = ExternalScalerService(scaler, executor, stream_poll_seconds, max_streams)
        server = grpc.aio.server(maximum_concurrent_rpcs=max_streams + 256)
        pb_grpc.add_ExternalScalerServicer_to_server(service, server)
        address = f"{host}:{port}"
        if certfile:
            assert keyfile is not None, "a serving certificate needs its key"
            bound = server.add_secure_port(address, server_credentials(certfile, keyfile, client_ca_file))
        else:
            bound = server.add_insecure_port(address)
        await server.start()
        box.update(server=server, service=service, port=bound)

    def _run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(_start())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            box["error"] = exc
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=_run, name=f"foresight-keda-{port}", daemon=True)
    thread.start()
    if not ready.wait(startup_timeout):
        raise RuntimeError(f"the KEDA scaler did not start on {host}:{port} within {startup_timeout} s")
    if "error" in box:
        raise RuntimeError(f"the KEDA scaler could not listen on {host}:{port}: {box['error']}") from box["error"]
    return KedaServerHandle(box["port"], loop, thread, box["server"], box["service"], executor, scaler)
