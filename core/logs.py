"""Log lines of every long-running command: text (the default) or JSON (``--log-format json``).

JSON is one object per line on stderr: ``time`` (RFC 3339, UTC, milliseconds), ``level``,
``logger``, ``message``, then every extra field the call passed
(``log.info("refreshed", extra={"series": sid, "seconds": 0.4})``), and ``exc`` with the
traceback when there is one. Log shippers (Loki, Fluent Bit, Vector) index those fields
without a parsing rule per component.

uvicorn (the adapter, the warm-pool API) configures its own loggers when it starts, in each
worker process too; ``uvicorn_log_config()`` hands it the same formatter, and its access lines
carry ``client``, ``method``, ``path`` and ``status`` as fields.

It lives in core/ (below every room) because every part that starts uvicorn or logs
needs it and may import only downwards.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
# uvicorn adds an ANSI-coloured copy of each message for its own formatter: noise here
_DROPPED = {"color_message"}
_HANDLER_NAME = "foresight"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call added with ``extra=``, in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and k not in _DROPPED and not k.startswith("_")}


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """uvicorn's access log passes (client, method, path, http version, status) as args."""
    if record.name != "uvicorn.access" or not isinstance(record.args, tuple) or len(record.args) != 5:
        return {}
    client, method, path, http_version, status = record.args
    try:
        status = int(status)
    except (TypeError, ValueError):
        pass
    return {"client": client, "method": method, "path": path, "http_version": http_version, "status": status}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (no newline inside: tracebacks are escaped in ``exc``)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # logging's name
        t = time.gmtime(record.created)
        return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for k, v in {**_access_fields(record), **extra_fields(record)}.items():
            out.setdefault(k, v)  # an extra called "message" must not hide the message
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Today's text lines, with any extra fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = extra_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}" for k, v in extras.items())
        return line


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"--log-format {fmt!r}: must be one of {', '.join(FORMATS)}")
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure(fmt: str = "text", level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (stderr) in format ``fmt``, replacing the handler a
    previous call installed. Handlers someone else added (pytest's capture) are left alone."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME:
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)


def json_enabled() -> bool:
    return any(h.get_name() == _HANDLER_NAME and isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def uvicorn_log_config() -> dict | None:
    """uvicorn's ``log_config`` matching the process's format: None (uvicorn's own) for text,
    else a dictConfig that sends uvicorn's loggers, and the root logger of each worker
    process uvicorn spawns, through ``JsonFormatter``."""
    if not json_enabled():
        return None
    level = logging.getLevelName(logging.getLogger().level)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        # named like configure()'s handler, so a second server in the process still sees JSON on
        "handlers": {_HANDLER_NAME: {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"handlers": [_HANDLER_NAME], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [_HANDLER_NAME], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": [_HANDLER_NAME], "level": "INFO", "propagate": False},
        },
    }
