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
]


from forecaster.errors import UserError as CommandError  # noqa: E402  (one error type for all parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foresight",
        description="Predictive autoscaling for Kubernetes: forecasts, HPA external metrics, warm pools.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that part is not built yet
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
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
