"""What the operator writes for the trainer and the warm-pool controller (pure).

- The trainer reads one workloads file. The user's ConfigMap (the ``base``) stays theirs and
  keeps working on its own; the operator writes the *effective* file = the base plus one
  workload per PredictiveAutoscaler (its target: the CPU series, its Demand metrics as declared
  metrics, its spec.serving as the workload's own serving settings), validated by
  forecaster.config exactly as the trainer will read it, problems reported with the object's
  own field path (``spec.serving.headrooms[0]``). A workload the user listed by hand wins over
  a generated one.
- The warm-pool controller reads one policy file; every WarmPool becomes one pool of it,
  validated by warmpool.policy.
Problems are kept per object, so one bad object never stops the others.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from core.errors import ConfigError
from forecaster.config import parse_config
from kubeoperator.spec import SERVING_FIELDS, AutoscalerSpec, WarmPoolSpec

Key = tuple[str, str]  # (namespace, name) of a custom resource


@dataclass
class Rendered:
    text: str
    problems: dict[Key, list[str]] = field(default_factory=dict)  # the object is left out
    warnings: dict[Key, list[str]] = field(default_factory=dict)  # included, with a caveat

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def workload_entry(pa: AutoscalerSpec) -> dict:
    """The autoscaler's target as one trainer workload: its CPU series (capacity from the
    Resource metric), its Demand metrics as declared metrics, and spec.serving as the
    workload's own serving overrides."""
    entry: dict[str, Any] = {
        "namespace": pa.namespace, "name": pa.target_name, "kind": pa.target_kind,
        "labels": {"foresight.dev/autoscaler": pa.name},
    }
    cpu = pa.resource_metric
    if cpu is not None and cpu.cpu_request_cores is not None:
        entry["capacity"] = {"cpu_request_cores": float(cpu.cpu_request_cores)}
    demands = [{"name": m.name, "query": m.query, "capacity_per_replica": m.capacity_per_replica}
               for m in pa.metrics if m.type == "Demand"]
    if demands:
        entry["metrics"] = demands
    if pa.serving:
        entry["serving"] = {k: list(v) if isinstance(v, tuple) else v for k, v in pa.serving.items()}
    return entry


