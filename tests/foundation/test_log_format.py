"""``--log-format json``: one JSON object per line (time, level, logger, message, extra fields)
for foresight's own loggers and for uvicorn's, in every long-running command; text stays the
default."""

from __future__ import annotations

import argparse
import io
import json
import logging
import logging.config
import re
import subprocess
import sys

import httpx
import pytest

from core.logs import JsonFormatter, TextFormatter, configure, formatter, uvicorn_log_config
from foresight.cli import build_parser
from tests.cluster.controlplane import ROOT, wait_for
from tests.stack import free_port

LONG_RUNNING = [["serve"], ["train"], ["up"], ["operator"], ["warmpool", "run"], ["backtest"], ["replay"]]


def _record(msg="refreshed %s", args=("shop/api",), exc_info=None, **extra) -> logging.LogRecord:
    r = logging.LogRecord("forecaster.training", logging.WARNING, __file__, 1, msg, args, exc_info)
    r.__dict__.update(extra)
    return r


def test_a_json_line_has_time_level_logger_message_and_the_extra_fields():
    line = JsonFormatter().format(_record(series="shop/api", seconds=0.25))
    assert "\n" not in line
    d = json.loads(line)
    assert list(d)[:4] == ["time", "level", "logger", "message"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["time"]), d["time"]
    assert (d["level"], d["logger"], d["message"]) == ("warning", "forecaster.training", "refreshed shop/api")
    assert (d["series"], d["seconds"]) == ("shop/api", 0.25)


def test_a_traceback_stays_on_the_one_line_and_an_extra_named_message_does_not_hide_the_message():
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = _record(exc_info=sys.exc_info(), message_id=7)
    rec.__dict__["message"] = "stale"  # what a logged record already formatted once carries
    line = JsonFormatter().format(rec)
    assert len(line.splitlines()) == 1
    d = json.loads(line)
    assert d["message"] == "refreshed shop/api" and d["message_id"] == 7
    assert "ValueError: bad\nvalue" in d["exc"]


def test_text_is_the_default_and_keeps_todays_lines_with_extras_appended():
    assert build_parser().parse_args(["serve"]).log_format == "text"
    line = TextFormatter().format(_record(series="shop/api", why="no data yet"))
    assert re.fullmatch(r"\S+ \S+ WARNING forecaster.training: refreshed shop/api series=shop/api why='no data yet'", line), line


def test_configure_replaces_the_root_handler_and_uvicorn_follows_the_format():
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    try:
        configure("json", logging.INFO, stream=out)
        logging.getLogger("foresight.up").info("redraw", extra={"rows": 4})
        assert [h.get_name() for h in root.handlers].count("foresight") == 1
        assert json.loads(out.getvalue()) | {"time": None} == {"time": None, "level": "info", "logger": "foresight.up",
                                                               "message": "redraw", "rows": 4}
        cfg = uvicorn_log_config()
        assert cfg["formatters"]["json"]["()"] == "core.logs.JsonFormatter"
        assert cfg["root"]["level"] == "INFO"  # uvicorn's worker processes log foresight's lines as JSON too
        logging.config.dictConfig(cfg)  # what uvicorn does with it: a second server still gets JSON
        assert uvicorn_log_config() == cfg
        configure("text", logging.INFO, stream=out)
        assert [h.get_name() for h in root.handlers].count("foresight") == 1  # replaced, not added
        assert uvicorn_log_config() is None  # uvicorn keeps its own text lines
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_an_unknown_format_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="--log-format 'xml': must be one of text, json"):
        formatter("xml")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--log-format", "xml"])


def _leaf(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser:
    for word in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@pytest.mark.parametrize("command", LONG_RUNNING, ids=[" ".join(c) for c in LONG_RUNNING])
def test_every_long_running_command_takes_log_format_before_or_after_its_name(command):
    parser = build_parser()
    leaf = _leaf(parser, command)
    assert any("--log-format" in a.option_strings for a in leaf._actions), command
    required = [a for a in leaf._actions if a.required and a.option_strings]
    filler = [x for a in required for x in (a.option_strings[0], "x")]
    assert parser.parse_args([*command, *filler, "--log-format", "json"]).log_format == "json"
    assert parser.parse_args(["--log-format", "json", *command, *filler]).log_format == "json"


def test_foresight_serve_logs_json_lines_for_uvicorn_and_every_request(tmp_path):
    """--access-log alone (no -v) logs every request."""
    port = free_port()
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "foresight", "serve", "--store=memory://", "--plain-http", "--host=127.0.0.1",
             f"--port={port}", "--access-log", "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=f, cwd=ROOT)
    try:
        wait_for("foresight serve", lambda: proc.poll() is None and httpx.get(
            f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200, timeout=60, detail=err.read_text)
        assert httpx.get(f"http://127.0.0.1:{port}/no-such-path", timeout=5).status_code == 404
    finally:
        proc.terminate()
        proc.wait(30)
    lines = [line for line in err.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["logger"] == "uvicorn.error" and "Uvicorn running" in r["message"] for r in records)
    access = {(r["method"], r["path"], r["status"]) for r in records if r["logger"] == "uvicorn.access"}
    assert {("GET", "/healthz", 200), ("GET", "/no-such-path", 404)} <= access
