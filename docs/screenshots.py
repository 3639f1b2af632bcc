"""Pictures for the manual, taken from the product itself in headless Chromium.

    python docs/screenshots.py            # writes docs/img/*.png
    python docs/screenshots.py --out DIR

It runs what a user runs:
  - `foresight up` on the bundled traces (what `make run` starts), waits until every workload has
    a forecast, and photographs the dashboard (docs/img/dashboard.png);
  - `foresight replay` on one bundled trace, and photographs its report.html (docs/img/replay-report.png).
Chromium is Debian's (/usr/bin/chromium, installed by `make deps`), driven with the same flags as
tests/adapter/test_dashboard_browser.py. PNGs are reduced to a 256-colour palette to stay small.
Takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BUNDLED = ROOT / "foresight" / "data" / "traces.csv.gz"
REPLAY_SERIES = "azurev1-737498"  # a daily rise the predictive HPA meets early
WAIT_SECONDS = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # foresight up's self-signed certificate, on loopback
    with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
        return json.loads(r.read())


def wait_for_forecasts(base: str, proc: subprocess.Popen, want: int) -> None:
    """Until every workload of `foresight up` has a forecast served from it (not a placeholder)."""
    deadline = time.monotonic() + WAIT_SECONDS
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"foresight up exited with {proc.returncode} before serving")
        try:
            body = get_json(base + "/api/v1/forecasts")
            items = body.get("items", body) if isinstance(body, dict) else body
            if len(items) >= want:
                return
            last = f"{len(items)} of {want} workloads"
        except OSError as exc:
            last = str(exc)
        time.sleep(1)
    raise SystemExit(f"no forecasts from foresight up within {WAIT_SECONDS} s (last: {last})")


def shoot(url: str, out: Path, profile: Path, size: str) -> None:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--ignore-certificate-errors", f"--user-data-dir={profile}", f"--screenshot={out}",
           f"--window-size={size}", "--hide-scrollbars", "--virtual-time-budget=5000", url]
    subprocess.run(cmd, check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={"TZ": "UTC", "PATH": "/usr/bin:/bin", "HOME": str(profile)})
    shrink(out)


def shrink(path: Path) -> None:
    """A 256-colour palette: charts and text survive it, the file is a third of the size."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def dashboard(out: Path, tmp: Path) -> Path:
    port, pool_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "foresight", "up", "--port", str(port), "--warmpool-port", str(pool_port),
           "--no-live", "--cert-dir", str(tmp / "certs"), "--no-warmpool"]
    log = open(tmp / "up.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"https://127.0.0.1:{port}"
        wait_for_forecasts(base, proc, want=4)
        time.sleep(2)  # one more refresh draws the served-value line ahead
        path = out / "dashboard.png"
        shoot(base + "/", path, tmp / "profile-dash", "1280,1100")
        return path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def replay_report(out: Path, tmp: Path) -> Path:
    rdir = tmp / "replay"
    # the data path relative to the checkout: the report prints it, and the picture should not carry a host path
    subprocess.run([sys.executable, "-m", "foresight", "replay", "--data", str(BUNDLED.relative_to(ROOT)),
                    "--series", REPLAY_SERIES,
                    "--train-days", "14", "--replay-days", "2", "--out", str(rdir)],
                   cwd=ROOT, check=True, timeout=600, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = out / "replay-report.png"
    shoot((rdir / "report.html").as_uri(), path, tmp / "profile-replay", "1280,2700")  # down to the whole-replay and zoom plots
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print("chromium is not installed: `make deps` installs it (Debian package chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="foresight-shots-") as t:
        tmp = Path(t)
        for p in (dashboard(args.out, tmp), replay_report(args.out, tmp)):
            print(f"{p} ({p.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
