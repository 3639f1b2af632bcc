"""The reference pages are what docs/gen_reference.py makes from the code today, and every item
the code defines (CLI flag, CRD field, Helm value, config key, metric, reason) is on a page.

The enumerations here are independent of the generator's own walks, so a generator that
silently skips a kind of item fails them. A failure means: run `python docs/gen_reference.py`
and commit docs/reference/."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

import yaml

from tests.docs.conftest import DOCS, ROOT

FIX = "run `python docs/gen_reference.py` and commit docs/reference/"


def test_committed_reference_pages_are_what_the_code_produces(gen, tmp_path, monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "somewhere")  # a default read from the environment must not leak in
    gen.generate(tmp_path)
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.md")}
    committed = {p.name: p.read_text() for p in (DOCS / "reference").glob("*.md")}
    assert sorted(fresh) == sorted(committed), FIX
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale} differ from the code: {FIX}"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## `([^`]+)`$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _walk(parser: argparse.ArgumentParser, prog: str):
    yield prog, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _walk(sub, f"{prog} {name}")


def test_every_cli_command_and_flag_is_in_the_cli_page(pages):
    from foresight.cli import build_parser

    sections = _sections(pages["cli.md"])
    missing = []
    for prog, parser in _walk(build_parser(), "foresight"):
        if prog not in sections:
            missing.append(prog)
            continue
        for a in parser._actions:
            for flag in a.option_strings:
                if flag not in ("-h", "--help") and f"{flag}" not in sections[prog]:
                    missing.append(f"{prog} {flag}")
    assert len(sections) >= 15
    assert not missing, f"not documented: {missing}; {FIX}"


def _schema_paths(s: dict, path: str = ""):
    for name, sub in (s.get("properties") or {}).items():
        p = f"{path}.{name}" if path else name
        yield p
        yield from _schema_paths(sub.get("items", {}) if sub.get("type") == "array" else sub,
                                 p + "[]" if sub.get("type") == "array" else p)


def test_every_crd_field_is_in_the_crd_page(pages):
    missing = []
    crds = sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
    assert len(crds) >= 2
    for f in crds:
        crd = yaml.safe_load(f.read_text())
        for v in crd["spec"]["versions"]:
            for p in _schema_paths(v["schema"]["openAPIV3Schema"]):
                if p not in ("apiVersion", "kind", "metadata") and f"`{p}`" not in pages["crds.md"]:
                    missing.append(f"{crd['spec']['names']['kind']}: {p}")
    assert not missing, f"not documented: {missing}; {FIX}"


def test_every_helm_value_is_in_the_values_page(pages):
    """Every key of values.yaml down to free-form maps (resources, labels), and every key the
    schema allows."""
    schema = json.loads((ROOT / "charts" / "foresight" / "values.schema.json").read_text())
    values = yaml.safe_load((ROOT / "charts" / "foresight" / "values.yaml").read_text())

    def keys(v, s, path=""):
        if "$ref" in s:
            s = schema["definitions"][s["$ref"].rsplit("/", 1)[1]]
        if not isinstance(v, dict) or not s.get("properties"):
            return
        for k, sub in v.items():
            p = f"{path}.{k}" if path else k
            yield p
            yield from keys(sub, s["properties"].get(k, {}), p)

    wanted = set(keys(values, schema)) | set(_schema_paths(schema))
    assert len(wanted) > 50
    missing = sorted(p for p in wanted if f"`{p}`" not in pages["helm-values.md"])
    assert not missing, f"not documented: {missing}; {FIX}"


def _keys_in(page: str, section: str) -> str:
    body = _sections(page).get(section)
    assert body is not None, f"no section `{section}`; {FIX}"
    return body


def test_every_workloads_config_key_is_in_its_page(pages):
    from forecaster.config import CapacityConfig, SourceConfig, StoreConfig, TrainingConfig
    from forecaster.predicted import PredictedMetric
    from forecaster.serving import ServingSettings
    from forecaster.workloads import WORKLOAD_KEYS

    page = pages["workloads-config.md"]
    expect = {"source": SourceConfig, "store": StoreConfig, "training": TrainingConfig, "serving": ServingSettings,
              "workloads[].capacity": CapacityConfig, "workloads[].metrics[]": PredictedMetric}
    missing = [f"{sec}.{f.name}" for sec, cls in expect.items() for f in dataclasses.fields(cls)
               if f"`{f.name}`" not in _keys_in(page, sec)]
    missing += [f"workloads[].{k}" for k in WORKLOAD_KEYS if f"`{k}`" not in _keys_in(page, "workloads[]")]
    assert not missing, f"not documented: {missing}; {FIX}"


def test_every_warmpool_policy_key_is_in_its_page(pages):
    from warmpool.policy import POOL_KEYS, IdleModel, MemoryBudget, RequestRate, Template
    from warmpool.ttl import IdleTTL

    page = pages["warmpool-policy.md"]
    expect = {"memory_budget": MemoryBudget, "pools[].template": Template, "pools[].idle_ttl": IdleTTL,
              "pools[].idle_model": IdleModel, "pools[].request_rate": RequestRate}
    missing = [f"{sec}.{f.name}" for sec, cls in expect.items() for f in dataclasses.fields(cls)
               if f"`{f.name}`" not in _keys_in(page, sec)]
    missing += [f"pools[].{k}" for k in POOL_KEYS if f"`{k}`" not in _keys_in(page, "pools[]")]
    assert not missing, f"not documented: {missing}; {FIX}"


def test_every_metric_the_processes_export_is_in_the_metrics_page(pages):
    from adapter.telemetry import AdapterMetrics
    from warmpool.metrics import Metrics

    names = set()
    for registry in (Metrics().registry, AdapterMetrics().registry):
        for fam in registry.collect():
            names.add(fam.name + ("_total" if fam.type == "counter" else ""))
    # collected at scrape time from the adapter's cache (ForecastAgeCollector): named in its source
    src = "".join(p.read_text() for p in (ROOT / "adapter").rglob("*.py"))
    names |= set(re.findall(r'"(foresight_adapter_[a-z0-9_]+)"', src))
    assert len(names) >= 25
    missing = sorted(n for n in names if f"`{n}`" not in pages["metrics.md"])
    assert not missing, f"not documented: {missing}; {FIX}"


def test_every_condition_and_event_reason_is_in_the_reasons_page(pages):
    src = "".join(p.read_text() for p in (ROOT / "kubeoperator").glob("*.py"))
    reasons = set(re.findall(r'\(\s*"(?:True|False)",\s*"(\w+)"', src))
    reasons |= set(re.findall(r'Event\(\s*"(?:Normal|Warning)",\s*"(\w+)"', src))
    assert {"InvalidWorkload", "Fallback", "WouldScale", "CreationFailing"} <= reasons
    missing = sorted(r for r in reasons if f"`{r}`" not in pages["reasons.md"])
    assert not missing, f"not documented: {missing}; {FIX}"


def test_yaml_comments_follow_nesting_and_list_items(gen):
    text = ("# the image\nimage:\n  repository: x   # where from\n  tag: y\n"
            "pools:\n  - name: a      # pool name\n    idle_ttl: {decay: 0.1}  # decays\n"
            "  - name: b\n# top\ntop: 1\n")
    assert gen.yaml_comments(text) == {
        "image": "the image", "image.repository": "where from", "pools[].name": "pool name",
        "pools[].idle_ttl": "decays", "top": "top"}