# libyaml's emitter when PyYAML has it: the same text, a fourth of the time of the pure-Python one,
# which was most of a pass at a thousand autoscalers
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _dump(doc: Mapping[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False)


_CAMEL = {snake: camel for camel, snake in SERVING_FIELDS.items()}
_METRIC_KEYS = {"name": "name", "query": "query", "capacity_per_replica": "capacityPerReplica"}


def spec_path(problem: str, pa: AutoscalerSpec, index: int) -> str:
    """A trainer-config problem of this autoscaler's entry (``workloads[<index>]...``) with the
    path of the autoscaler's own field: ``spec.serving.sloMinutesPerDay``, ``spec.metrics[1].query``."""
    prefix = f"workloads[{index}]"
    if not problem.startswith(prefix):
        return problem  # the base ConfigMap's own problem: its path is already the file's
    rest = problem[len(prefix):]
    m = re.match(r"\.serving\.([a-z_]+)(.*)", rest)
    if m:
        return f"spec.serving.{_CAMEL.get(m.group(1), m.group(1))}{m.group(2)}"
    m = re.match(r"\.metrics\[(\d+)\](?:\.([a-z_]+))?(.*)", rest)
    if m:
        demands = [i for i, x in enumerate(pa.metrics) if x.type == "Demand"]
        k = demands[int(m.group(1))] if int(m.group(1)) < len(demands) else int(m.group(1))
        key = f".{_METRIC_KEYS.get(m.group(2), m.group(2))}" if m.group(2) else ""
        return f"spec.metrics[{k}]{key}{m.group(3)}"
    if rest.startswith(".capacity.cpu_request_cores") and pa.resource_metric is not None:
        k = pa.metrics.index(pa.resource_metric)
        return f"spec.metrics[{k}].cpuRequestCores{rest[len('.capacity.cpu_request_cores'):]}"
    return f"spec (trainer workload {pa.namespace}/{pa.target_name}){rest}"


def render_trainer_config(base: Mapping[str, Any] | None, autoscalers: Iterable[AutoscalerSpec]) -> Rendered:
    pas = sorted(autoscalers, key=lambda p: (p.namespace, p.name))
    if base is None:
        msg = "the trainer's base ConfigMap is missing (helm value trainer.config, or foresight-workloads)"
        return Rendered(text="", problems={(p.namespace, p.name): [msg] for p in pas})
    base = copy.deepcopy(dict(base))
    # the base's own workloads are the admin's: their queries run as written, unconfined; only
    # what a PredictiveAutoscaler brings was confined to its namespace (kubeoperator.checks)
    manual = {(w.get("namespace"), w.get("name")) for w in base.get("workloads") or [] if isinstance(w, dict)}
    doc = {**base, "workloads": list(base.get("workloads") or [])}
    problems: dict[Key, list[str]] = {}
    warnings: dict[Key, list[str]] = {}
    owner: dict[Key, str] = {}  # (namespace, target) -> the autoscaler whose entry it is
    try:  # the base alone, once: if the trainer would refuse it, every autoscaler is told why
        parse_config(doc, "the trainer's base ConfigMap")
        base_problems: list[str] = []
    except ConfigError as exc:
        base_problems = list(exc.problems)
    sections = {**doc, "workloads": []}
    for pa in pas:
        key, target = (pa.namespace, pa.name), (pa.namespace, pa.target_name)
        if target in manual:
            warnings[key] = [f"the trainer ConfigMap lists {pa.namespace}/{pa.target_name} by hand: that entry is "
                             "used, and this object's Demand metrics and spec.serving are not applied"]
            continue
        if target in owner:
            problems[key] = [f"spec.scaleTargetRef.name: {pa.target_name} is already the target of PredictiveAutoscaler "
                             f"{pa.namespace}/{owner[target]}; one autoscaler per workload"]
            continue
        if base_problems:
            problems[key] = base_problems
            continue
        # this autoscaler's entry alone with the base's sections: the only check across workloads
        # is a duplicate, which `manual` and `owner` make above, and checking each entry against
        # all accepted before it made a pass quadratic in the fleet (a minute at 1,000 objects)
        try:
            parse_config({**sections, "workloads": [workload_entry(pa)]}, f"{pa.namespace}/{pa.name}")
        except ConfigError as exc:
            problems[key] = [spec_path(p, pa, 0) for p in exc.problems]
            continue
        doc["workloads"].append(workload_entry(pa))
        owner[target] = pa.name
    return Rendered(text=_dump(doc), problems=problems, warnings=warnings)


_POOL_CAMEL = {"idle_ttl": "idleTTL", "hold_on_ttl": "holdOnTTL"}  # the rest: snake_case -> camelCase


def pool_spec_path(problem: str, pool: str) -> str:
    """A policy problem of this WarmPool's pool (``pools[shop.web].min_warm: ...``) with the
    object's own path (``spec.minWarm: ...``); the base policy's own problems keep theirs."""
    prefix = f"pools[{pool}]"
    if not problem.startswith(prefix):
        return problem

    def camel(m: re.Match) -> str:
        word = m.group(1)
        return "." + _POOL_CAMEL.get(word, re.sub(r"_([a-z])", lambda x: x.group(1).upper(), word))

    path, sep, msg = problem[len(prefix):].partition(": ")
    path = re.sub(r"\.([a-z_]+)", camel, path)
    if path == ".workload.name":
        path = ".workload"
    # the other field of a rule across two (``must be <= max_warm (5)``) by the object's name too
    # (a key in an example, ``{concurrency_per_container: 20}``, by its own name)
    msg = _POOL_WORDS.sub(lambda m: _POOL_FIELDS[m.group(1)].rsplit(".", 1)[-1] + ":" if m.group(2)
                          else _POOL_FIELDS[m.group(1)], msg)
    return f"spec{path}{sep}{msg}" if path else f"spec{sep}{msg}"


# snake_case keys of the policy a message may name -> the WarmPool's field; only those with a '_'
# (a plain word such as ``name`` or ``demand`` in a message is English as often as a key)
_POOL_FIELDS = {
    **{k: f"spec.{re.sub(r'_([a-z])', lambda x: x.group(1).upper(), k)}" for k in (
        "min_warm", "max_warm", "capacity_per_container", "lead_seconds", "runtime_class")},
    "idle_ttl": "spec.idleTTL", "request_rate": "spec.requestRate", "idle_model": "spec.idleModel",
    "initial_seconds": "spec.idleTTL.initialSeconds", "floor_seconds": "spec.idleTTL.floorSeconds",
    "concurrency_per_container": "spec.requestRate.concurrencyPerContainer",
}
_POOL_WORDS = re.compile(r"\b(" + "|".join(sorted(_POOL_FIELDS, key=len, reverse=True)) + r")\b(:?)")


def render_warmpool_policy(base: Mapping[str, Any] | None, pools: Iterable[WarmPoolSpec]) -> Rendered:
    """The controller's policy: the base's runtime classes and memory budget, its own pools,
    and one pool per WarmPool object."""
    from warmpool.policy import parse_policy

    doc = copy.deepcopy(dict(base or {}))
    doc.setdefault("apiVersion", "foresight/v1alpha1")
    doc.setdefault("kind", "WarmPoolPolicy")
    doc["pools"] = list(doc.get("pools") or [])
    problems: dict[Key, list[str]] = {}
    try:  # the base alone, once (as the trainer's: checking each pool on top of all before it was quadratic)
        parse_policy(doc, "the warm-pool base ConfigMap")
        base_problems: list[str] = []
    except ConfigError as exc:
        base_problems = list(exc.problems)
    names = {p.get("name") for p in doc["pools"] if isinstance(p, dict)}
    for wp in sorted(pools, key=lambda p: (p.namespace, p.name)):
        pool = wp.to_policy_pool()
        if base_problems or pool["name"] in names:  # the only check across pools: a name taken by the base
            problems[(wp.namespace, wp.name)] = base_problems or [
                f"metadata.name: the base policy already has a pool named {pool['name']!r}; rename this WarmPool"]
            continue
        try:
            parse_policy({**doc, "pools": [pool]}, f"{wp.namespace}/{wp.name}")
        except ConfigError as exc:
            problems[(wp.namespace, wp.name)] = [pool_spec_path(p, wp.pool_name) for p in exc.problems]
            continue
        doc["pools"].append(pool)
        names.add(pool["name"])
    # written with no pools too: the controller's pod mounts the file, and starts (or drops the last
    # pool of a deleted WarmPool) on it
    return Rendered(text=_dump(doc), problems=problems)
