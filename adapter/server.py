"""Running the adapter app over HTTPS with uvicorn.

uvicorn does not pass the client certificate to the app, and aggregated-API authentication
needs it (X-Remote-User is trusted only from the front-proxy certificate). ``TLSHttpProtocol``
adds it to the ASGI scope as ``scope["extensions"]["tls"]`` (verified flag + common name).

- ``serve_in_thread(app, host, port, certfile, keyfile)``: for ``foresight up`` (one process).
- ``uvicorn_config(...)`` / ``run(...)``: for ``foresight serve`` (several workers possible;
  each worker builds its own app and cache from the options in the environment).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ENV_OPTIONS = "FORESIGHT_ADAPTER_OPTIONS"


def _tls_info(transport) -> dict | None:
    ssl_obj = transport.get_extra_info("ssl_object")
    if ssl_obj is None:
        return None
    cert = None
    try:
        cert = ssl_obj.getpeercert()
    except (ValueError, ssl.SSLError):
        cert = None
    cn = None
    if cert:
        for rdn in cert.get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    cn = v
    # With CERT_OPTIONAL + a CA, a presented certificate only gets here if it verified.
    return {"client_cert_verified": bool(cert), "client_cert_cn": cn, "tls_version": ssl_obj.version()}


class _HeadWithBody:
    """The connection's transport as one response sees it: the response head is held and
    written together with the response's first body write (or at close), so a small response
    goes out as one TLS record in one send() instead of two (under wrk on loopback, the head's own
    send() was 22% of the server's samples). An interim ``100 Continue`` goes out
    at once (the client waits for it before sending the body)."""

    __slots__ = ("_head", "_started", "_transport")

    def __init__(self, transport) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if not self._started:
            if data.startswith(b"HTTP/1.1 100 "):
                self._transport.write(data)
                return
            self._started, self._head = True, bytes(data)
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class TLSHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the client certificate in the scope and each
    response's head and body written together (``_HeadWithBody``)."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._foresight_tls = _tls_info(transport)

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        # HEAD responses have no body write to carry the head: they are written as they come
        if cycle is not None and cycle is not before and self.scope["method"] != "HEAD":
            cycle.transport = _HeadWithBody(cycle.transport)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._foresight_tls is not None:
            self.scope["extensions"] = {"tls": self._foresight_tls}  # type: ignore[typeddict-unknown-key]


def uvicorn_kwargs(host: str, port: int, certfile: str | None, keyfile: str | None, *,
                   client_ca_file: str | None = None, workers: int = 1, factory: bool = False,
                   log_level: str = "warning", access_log: bool = False,
                   require_client_cert: bool = False) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        host=host,
        port=port,
        http=TLSHttpProtocol,
        loop="uvloop",
        lifespan="on",
        log_level=log_level,
        access_log=access_log,
        workers=workers,
        factory=factory,
        timeout_keep_alive=75,  # the aggregator keeps connections open; don't drop them every 5 s
        # nothing reads the client's address or scheme, so X-Forwarded-* is not parsed per request
        proxy_headers=False,
    )
    from core.logs import uvicorn_log_config

    log_config = uvicorn_log_config()  # --log-format json: uvicorn's lines (and its workers') as JSON too
    if log_config is not None:
        kw["log_config"] = log_config
    if certfile:
        kw.update(ssl_certfile=str(certfile), ssl_keyfile=str(keyfile))
        if client_ca_file:
            reqs = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
            kw.update(ssl_ca_certs=str(client_ca_file), ssl_cert_reqs=reqs)
    return kw


class TLSConfig(uvicorn.Config):
    """uvicorn's Config with TLS 1.2 as the floor (kube-apiserver's default --tls-min-version),
    whatever the local OpenSSL policy says. Module level: worker processes unpickle it."""

    def load(self) -> None:
        super().load()
        if self.ssl is not None:
            self.ssl.minimum_version = ssl.TLSVersion.TLSv1_2


def uvicorn_config(app: Any, host: str, port: int, certfile: str | None, keyfile: str | None, **kw: Any):
    return TLSConfig(app, **uvicorn_kwargs(host, port, certfile, keyfile, **kw))


def run_config(config) -> None:
    """Run a Config like ``uvicorn.run`` does, with several worker processes when asked."""
    import uvicorn

    server = uvicorn.Server(config)
    if config.workers <= 1:
        server.run()
        return
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    Multiprocess(config, sockets=[sock]).run()


@dataclass
class ServerHandle:
    server: Any
    thread: threading.Thread
    url: str

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 8443, certfile: str | None = None,
                    keyfile: str | None = None, *, client_ca_file: str | None = None,
                    require_client_cert: bool = False, startup_timeout: float = 15.0) -> ServerHandle:
    """Serve ``app`` in a daemon thread (HTTPS when certfile is given); returns once it
    accepts connections. ``handle.stop()`` shuts it down."""
    import uvicorn

    config = uvicorn_config(app, host, port, certfile, keyfile, client_ca_file=client_ca_file,
                            require_client_cert=require_client_cert)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"foresight-adapter-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the adapter failed to start on {host}:{port} (port in use?)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the adapter did not start on {host}:{port} within {startup_timeout} s")
        time.sleep(0.02)
    scheme = "https" if certfile else "http"
    return ServerHandle(server, thread, f"{scheme}://{host}:{port}")


# --- multi-worker: each worker process builds the app from options in the environment -----

FREEZE_SECONDS = 10.0
FULL_COLLECTION_SECONDS = 3600.0


def freeze_long_lived(stop: threading.Event, every: float = FREEZE_SECONDS,
                      full_every: float = FULL_COLLECTION_SECONDS) -> None:
    """Every ``every`` seconds, move what survived into the collector's permanent generation;
    once every ``full_every``, unfreeze and collect everything; until ``stop`` is set.

    The cache's forecasts, labels and answers are long-lived and hold no cycles, but CPython's
    full collections walk them all: at 10,000 cached workloads, the five in the minute after a
    start took 20-143 ms each and found next to nothing (a GC callback in ``foresight serve``).
    Frozen, they are skipped. A cycle frozen with them (an exception's traceback) waits for the
    hourly full collection, not forever. For ``foresight serve`` only: a process that also
    trains (``foresight up``) makes cyclic garbage faster than an hour allows."""
    import gc

    last_full = time.monotonic()
    while not stop.wait(every):
        if time.monotonic() - last_full >= full_every:
            gc.unfreeze()
            gc.collect()
            last_full = time.monotonic()
        gc.freeze()


def tune_process() -> None:
    """For a process whose job is serving: hand the GIL over every 0.5 ms instead of 5 ms,
    so the cache refresher thread's bursts add < 1 ms to a request, not up to 5 ms each."""
    sys.setswitchinterval(0.0005)


def tune_serving_process() -> None:
    """``tune_process`` for a process that only serves (``foresight serve``), plus
    ``freeze_long_lived`` in a daemon thread."""
    tune_process()
    threading.Thread(target=freeze_long_lived, args=(threading.Event(),), name="foresight-gc-freeze", daemon=True).start()


def app_from_env():
    """uvicorn factory (``adapter.server:app_from_env``) used by ``foresight serve``."""
    from adapter.factory import build_app

    tune_serving_process()
    opts = json.loads(os.environ[ENV_OPTIONS])
    return build_app(opts)
