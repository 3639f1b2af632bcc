"""``foresight demo-app``: CPU per request, load shedding past the queue, /healthz, SIGTERM.

Orderings and ratios only: the machine may be loaded, so nothing here bounds wall time."""

from __future__ import annotations

import json
import signal
import socket
import sys

from foresight.demoapp import burn_cpu
from tests.demoapp.conftest import get, running_demo_app


def _process_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of the process, from /proc (what a CPU limit throttles)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_of_requests(cpu_ms: str, n: int = 40) -> float:
    with running_demo_app("--cpu-ms-per-request", cpu_ms, "--workers", "1") as app:
        get(app.port)  # first request warms the worker thread up
        before = _process_cpu_seconds(app.pid)
        bodies = [get(app.port) for _ in range(n)]
        used = _process_cpu_seconds(app.pid) - before
    assert all(status == 200 for status, _ in bodies)
    assert all(json.loads(body)["cpu_ms"] >= float(cpu_ms) for _, body in bodies)
    return used


def test_a_20_ms_request_costs_the_process_many_times_the_cpu_of_a_2_ms_one():
    heavy, light = _cpu_of_requests("20"), _cpu_of_requests("2")
    assert heavy >= 40 * 0.020 * 0.9  # at least (nearly) what was asked, counted by the kernel
    assert heavy > 5 * light


def test_burn_cpu_counts_this_threads_cpu_time_not_wall_time():
    import time

    cpu_before = time.thread_time()
    used_ms = burn_cpu(15)
    assert used_ms >= 15
    assert (time.thread_time() - cpu_before) * 1000 >= 15


def _open_connections(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(n)]


def _status_of(sock: socket.socket) -> int:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    sock.close()
    return int(data.split(b" ", 2)[1])


def test_requests_past_the_workers_and_queue_are_shed_with_503_while_healthz_answers():
    with running_demo_app("--cpu-ms-per-request", "400", "--workers", "1", "--queue", "2") as app:
        # Connect first, then send every request at once: they all find the one worker busy.
        socks = _open_connections(app.port, 10)
        for s in socks:
            s.sendall(b"GET / HTTP/1.1\r\nHost: demo\r\n\r\n")
        health = get(app.port, "/healthz")  # while the worker burns and the queue is full
        statuses = [_status_of(s) for s in socks]
    assert health == (200, b"ok\n")
    assert statuses.count(200) >= 1 and statuses.count(503) >= 1
    assert statuses.count(200) <= 3  # one burning + two queued, the rest shed
    assert sorted(set(statuses)) == [200, 503]


def test_healthz_answers_ok():
    with running_demo_app("--cpu-ms-per-request", "5") as app:
        assert get(app.port, "/healthz") == (200, b"ok\n")
        assert get(app.port, "/healthz?probe=readiness")[0] == 200


def test_the_cli_command_prints_one_start_line_and_stops_cleanly_on_sigterm():
    with running_demo_app("--cpu-ms-per-request", "1", command=(sys.executable, "-m", "foresight", "demo-app")) as app:
        assert get(app.port)[0] == 200
        app.send_signal(signal.SIGTERM)
        assert app.wait(timeout=30) == 0
        out = app.stdout.read()
    assert "stopped after 1 requests served, 0 shed" in out


def test_sigterm_lets_a_request_in_progress_finish():
    import time

    with running_demo_app("--cpu-ms-per-request", "300", "--workers", "1") as app:
        before = _process_cpu_seconds(app.pid)
        sock = socket.create_connection(("127.0.0.1", app.port), timeout=60)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: demo\r\n\r\n")
        for _ in range(6000):  # until the worker is burning, i.e. the request is in progress
            if _process_cpu_seconds(app.pid) - before >= 0.05:
                break
            time.sleep(0.01)
        app.send_signal(signal.SIGTERM)
        assert _status_of(sock) == 200
        assert app.wait(timeout=30) == 0


def test_with_a_shutdown_delay_it_still_answers_after_sigterm():
    with running_demo_app("--cpu-ms-per-request", "1", "--shutdown-delay-seconds", "30") as app:
        app.send_signal(signal.SIGTERM)
        assert app.stdout.readline().startswith("foresight demo-app: stopping in 30 s")
        assert get(app.port)[0] == 200  # after SIGTERM, within the delay: still served
        app.send_signal(signal.SIGTERM)  # a second one stops it now
        assert app.wait(timeout=30) == 0
