"""A real demo app in its own process on loopback (what a pod runs), started per test."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest


@contextmanager
def running_demo_app(*args: str, command: tuple[str, ...] = (sys.executable, "-m", "foresight.demoapp")):
    proc = subprocess.Popen([*command, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()  # the one start line, printed once it listens
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, f"no start line from the demo app: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        proc.port = int(match.group(1))
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def get(port: int, path: str = "/", timeout: float = 30.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture
def demo_app():
    return running_demo_app
