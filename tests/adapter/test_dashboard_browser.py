"""The dashboard renders its charts in a real headless Chromium (screenshot pixel check)."""

from __future__ import annotations

import shutil
import subprocess
import time

import numpy as np
import pytest

from adapter.app import create_app
from adapter.dashboard import BAND_COLOR, BAND_OPACITY, OBSERVED_COLOR
from adapter.server import serve_in_thread
from adapter.tls import ensure_serving_cert
from forecaster.store import MemoryForecastStore
from tests.adapter.helpers import sample_forecast
from tests.stack import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.browser


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)


def screenshot(url: str, out, profile) -> np.ndarray:
    import matplotlib.image as mpimg

    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--ignore-certificate-errors", f"--user-data-dir={profile}", f"--screenshot={out}",
        "--window-size=1280,900", "--hide-scrollbars", url,
    ]
    subprocess.run(cmd, check=True, timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    img = mpimg.imread(str(out))[..., :3]
    return img * 255.0 if img.max() <= 1.0 else img


def pixels_near(img: np.ndarray, color, tol: float = 40.0) -> int:
    rgb = _rgb(color) if isinstance(color, str) else color
    return int((np.abs(img - rgb).sum(axis=2) < tol).sum())


# the band's fill as drawn: the band colour at BAND_OPACITY over the white card
BAND_FILL = _rgb(BAND_COLOR) * BAND_OPACITY + 255.0 * (1 - BAND_OPACITY)


@pytest.fixture
def served(tmp_path):
    handles = []

    def serve(*forecasts):
        store = MemoryForecastStore()
        for fc in forecasts:
            store.publish(fc)
        crt, key = ensure_serving_cert(tmp_path / f"certs{len(handles)}")
        h = serve_in_thread(create_app(None, store), "127.0.0.1", free_port(), str(crt), str(key))
        handles.append(h)
        return h.url

    yield serve
    for h in handles:
        h.stop()


def test_the_dashboard_charts_render_in_headless_chromium(served, tmp_path):
    if not shutil.which("chromium") and not shutil.which(CHROMIUM):
        pytest.skip("chromium is not installed; `make test` installs it")
    now = time.time()
    charted = served(
        sample_forecast("shop", "checkout", now=now, p90=(3.0, 5.0, 6.0, 6.5, 6.0, 5.0), observed=2.0),
        sample_forecast("shop", "cart", now=now, p90=(1.0, 1.2, 1.5, 1.4, 1.3, 1.2), observed=1.0),
    )
    empty = served()
    with_charts = screenshot(charted + "/", tmp_path / "dash.png", tmp_path / "profile1")
    without = screenshot(empty + "/", tmp_path / "empty.png", tmp_path / "profile2")
    assert with_charts.shape[:2] == (900, 1280)
    band, observed = pixels_near(with_charts, BAND_FILL), pixels_near(with_charts, OBSERVED_COLOR)
    band0, observed0 = pixels_near(without, BAND_FILL), pixels_near(without, OBSERVED_COLOR)
    # the legend alone has a few coloured glyphs; two charts add thousands of band and line pixels
    assert band > band0 + 1500, (band, band0)
    assert observed > observed0 + 300, (observed, observed0)
