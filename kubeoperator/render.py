"""What the operator writes for the trainer and the warm-pool controller (pure).

- The trainer reads one workloads file. The user's ConfigMap (the ``base``) stays theirs and
  keeps working on its own; the operator writes the *effective* file = the base plus one
  workload per (PredictiveAutoscaler, metric), validated by forecaster.config exactly as the
  trainer will read it. A workload the user listed by hand wins over a generated one.
- The warm-pool controller reads one policy file; every WarmPool becomes one pool of it,
  validated by warmpool.policy.
Problems are kept per object, so one bad object never stops the others.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from forecaster.config import DEFAULT_READY_PODS_QUERY, parse_config
from forecaster.errors import ConfigError
from kubeoperator.spec import AutoscalerSpec, MetricSpec, WarmPoolSpec

Key = tuple[str, str]  # (namespace, name) of a custom resource


@dataclass
class Rendered:
    text: str
    problems: dict[Key, list[str]] = field(default_factory=dict)  # the object is left out
    warnings: dict[Key, list[str]] = field(default_factory=dict)  # included, with a caveat

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def workload_entry(pa: AutoscalerSpec, m: MetricSpec) -> dict:
    entry: dict[str, Any] = {
        "namespace": pa.namespace, "name": pa.workload_name(m), "kind": pa.target_kind,
        "labels": {"foresight.dev/autoscaler": pa.name, "foresight.dev/metric": m.name},
    }
    if m.type == "Demand":
        entry["demand_query"] = m.query
        # ready pods are the target's pods, not pods named after the metric's series
        entry["capacity"] = {"cpu_request_cores": float(m.capacity_per_replica),
                             "ready_pods_query": DEFAULT_READY_PODS_QUERY.format(namespace=pa.namespace,
                                                                                 name=pa.target_name)}
    elif m.cpu_request_cores is not None:
        entry["capacity"] = {"cpu_request_cores": float(m.cpu_request_cores)}
    return entry


def _serving_section(base: Mapping, pas: list[AutoscalerSpec]) -> tuple[dict | None, dict[Key, list[str]], dict[Key, list[str]]]:
    """The trainer applies one ``serving:`` section to every workload: the base's when it has
    one, else the first valid settings an autoscaler asks for. An autoscaler whose settings the
    trainer would refuse is left out; one asking for other valid settings is told they are not
    applied. Returns (section, problems, warnings)."""
    problems: dict[Key, list[str]] = {}
    warnings: dict[Key, list[str]] = {}
    chosen = base.get("serving")
    origin = "the trainer ConfigMap's serving section"
    for pa in pas:
        want = {k: list(v) if isinstance(v, tuple) else v for k, v in pa.serving.items()}
        if not want:
            continue
        try:
            parse_config({**base, "serving": want, "workloads": []}, f"{pa.namespace}/{pa.name}")
        except ConfigError as exc:
            problems[(pa.namespace, pa.name)] = list(exc.problems)
            continue
        if chosen is None:
            chosen, origin = want, f"spec.serving of {pa.namespace}/{pa.name}"
        elif want != chosen:
            warnings[(pa.namespace, pa.name)] = [
                f"spec.serving is not applied: the trainer uses one serving section for every workload ({origin})"]
    return chosen, problems, warnings


def render_trainer_config(base: Mapping[str, Any] | None, autoscalers: Iterable[AutoscalerSpec]) -> Rendered:
    pas = sorted(autoscalers, key=lambda p: (p.namespace, p.name))
    if base is None:
        msg = "the trainer's base ConfigMap is missing (helm value trainer.config, or foresight-workloads)"
        return Rendered(text="", problems={(p.namespace, p.name): [msg] for p in pas})
    base = copy.deepcopy(dict(base))
    manual = {(w.get("namespace"), w.get("name")) for w in base.get("workloads") or [] if isinstance(w, dict)}
    serving, problems, warnings = _serving_section(base, pas)
    if serving is not None:
        base["serving"] = serving
    doc = {**base, "workloads": list(base.get("workloads") or [])}
    for pa in pas:
        key = (pa.namespace, pa.name)
        if key in problems:
            continue
        entries = [workload_entry(pa, m) for m in pa.metrics
                   if (pa.namespace, pa.workload_name(m)) not in manual]
        try:  # this autoscaler alone on top of what is already accepted
            parse_config({**doc, "workloads": doc["workloads"] + entries}, f"{pa.namespace}/{pa.name}")
        except ConfigError as exc:
            problems[key] = list(exc.problems)
            continue
        doc["workloads"].extend(entries)
    return Rendered(text=yaml.safe_dump(doc, sort_keys=False), problems=problems, warnings=warnings)


def render_warmpool_policy(base: Mapping[str, Any] | None, pools: Iterable[WarmPoolSpec]) -> Rendered:
    """The controller's policy: the base's runtime classes and memory budget, its own pools,
    and one pool per WarmPool object."""
    from warmpool.policy import parse_policy

    doc = copy.deepcopy(dict(base or {}))
    doc.setdefault("apiVersion", "foresight/v1alpha1")
    doc.setdefault("kind", "WarmPoolPolicy")
    doc["pools"] = list(doc.get("pools") or [])
    problems: dict[Key, list[str]] = {}
    for wp in sorted(pools, key=lambda p: (p.namespace, p.name)):
        pool = wp.to_policy_pool()
        try:
            parse_policy({**doc, "pools": doc["pools"] + [pool]}, f"{wp.namespace}/{wp.name}")
        except ConfigError as exc:
            problems[(wp.namespace, wp.name)] = list(exc.problems)
            continue
        doc["pools"].append(pool)
    return Rendered(text=yaml.safe_dump(doc, sort_keys=False) if doc["pools"] else "", problems=problems)
