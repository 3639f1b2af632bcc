"""ast.parse for the house-rule tests, safe beside background threads.

CPython 3.11.7 keeps the AST converter's recursion counter in interpreter state, so a parse on
another thread at the same moment (a traceback being formatted there parses source) can make
this one fail with "SystemError: AST constructor recursion depth mismatch" (gh-106905, fixed in
3.11.8). The race is transient: the same parse succeeds when repeated.
"""

from __future__ import annotations

import ast
from pathlib import Path


def parse(path: Path) -> ast.Module:
    source = Path(path).read_text()
    for attempt in range(3):
        try:
            return ast.parse(source, str(path))
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")
