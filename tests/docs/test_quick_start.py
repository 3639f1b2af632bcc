"""The README's quick start, run as written: `foresight up` (what `make run` starts) prints the
table the README shows, and the URLs the README tells a new user to open answer.

Only the port changes (a free one instead of 8443, which another run may hold) and the warm pool
is left out (tests/up covers it)."""

from __future__ import annotations

import json
import re
import shlex
import ssl
import subprocess
import sys
import time
import urllib.request

from tests.docs.conftest import ROOT
from tests.stack import free_port

README_PORT = "8443"


def _readme_curls() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(line)[-1] for line in re.findall(r"^curl -k .*$", quick, re.M)]


def _get(url: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # foresight up's self-signed certificate, as `curl -k`
    with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
        return r.status, r.read()


def test_the_readme_quick_start_answers_as_written(tmp_path):
    curls = _readme_curls()
    assert curls and all(f"127.0.0.1:{README_PORT}" in u for u in curls), curls
    port = free_port()
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "foresight", "up", "--port", str(port), "--no-warmpool",
                                 "--no-live", "--cert-dir", str(tmp_path / "certs")],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        header = (ROOT / "README.md").read_text().split("WORKLOAD ", 1)[1].split("\n", 1)[0]
        deadline = time.monotonic() + 240
        while "WORKLOAD " + header not in log.read_text():  # the first table: forecasts are served
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert f"dashboard:  https://127.0.0.1:{port}/" in log.read_text()
        for url in curls:
            status, body = _get(url.replace(f":{README_PORT}", f":{port}"))
            assert status == 200
            item = json.loads(body)["items"][0]
            assert item["metricName"] == "predicted_cpu_load_ratio" and item["metricLabels"]["workload"] == "vm-618849"
        status, page = _get(f"https://127.0.0.1:{port}/")
        assert status == 200 and b"vm-618849" in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)
