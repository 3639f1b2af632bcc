"""``foresight demo-app``: a small HTTP service whose every request costs a set amount of CPU.

It is the load application of the real-node measurements: run it in pods with a CPU request
and limit, drive it with ``foresight load`` (foresight/loaddriver.py), and a pod saturates the
way a real service does under its CPU limit (latency rises, then requests are shed).

    foresight demo-app --port 8080 --cpu-ms-per-request 20 --workers 2 --queue 16

- ``GET /`` (any path but /healthz): burns ``--cpu-ms-per-request`` ms of CPU time in a worker
  thread (measured with ``time.thread_time``, so CPU throttling and waiting for the CPU make the
  request slower, never cheaper), then answers 200 with a small JSON body
  ``{"cpu_ms": <burned>, "queued_ms": <wait for a worker>}``.
- Bounded concurrency: ``--workers`` threads burn, at most ``--queue`` requests wait for one;
  past that a request is answered 503 at once (no CPU burned).
- ``GET /healthz``: 200 "ok" from the accepting loop, never queued behind the burn, so a
  saturated pod stays Ready (readiness flapping under load would change what an HPA counts).
- Every response closes its connection: through a Service (kube-proxy) each request is then
  balanced on its own, as new pods appear, instead of sticking to the pod of a kept-alive
  connection.
- SIGTERM/SIGINT: after ``--shutdown-delay-seconds`` (default 0; a second signal cuts it short)
  stop accepting, let the requests in progress finish (up to ``--grace-seconds``), exit 0. One line is printed at start, with the address actually bound (``--port 0`` picks one).

One process burns at most about one core (the worker threads share the interpreter lock): give
its pods a CPU limit of at most 1 core and scale by pods. Standard library only (it ships in the
project image, which has no torch or Prophet).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class DemoAppSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    cpu_ms_per_request: float = 20.0
    workers: int = 2
    queue: int = 16
    grace_seconds: float = 10.0
    shutdown_delay_seconds: float = 0.0

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.cpu_ms_per_request <= 10_000:
            out.append(f"--cpu-ms-per-request {self.cpu_ms_per_request}: must be in [0, 10000] ms")
        if not 1 <= self.workers <= 256:
            out.append(f"--workers {self.workers}: must be in [1, 256]")
        if not 0 <= self.queue <= 100_000:
            out.append(f"--queue {self.queue}: must be in [0, 100000] (0 = shed whatever finds no free worker)")
        if not 0 <= self.port <= 65535:
            out.append(f"--port {self.port}: must be in [0, 65535] (0 = any free port)")
        if self.grace_seconds < 0:
            out.append(f"--grace-seconds {self.grace_seconds}: must be >= 0")
        if not 0 <= self.shutdown_delay_seconds <= 300:
            out.append(f"--shutdown-delay-seconds {self.shutdown_delay_seconds}: must be in [0, 300]")
        return out


def burn_cpu(cpu_ms: float) -> float:
    """Busy-loop until this thread has used ``cpu_ms`` of CPU time; returns the CPU ms used.

    The loop is timed by the thread's own CPU clock, not the wall clock: a request costs the same
    CPU whether the pod is idle or throttled, and only its latency changes (as in a real
    service). The inner chunk is small (a few microseconds) so the overshoot stays far below 1 ms.
    """
    start = time.thread_time()
    deadline = start + cpu_ms / 1000.0
    x = 0
    while time.thread_time() < deadline:
        for i in range(200):
            x ^= i * i
    return (time.thread_time() - start) * 1000.0


def _response(status: int, reason: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("ascii") + body


class DemoApp:
    """The server: an asyncio loop accepts, parses and answers /healthz and 503s itself; the CPU
    burn runs in a fixed pool of worker threads. ``in_flight`` counts requests burning or waiting,
    which bounds the pool's queue at ``workers + queue``."""

    def __init__(self, settings: DemoAppSettings):
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="demo-app-worker")
        self.in_flight = 0
        self.served = 0
        self.shed = 0
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._handle, self.settings.host, self.settings.port,
                                                  limit=MAX_HEADER_BYTES, backlog=1024)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def stop(self) -> None:
        """Stop accepting, then wait (bounded by the grace period) for the requests in progress."""
        if self._server is not None:
            self._server.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.settings.grace_seconds)
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            path = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT_SECONDS)
            writer.write(await self._answer(path) if path is not None
                         else _response(400, "Bad Request", b'{"error": "malformed request"}'))
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or never sent a request: nothing to answer
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _answer(self, path: str) -> bytes:
        if path.split("?", 1)[0] == "/healthz":
            return _response(200, "OK", b"ok\n", "text/plain")
        s = self.settings
        if self.in_flight >= s.workers + s.queue:
            self.shed += 1
            return _response(503, "Service Unavailable", b'{"error": "overloaded: queue full"}')
        self.in_flight += 1
        queued_at = time.monotonic()
        try:
            queued_ms, cpu_ms = await asyncio.get_running_loop().run_in_executor(
                self.pool, _timed_burn, queued_at, s.cpu_ms_per_request)
        finally:
            self.in_flight -= 1
        self.served += 1
        body = json.dumps({"cpu_ms": round(cpu_ms, 3), "queued_ms": round(queued_ms, 3)}).encode()
        return _response(200, "OK", body)


