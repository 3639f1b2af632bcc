"""The ``foresight`` command.

Each part of the project registers its own sub-commands from a light module (no heavy
imports at module level, so ``foresight --help`` stays fast):

    forecaster.cli        history
    forecaster.cli_models backtest, train
    adapter.cli           serve
    warmpool.cli          warmpool ...
    replay.cli            replay
    kubeoperator.cli      operator
    foresight.up          up
    foresight.loaddriver  load, demo-app

A listed module that cannot be imported is an error at start-up that names it (never a silently
missing sub-command).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES = [
    "foresight.up",
    "forecaster.cli",
    "forecaster.cli_models",
    "adapter.cli",
    "warmpool.cli",
    "replay.cli",
    "kubeoperator.cli",
    "foresight.loaddriver",
]


from core.errors import UserError as CommandError  # noqa: E402  (one error type for all parts)
from core.logs import FORMATS, configure as configure_logging  # noqa: E402

LOG_FORMAT_HELP = "log lines as text (default) or JSON, one object per line on stderr"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foresight",
        description="Predictive autoscaling for Kubernetes: forecasts, HPA external metrics, warm pools.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--log-format", choices=FORMATS, default="text", help=LOG_FORMAT_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        _command_module(name).register(sub)
    _add_log_format(sub)
    return parser


class MissingCommandModule(ImportError):
    """A part of foresight that registers sub-commands is not installed (an image that left a
    package out): fail at start-up with its name, not later with "invalid choice"."""


def _command_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        package = name.partition(".")[0]
        if exc.name in (name, package):
            raise MissingCommandModule(
                f"foresight: the sub-commands of {name!r} cannot be registered: module {exc.name!r} is not "
                f"installed (an image or install that left out the {package}/ package? "
                f"`pip install .` installs every part)") from exc
        raise


def _add_log_format(sub: argparse._SubParsersAction) -> None:
    """``--log-format`` after any (nested) sub-command too: ``foresight serve --log-format json``
    is where a Deployment's args put it. SUPPRESS keeps a sub-command that was not given the
    flag from resetting one given before it."""
    for p in {id(p): p for p in sub.choices.values()}.values():  # aliases share a parser
        if not any("--log-format" in a.option_strings for a in p._actions):
            p.add_argument("--log-format", choices=FORMATS, default=argparse.SUPPRESS, help=LOG_FORMAT_HELP)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                _add_log_format(a)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except MissingCommandModule as exc:
        print(exc, file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    configure_logging(args.log_format, logging.DEBUG if args.verbose else logging.INFO)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except CommandError as exc:
        print(f"foresight {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
