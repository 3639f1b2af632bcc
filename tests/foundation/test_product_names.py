"""The product carries no name that only a benchmark or a test uses (issue 40: experiments out).

An AST scan: every module-level function, class, method and assigned name defined in the
product packages must be used somewhere in the product itself (as a name, an attribute, an
import, or a word in a string, which covers registries, entry points and ``getattr``). A name
used only from bench/ or tests/ belongs there; a name used by nothing is dead. Decorated
definitions count as used (the decorator registers them: routes, fixtures, model registries).

The match is by name, not by binding, so a method called ``get`` is "used" by any ``.get``:
the scan misses some dead names, but every name it reports is one the product never mentions.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from tests.astparse import parse

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["forecaster", "adapter", "warmpool", "replay", "kubeoperator", "foresight"]
OUTSIDE = ["bench", "tests"]
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Used only by bench/ or tests/ today, inside the serving rule's files, which the serving redesign
# (issue 40 item 4) is rewriting: it removes or moves these. The integrator empties this list.
SERVING_REDESIGN_REMOVES = {
    "forecaster/evaluation.py:backtest_series",  # the backtest's per-series entry: tests only
    "forecaster/models/guard.py:fixed_z_lead_guard",  # the old guard rule, kept for a benchmark's comparison
    "replay/pipeline.py:publish_times",  # tests only
}
# Kept in the product on purpose: each needs the object's private state, so a test cannot hold it.
TEST_HOOKS = {
    "forecaster/fitqueue.py:wait_idle",  # block until the fit queue drained (its condition and keys)
    "warmpool/backends/sim.py:container_ids",  # every container the simulated runtime holds (leak checks)
    "warmpool/backends/crun.py:container_ids",  # every container in this backend's runtime root (leak checks)
    "adapter/tls.py:write_ca",  # test certificates through the same builder the serving certificate uses
    "adapter/tls.py:write_signed",
}
# Called by a library, never by name from our code.
PROTOCOL_HOOKS = {
    "forecaster/checkpoint.py:persistent_id",  # pickle.Pickler
    "forecaster/checkpoint.py:reducer_override",  # pickle.Pickler
    "forecaster/checkpoint.py:persistent_load",  # pickle.Unpickler
}
ALLOWED = SERVING_REDESIGN_REMOVES | TEST_HOOKS | PROTOCOL_HOOKS


def definitions(tree: ast.Module) -> list[tuple[str, bool]]:
    """(name, decorated) of module-level functions, classes, class methods and assigned names."""
    out: list[tuple[str, bool]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, bool(node.decorator_list)))
            if isinstance(node, ast.ClassDef):
                out += [(m.name, bool(m.decorator_list)) for m in node.body
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        elif isinstance(node, ast.Assign):
            out += [(t.id, False) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, False))
    return out


def mentions(tree: ast.Module) -> Counter:
    """Every name a module mentions: names, attributes, imported names, words in strings
    (a definition's own name is not among them: ``def f`` holds no Name node ``f``)."""
    out: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out[node.id] += 1
        elif isinstance(node, ast.Attribute):
            out[node.attr] += 1
        elif isinstance(node, ast.alias):
            out[node.name.rpartition(".")[2]] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.update(WORD.findall(node.value))
    return out


@lru_cache(maxsize=1)  # both tests read the same scan
def scan() -> tuple[list[str], list[str]]:
    """(names used only by bench/ or tests/, names used by nothing), as ``path:name``."""
    defined: list[tuple[str, str, bool]] = []
    in_product: Counter = Counter(WORD.findall((ROOT / "pyproject.toml").read_text()))  # entry points
    for pkg in PRODUCT:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            tree = parse(f)
            rel = f.relative_to(ROOT).as_posix()
            defined += [(rel, name, decorated) for name, decorated in definitions(tree)]
            in_product.update(mentions(tree))
    outside: Counter = Counter()
    for d in OUTSIDE:
        for f in (ROOT / d).rglob("*.py"):
            outside.update(mentions(parse(f)))
    only_outside, unused = [], []
    for rel, name, decorated in defined:
        if decorated or (name.startswith("__") and name.endswith("__")) or in_product[name]:
            continue
        (only_outside if outside[name] else unused).append(f"{rel}:{name}")
    return only_outside, unused


def test_no_product_name_is_used_only_by_bench_or_tests_or_by_nothing():
    only_outside, unused = scan()
    new_outside = sorted(set(only_outside) - ALLOWED)
    assert new_outside == [], (
        f"used only by bench/ or tests/: {new_outside}. Move each into bench/ or the test that uses it "
        "(or, if a test needs the object's private state, list it in TEST_HOOKS with the reason)")
    new_unused = sorted(set(unused) - ALLOWED)
    assert new_unused == [], f"defined in the product and used nowhere: {new_unused}. Delete them"


def test_the_allow_list_holds_only_names_that_still_need_it():
    only_outside, unused = scan()
    stale = sorted(ALLOWED - set(only_outside) - set(unused))
    assert stale == [], f"allowed but now used by the product or gone: {stale}. Delete them from the lists above"


def test_the_scan_finds_a_name_only_a_test_uses(tmp_path):
    """The scan's own check, on two tiny files: a helper only a test calls is found."""
    product = ast.parse("def used():\n    return helper_b()\n\ndef helper_b():\n    pass\n\ndef only_tested():\n    pass\n")
    test = ast.parse("from pkg.mod import only_tested\n\nonly_tested()\n")
    in_product, outside = mentions(product), mentions(test)
    names = [n for n, _ in definitions(product)]
    assert names == ["used", "helper_b", "only_tested"]
    assert [n for n in names if not in_product[n] and outside[n]] == ["only_tested"]
    assert [n for n in names if not in_product[n] and not outside[n]] == ["used"]  # nothing calls used()
