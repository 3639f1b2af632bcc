"""The dashboard renders its charts in a real headless Chromium (screenshot pixel check)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from adapter.app import create_app
from adapter.dashboard import BAND_COLOR, BAND_OPACITY, OBSERVED_COLOR
from adapter.dashboard_svg import DESIRED_COLOR, SERVED_COLOR, WOULD_COLOR
from adapter.observemode import ObserveView
from adapter.server import serve_in_thread
from adapter.tls import ensure_serving_cert
from core.store import MemoryForecastStore
from forecaster.servingpolicy import ServingPolicy
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


def _dom(url: str, profile) -> str:
    """The page as Chromium left it after its script ran (local clock times, "ago" texts)."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--ignore-certificate-errors", f"--user-data-dir={profile}",
           "--virtual-time-budget=2000", "--dump-dom", url]
    return subprocess.run(cmd, check=True, timeout=120, capture_output=True, text=True, env=dict(os.environ, TZ="Asia/Kolkata")).stdout


def test_a_card_reads_at_a_glance_in_headless_chromium(tmp_path):
    """A real adapter app with a published forecast and policy, and an Observe-mode line: the
    chart's time axis, its legend, the policy sentence and relative times as the viewer sees them."""
    now = time.time()
    fc = sample_forecast("shop", "checkout", now=now - 170, p90=tuple(3.0 + 0.2 * k for k in range(30)), observed=2.0)
    pol = ServingPolicy(quantile="p90", headroom=1.15, gap_edges=(0.3,), headrooms=(1.0, 1.15),
                        fallback_headrooms=(1.0, 1.1), reason="over the last 96 intervals, p90 x1/1.15 cost 40 pod-minutes")
    store = MemoryForecastStore()
    store.publish(replace(fc, policy=pol.to_dict()))
    store.publish(sample_forecast("shop", "cart", now=now, p90=(1.0, 1.2, 1.5, 1.4, 1.3, 1.2), observed=1.0))
    app = create_app(None, store)
    view = ObserveView(kube=None)
    view._view = {"shop/cart": {"autoscaler": "cart", "mode": "Observe", "observe": {
        "wouldHaveReplicas": 3, "actualReplicas": 2, "underCapacityMinutes": {"wouldHave": 0, "actual": 4},
        "since": "2026-12-01T00:00:00Z", "recent": [[now - 600 + 60 * k, 2 + (k > 4), 2] for k in range(10)]}}}
    app.state.core.observe_view = view
    crt, key = ensure_serving_cert(tmp_path / "certs")
    h = serve_in_thread(app, "127.0.0.1", free_port(), str(crt), str(key))
    try:
        dom = _dom(h.url + "/", tmp_path / "profile-dom")
        # kept in pytest's tmp dir (e.g. /tmp/pytest-of-$USER/pytest-current/test_a_card_reads*/card.png) to look at
        img = screenshot(h.url + "/", tmp_path / "card.png", tmp_path / "profile-shot")
    finally:
        h.stop()
    # the policy in words, from the published policy (not its numbers in a row)
    assert "Serves the p90 forecast plus 15% when demand sits more than 30% below its recent peak, otherwise as is." in dom
    assert "Observe mode: would have <b>3</b>" in dom
    # relative times counted on the adapter's clock: the forecast published 2.8 min ago reads "3 min ago"
    assert re.search(r'class="ago"[^>]*>3 min ago<', dom), dom[:2000]
    # the time axis and clock times in the viewer's zone (TZ=Asia/Kolkata, UTC+5:30), not UTC
    assert re.search(r"Asia/(Kolkata|Calcutta)</tspan>", dom) and "UTC</tspan>" not in dom
    local = datetime.fromtimestamp(now - 170, timezone(timedelta(hours=5, minutes=30))).strftime("%H:%M")
    assert f">{local}<" in dom
    for label in ("CPU cores", "replicas", ">now<"):
        assert label in dom
    for entry in ("observed demand", "forecast band p50..p90", "forecast mean", "served to the HPA",
                  "actual replicas", "would have (Observe mode", "ready pods now (4)", "desired: the HPA heads for"):
        assert entry in dom, entry
    assert pixels_near(img, SERVED_COLOR) > 50 and pixels_near(img, WOULD_COLOR) > 50
    assert pixels_near(img, DESIRED_COLOR) > 50
