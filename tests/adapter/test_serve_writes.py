"""The adapter's HTTP protocol writes each small response (head and body) in one transport
write: one TLS record and one send() per HPA request instead of two, with the bytes on the
wire unchanged. Driven here through uvicorn's own protocol over a transport that records."""

from __future__ import annotations

import asyncio
import json
import time

import uvicorn
from uvicorn.server import ServerState

from adapter.app import create_app
from adapter.server import TLSHttpProtocol, _HeadWithBody
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast

PATH = f"{EXT}/namespaces/shop/predicted_cpu_load_ratio?labelSelector=workload%3Dcheckout"


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8443)}.get(name, default)

    def write(self, data) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def serve_connection(raw: bytes) -> list[bytes]:
    """The writes the adapter's protocol makes for one connection that sends ``raw``."""
    store = MemoryForecastStore()
    store.publish(sample_forecast(now=time.time()))
    app = create_app(None, store)

    async def run() -> list[bytes]:
        config = uvicorn.Config(app, http=TLSHttpProtocol, lifespan="off", log_level="warning")
        config.load()
        state = ServerState()
        proto = TLSHttpProtocol(config=config, server_state=state, app_state={})
        transport = Recording()
        proto.connection_made(transport)
        proto.data_received(raw)
        for _ in range(200):  # the requests' tasks, pipelined ones started as the previous completes
            if not state.tasks and proto.cycle is not None and proto.cycle.response_complete and not proto.pipeline:
                break
            await asyncio.sleep(0.01)
        proto.connection_lost(None)
        return transport.writes

    return asyncio.run(run())


def request(method: str = "GET", path: str = PATH, extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nhost: adapter\r\n{extra}\r\n".encode()


def test_a_metric_response_is_one_write_with_its_head_and_its_body():
    writes = serve_connection(request())
    assert len(writes) == 1
    head, _, body = writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: %d" % len(body) in head
    assert json.loads(body)["items"][0]["metricLabels"]["workload"] == "checkout"


def test_keep_alive_and_pipelined_requests_each_get_one_complete_write_in_order():
    writes = serve_connection(request() + request(path="/healthz") + request(path=f"{EXT}/namespaces/shop/nope"))
    assert [w.split(b"\r\n", 1)[0] for w in writes] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found"]
    for w in writes:
        head, _, body = w.partition(b"\r\n\r\n")
        assert b"content-length: %d" % len(body) in head


def test_a_head_request_gets_its_head_without_waiting_for_a_body():
    writes = serve_connection(request("HEAD"))
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"\r\n\r\n")


def test_an_interim_100_continue_goes_out_at_once_and_a_held_head_at_close():
    sink = Recording()
    t = _HeadWithBody(sink)
    t.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert sink.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # the client waits for it to send the body
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert len(sink.writes) == 1  # the head waits for the body
    t.write(b"{}")
    assert sink.writes[1] == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    t.write(b"more")  # later writes pass as they come
    assert sink.writes[2] == b"more" and t.is_closing() is False
    aborted = Recording()
    t = _HeadWithBody(aborted)
    t.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    t.close()  # an app that fails after starting its response: the head still goes out before the close
    assert aborted.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"] and aborted.closed
