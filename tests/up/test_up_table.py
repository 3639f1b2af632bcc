"""The live table of ``foresight up``: rows from forecasts (pure, on a fixed clock), rendering,
redraw in place on a terminal, and appended blocks when stdout is not a terminal."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

from foresight.uptable import Board, LiveTable, Row, render, table_rows, title
from tests.adapter.helpers import sample_forecast

NOW = 1_800_000_000.0


def _rows(**forecasts):
    ids = ["shop/fresh", "shop/stale", "shop/fallback", "shop/none"]
    return {r.workload: r for r in table_rows(ids, {f"shop/{k}": v for k, v in forecasts.items()}, NOW)}


def test_a_fresh_forecast_serves_its_p90_over_the_lead_window_and_wants_the_pods_for_it():
    rows = _rows(fresh=sample_forecast("shop", "fresh", now=NOW, p90=(3.0, 3.0, 3.0), observed=2.0, ready_pods=4,
                                       request=0.5, age=30.0))
    r = rows["shop/fresh"]
    assert (r.model, r.age_seconds, r.source, r.ready) == ("ets", 30.0, "forecast", 4)
    assert r.served_cores == 3.0 and r.observed_cores == 2.0
    assert r.wanted == 9  # ceil(3.0 cores / (0.7 x 0.5 cores per pod))


def test_stale_and_fallback_forecasts_serve_observed_demand_and_say_why():
    rows = _rows(stale=sample_forecast("shop", "stale", now=NOW, observed=2.0, age=600.0),
                 fallback=sample_forecast("shop", "fallback", now=NOW, observed=1.5, status="fallback", reason="no fit"))
    assert (rows["shop/stale"].source, rows["shop/stale"].served_cores) == ("observed (stale)", 2.0)
    assert (rows["shop/fallback"].source, rows["shop/fallback"].served_cores) == ("observed (fallback)", 1.5)
    none = rows["shop/none"]
    assert (none.model, none.age_seconds, none.served_cores, none.source, none.ready, none.wanted) == (
        "-", None, None, "no data", None, None)


def test_render_aligns_the_columns_and_shows_unknowns_as_a_dash_never_nan():
    rows = [Row("shop/api", "ets", 75.0, served_cores=3.25, observed_cores=1.2, source="forecast", ready=4, wanted=10),
            Row("shop/new", "-", None, None, None, "no data", None, None)]
    lines = render(rows, title(NOW, 15, 60))
    assert lines[0].startswith("foresight up ") and "refresh every 15 s" in lines[0]
    header, api, new = lines[1:]
    assert header.split() == ["WORKLOAD", "MODEL", "AGE", "OBSERVED", "SERVED", "SOURCE", "READY", "WANT"]
    assert api.split() == ["shop/api", "ets", "75s", "1.200", "3.250", "forecast", "4", "10"]
    assert new.split() == ["shop/new", "-", "-", "-", "-", "no", "data", "-", "-"]
    assert len({len(header), len(api), len(new)}) == 1
    # every column starts where its header does
    for name in ("AGE", "SERVED", "READY"):
        col = header.index(name) + len(name)  # right-aligned: ends under the header's end
        assert api[col - 1] != " " and new[col - 1] == "-"
    assert "nan" not in "\n".join(lines).lower()
    assert render([Row("a/b", "ets", 7300.0, 0.0, 0.0, "forecast", 1, 1)], "t")[2].split()[2] == "2h"


def test_on_a_terminal_the_table_is_redrawn_in_place():
    out = io.StringIO()
    t = LiveTable(out, live=True)
    t.show(["title", "A", "B"])
    t.show(["title", "A2"])
    first, second = out.getvalue().split("\x1b[3F\x1b[J")  # up 3 lines (the first table), clear below
    assert first == "title\nA\nB\n" and second == "title\nA2\n"
    t.show(["x"])
    assert out.getvalue().endswith("\x1b[2F\x1b[Jx\n")


def test_a_line_wider_than_the_terminal_is_cut_so_the_redraw_lands_on_the_table():
    out = io.StringIO()
    LiveTable(out, live=True, columns=10).show(["0123456789abc", "short"])
    assert out.getvalue() == "012345678\nshort\n"


def test_off_a_terminal_each_table_is_appended_as_plain_lines():
    out = io.StringIO()
    t = LiveTable(out, live=False)
    t.show(["title", "A"])
    t.show(["title", "A2"])
    assert out.getvalue() == "title\nA\n\ntitle\nA2\n\n"


def test_up_piped_appends_a_plain_table_per_refresh(tmp_path):
    """stdout is a pipe here: no escape codes, one table per refresh, ages growing between them."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "foresight", "up", "--no-serve", "--no-warmpool", "--models", "persistence",
         "--refresh-seconds", "2", "--duration", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tables, out = [], []
    try:
        deadline = time.time() + 240
        while len(tables) < 3 and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if line.startswith("foresight up ") and "refresh every 2 s" in line:
                tables.append([])
            elif tables and line.startswith("demo/"):
                tables[-1].append(line.split())
    finally:
        proc.terminate()
        proc.wait(30)
    text = "".join(out)
    assert len(tables) >= 3, text[-3000:]
    assert "\x1b[" not in text
    assert all(len(t) == 4 for t in tables[:-1]), tables
    for row in tables[1]:
        assert row[5] == "forecast" and re.fullmatch(r"\d+s", row[2]), row


def test_the_board_reads_the_store_at_each_draw_and_shows_no_data_while_it_is_down(caplog):
    from core.store import MemoryForecastStore

    class Flaky(MemoryForecastStore):
        down = False

        def latest_many(self, ids):
            if self.down:
                raise ConnectionError("redis refused")
            return super().latest_many(ids)

    store = Flaky()
    store.publish(sample_forecast("shop", "api", now=NOW, p90=(3.0, 3.0, 3.0)))
    out = io.StringIO()
    board = Board(store, ["shop/api"], LiveTable(out, live=False), lambda now: "t")
    board.draw(NOW + 5)
    assert out.getvalue().splitlines()[2].split()[:6] == ["shop/api", "ets", "5s", "2.000", "3.000", "forecast"]
    store.down = True
    with caplog.at_level("WARNING", logger="foresight.up"):
        board.draw(NOW + 6)
        board.draw(NOW + 7)
    assert out.getvalue().splitlines()[-2].split()[-5:] == ["-", "no", "data", "-", "-"]
    assert [r.getMessage() for r in caplog.records].count("reading forecasts for the table: ConnectionError: redis refused") == 1