def _timed_burn(queued_at: float, cpu_ms: float) -> tuple[float, float]:
    return (time.monotonic() - queued_at) * 1000.0, burn_cpu(cpu_ms)


async def _read_request(reader: asyncio.StreamReader) -> str | None:
    """The request target of one HTTP/1.x request (its body, if any, read and dropped so closing
    the connection does not reset it before the client reads the answer); None if malformed."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return None
    if not 0 <= length <= MAX_BODY_BYTES:
        return None
    if length:
        await reader.readexactly(length)
    return parts[1]


async def serve(settings: DemoAppSettings, ready_line: bool = True) -> int:
    app = DemoApp(settings)
    host, port = await app.start()
    stop, stop_now = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal skips the shutdown delay
        loop.add_signal_handler(sig, lambda: (stop_now if stop.is_set() else stop).set())
    if ready_line:
        print(f"foresight demo-app: serving http://{host}:{port}/ (cpu-ms-per-request {settings.cpu_ms_per_request:g}, "
              f"workers {settings.workers}, queue {settings.queue}; /healthz)", flush=True)
    await stop.wait()
    if settings.shutdown_delay_seconds:
        # A pod's endpoints are removed only some time after its SIGTERM: serving on for a moment
        # keeps a scale-down from showing up as refused connections in the measurements.
        print(f"foresight demo-app: stopping in {settings.shutdown_delay_seconds:g} s", flush=True)
        try:
            await asyncio.wait_for(stop_now.wait(), settings.shutdown_delay_seconds)
        except asyncio.TimeoutError:
            pass
    await app.stop()
    print(f"foresight demo-app: stopped after {app.served} requests served, {app.shed} shed", flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo-app", help="a small HTTP service that burns a set CPU time per request (load tests)",
                       description=__doc__.split("\n\n", 1)[0],
                       epilog="example: foresight demo-app --port 8080 --cpu-ms-per-request 20 --workers 2 --queue 16")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 in a pod)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 = any free port, printed at start)")
    p.add_argument("--cpu-ms-per-request", type=float, default=20.0,
                   help="CPU time each request burns, in ms of this thread's CPU (default 20)")
    p.add_argument("--workers", type=int, default=2, help="threads burning CPU at once (default 2)")
    p.add_argument("--queue", type=int, default=16,
                   help="requests that may wait for a worker; past it requests get 503 at once (default 16)")
    p.add_argument("--grace-seconds", type=float, default=10.0,
                   help="on SIGTERM, how long requests in progress may take to finish (default 10)")
    p.add_argument("--shutdown-delay-seconds", type=float, default=0.0,
                   help="on SIGTERM, keep accepting this long first, while the Service drops the pod (default 0)")
    p.set_defaults(func=run_demo_app)


def run_demo_app(args: argparse.Namespace) -> int:
    from core.errors import UserError

    settings = DemoAppSettings(host=args.host, port=args.port, cpu_ms_per_request=args.cpu_ms_per_request,
                               workers=args.workers, queue=args.queue, grace_seconds=args.grace_seconds,
                               shutdown_delay_seconds=args.shutdown_delay_seconds)
    problems = settings.problems()
    if problems:
        raise UserError("; ".join(problems))
    try:
        return asyncio.run(serve(settings))
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); "
                        f"pick a free --port (0 = any) or another --host") from exc


def main(argv: list[str] | None = None) -> int:
    """``python -m foresight.demoapp``: the same command without the whole CLI's imports."""
    parser = argparse.ArgumentParser(prog="foresight demo-app")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["demo-app", *(sys.argv[1:] if argv is None else argv)])
    from core.errors import UserError
    try:
        return args.func(args)
    except UserError as exc:
        print(f"foresight demo-app: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
