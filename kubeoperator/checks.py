"""Every field the operator reads from a PredictiveAutoscaler or WarmPool, checked (pure).

The CRD schema refuses most bad objects at the API server, but the operator does not trust it
alone: an object stored before a schema change, a CRD installed without its CEL rules, or an
edited CRD would otherwise crash the pass with a KeyError or a TypeError. ``check_autoscaler``
and ``check_warmpool`` report every problem at once, each as ``<field path>: <what to do>``,
and raise ``SpecError``; the runner turns it into the object's ``Ready`` condition and an Event.

Unknown keys are not refused here: the API server prunes fields the schema does not declare,
and a field a newer operator added (read by its own code) must not make this one refuse it.
Semantic checks of spec.serving stay with forecaster.config (render.py maps their paths), but
for the two values the operator reads itself, and the pool's numbers with warmpool.policy:
both run on what passes here.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from kubeoperator.promql import NotConfined, confine
from warmpool.policy import MAX_POOL_NAME, pool_id

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
METRIC_NAME = re.compile(r"[a-z0-9]([-_a-z0-9]{0,38}[a-z0-9])?")
DEMAND_NAME = re.compile(r"[a-z]([-_a-z0-9]*[a-z0-9])?")
CPU_NAMES = ("cpu", "cpu_load", "cpu_cores")
MAX_QUERY_CHARS = 4096  # the CRD's maxLength of spec.metrics[].query
MAX_METRICS = 8
TARGET_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
MODES = ("Act", "Observe")
INVALID_SPEC = "InvalidSpec"
QUERY_NOT_CONFINED = "QueryNotConfined"


class SpecError(ValueError):
    """An object the operator will not reconcile: ``problems`` each start with the field path;
    ``reason`` is the Ready condition's (QueryNotConfined when a query is among them)."""

    def __init__(self, problems: list[str], reason: str = INVALID_SPEC):
        self.problems = list(problems)
        self.reason = reason
        super().__init__("; ".join(self.problems))


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.confinement = False

    def add(self, path: str, msg: str) -> None:
        self.items.append(f"{path}: {msg}")

    def mapping(self, v: Any, path: str, required: bool = False) -> dict:
        if v is None:
            if required:
                self.add(path, "is required")
            return {}
        if not isinstance(v, Mapping):
            self.add(path, f"must be an object, got {type(v).__name__} {_short(v)}")
            return {}
        return dict(v)

    def string(self, d: dict, key: str, path: str, *, required: bool = False, pattern: re.Pattern | None = None,
               choices: tuple[str, ...] = (), hint: str = "", max_len: int | None = None) -> str | None:
        p = f"{path}.{key}"
        v = d.get(key)
        if v is None:
            if required:
                self.add(p, f"is required{' (' + hint + ')' if hint else ''}")
            return None
        if not isinstance(v, str):
            self.add(p, f"must be a string, got {type(v).__name__} {_short(v)}")
        elif max_len is not None and len(v) > max_len:
            self.add(p, f"is {len(v)} characters; at most {max_len}")
        elif pattern is not None and not pattern.fullmatch(v):
            self.add(p, f"{_short(v)} {hint or 'is not valid'}")
        elif choices and v not in choices:
            self.add(p, f"{_short(v)} must be one of {', '.join(choices)}")
        else:
            return v
        return None

    def number(self, d: dict, key: str, path: str, *, required: bool = False, integer: bool = False,
               lo: float | None = None, lo_open: bool = False, hi: float | None = None) -> float | None:
        p = f"{path}.{key}"
        v = d.get(key)
        if v is None:
            if required:
                self.add(p, "is required")
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(v, bool) or not isinstance(v, kinds) or not _finite_number(v):
            self.add(p, f"must be {'an integer' if integer else 'a finite number'}, got {type(v).__name__} {_short(v)}")
            return None
        if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
            rng = f"{'(' if lo_open else '['}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            self.add(p, f"{v!r} must be in {rng}")
            return None
        return v

    def boolean(self, d: dict, key: str, path: str) -> None:
        v = d.get(key)
        if v is not None and not isinstance(v, bool):
            self.add(f"{path}.{key}", f"must be true or false, got {type(v).__name__} {_short(v)}")

    def raise_if_any(self) -> None:
        if self.items:
            raise SpecError(self.items, QUERY_NOT_CONFINED if self.confinement else INVALID_SPEC)


def _finite_number(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int past float's range: nothing downstream could use it
        return False


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _metadata(c: _Problems, obj: Any) -> tuple[str, str]:
    if not isinstance(obj, Mapping):
        c.add("<object>", f"must be an object, got {type(obj).__name__}")
        c.raise_if_any()
    md = c.mapping(obj.get("metadata"), "metadata", required=True)
    ns = c.string(md, "namespace", "metadata", required=True, pattern=DNS_LABEL, hint="must be a namespace name")
    name = c.string(md, "name", "metadata", required=True, pattern=DNS_SUBDOMAIN, hint="must be a DNS subdomain name")
    c.string(md, "uid", "metadata")  # the HPA's ownerReference
    gen = md.get("generation")
    if gen is not None and (isinstance(gen, bool) or not isinstance(gen, int)):
        c.add("metadata.generation", f"must be an integer, got {_short(gen)}")
    return ns or "", name or ""


def check_autoscaler(obj: Any) -> dict[int, str]:
    """Raises SpecError naming every bad field; returns each Demand metric's query (by its
    index in spec.metrics) confined to the object's namespace. Only a tenant's queries are
    confined: the admin's own workloads ConfigMap (forecaster/config.py) is read unconfined."""
    c = _Problems()
    ns, _ = _metadata(c, obj)
    spec = c.mapping(obj.get("spec"), "spec", required=True)
    c.string(spec, "mode", "spec", choices=MODES)
    ref = c.mapping(spec.get("scaleTargetRef"), "spec.scaleTargetRef", required=True)
    c.string(ref, "name", "spec.scaleTargetRef", required=True, pattern=DNS_LABEL,
             hint="must be the name of a Deployment, StatefulSet or ReplicaSet of this namespace")
    c.string(ref, "apiVersion", "spec.scaleTargetRef", max_len=253)
    c.string(ref, "kind", "spec.scaleTargetRef", choices=TARGET_KINDS)
    scaler = c.string(spec, "scaler", "spec", choices=("HPA", "KEDA"))
    lo = c.number(spec, "minReplicas", "spec", integer=True, lo=0, hi=2**31 - 1)
    if lo == 0 and scaler != "KEDA":  # an HPA cannot scale to zero; KEDA activates from zero
        c.add("spec.minReplicas", "0 needs spec.scaler: KEDA (an HPA's minReplicas is at least 1); set it to 1 or use KEDA")
    hi = c.number(spec, "maxReplicas", "spec", required=True, integer=True, lo=1, hi=2**31 - 1)
    if lo is not None and hi is not None and lo > hi:
        c.add("spec.minReplicas", f"{lo} must be <= spec.maxReplicas ({hi})")
    floor = c.mapping(spec.get("reactiveFloor"), "spec.reactiveFloor")
    c.boolean(floor, "enabled", "spec.reactiveFloor")
    c.number(floor, "averageUtilization", "spec.reactiveFloor", integer=True, lo=1, hi=1000)
    serving = c.mapping(spec.get("serving"), "spec.serving")
    for key in ("targetValue", "sloUtilization"):  # read by the operator itself (the HPA, Observe mode)
        c.number(serving, key, "spec.serving", lo=0, lo_open=True, hi=10)
    _finite(c, serving, "spec.serving", SERVING_NUMBERS, SERVING_NUMBER_LISTS)
    _behavior(c, c.mapping(spec.get("behavior"), "spec.behavior"))
    queries = _metrics(c, spec, ns)
    c.raise_if_any()
    return queries


# Numbers the trainer's and the warm-pool controller's parsers range-check, but which must be
# finite numbers in range of a float before they get there: a NaN passes every comparison and an
# integer past float's range raises OverflowError where they are compared (found by
# tests/tenancy/test_generated_config.py). Types and ranges stay with those parsers.
SERVING_NUMBERS = ("violationWorthMinutes", "sloMinutesPerDay", "costCeiling", "historyDays", "modelMargin",
                   "peakGapStates")
SERVING_NUMBER_LISTS = ("headrooms", "holds")
POOL_NUMBERS = ("minWarm", "maxWarm", "capacityPerContainer", "leadSeconds")
POOL_NUMBER_PARTS = {"idleTTL": ("initialSeconds", "decay", "floorSeconds"),
                     "idleModel": ("binSeconds", "priorScale", "priorPower", "priorWeight", "previousGapWeight"),
                     "requestRate": ("concurrencyPerContainer",)}


def _finite(c: _Problems, d: dict, path: str, keys: tuple[str, ...], lists: tuple[str, ...] = ()) -> None:
    """Each number among ``keys`` (and in the lists ``lists``) is finite; other types are left
    to the parser that reads the field, which names them."""
    for key in keys:
        v = d.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not _finite_number(v):
            c.add(f"{path}.{key}", f"must be a finite number, got {_short(v)}")
    for key in lists:
        items = d.get(key)
        for i, v in enumerate(items if isinstance(items, list) else ()):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not _finite_number(v):
                c.add(f"{path}.{key}[{i}]", f"must be a finite number, got {_short(v)}")


def _behavior(c: _Problems, b: dict) -> None:
    """The HPA's behavior as autoscaling/v2 (and Observe mode's shadow HPA) reads it."""
    for side in ("scaleUp", "scaleDown"):
        p = f"spec.behavior.{side}"
        rules = c.mapping(b.get(side), p)
        c.number(rules, "stabilizationWindowSeconds", p, integer=True, lo=0, hi=3600)
        c.string(rules, "selectPolicy", p, choices=("Max", "Min", "Disabled"))
        pols = rules.get("policies")
        if pols is None:
            continue
        if not isinstance(pols, list):
            c.add(f"{p}.policies", f"must be a list of {{type, value, periodSeconds}}, got {_short(pols)}")
            continue
        for i, raw in enumerate(pols):
            pp = f"{p}.policies[{i}]"
            pol = c.mapping(raw, pp, required=True)
            if isinstance(raw, Mapping):
                c.string(pol, "type", pp, required=True, choices=("Pods", "Percent"))
                c.number(pol, "value", pp, required=True, integer=True, lo=1, hi=2**31 - 1)
                c.number(pol, "periodSeconds", pp, required=True, integer=True, lo=1, hi=1800)


def _metrics(c: _Problems, spec: dict, ns: str) -> dict[int, str]:
    raw = spec.get("metrics")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_METRICS:
        c.add("spec.metrics", f"must be a list of 1 to {MAX_METRICS} metrics, got {_short(raw)}")
        return {}
    queries: dict[int, str] = {}
    names: set[str] = set()
    resources = 0
    for i, item in enumerate(raw):
        p = f"spec.metrics[{i}]"
        m = c.mapping(item, p, required=True)
        name = c.string(m, "name", p, required=True, pattern=METRIC_NAME,
                        hint="must be 1-40 of a-z, 0-9, '-', '_', starting and ending with a letter or digit")
        if name is not None and name in names:
            c.add(f"{p}.name", f"{name!r} is listed twice; metric names are unique")
        names.add(name or "")
        kind = c.string(m, "type", p, required=True, choices=("Resource", "Demand"))
        if kind == "Resource":
            resources += 1
            c.number(m, "cpuRequestCores", p, lo=0, lo_open=True)
            for k in ("query", "capacityPerReplica"):
                if k in m:
                    c.add(f"{p}.{k}", "applies to Demand metrics only; a Resource metric forecasts CPU cores")
        elif kind == "Demand":
            if name is not None and (not DEMAND_NAME.fullmatch(name) or name in CPU_NAMES or name.endswith("_ratio")):
                c.add(f"{p}.name", f"{name!r}: a Demand metric's name starts with a letter, is not cpu, cpu_load or "
                                   "cpu_cores and does not end in _ratio (it is served as predicted_<name>_ratio)")
            if "cpuRequestCores" in m:
                c.add(f"{p}.cpuRequestCores", "applies to Resource metrics only")
            c.number(m, "capacityPerReplica", p, required=True, lo=0, lo_open=True)
            q = c.string(m, "query", p, required=True, max_len=MAX_QUERY_CHARS, hint="the PromQL of the demand now")
            if q is not None and not q.strip():
                c.add(f"{p}.query", "must not be empty: the PromQL of the demand now")
            elif q is not None:
                try:
                    queries[i] = confine(q, ns)
                except NotConfined as exc:
                    c.add(f"{p}.query", str(exc))
                    c.confinement = True
    if resources > 1:
        c.add("spec.metrics", "at most one Resource metric (the target's CPU)")
    return queries


SERIES = re.compile(r"[^/\s]+(/[^/\s]+){1,2}")


def check_warmpool(obj: Any) -> None:
    """Raises SpecError naming every bad field: shapes the operator reads, forecast series of
    the pool's own namespace only, and a pool id that fits a label value."""
    c = _Problems()
    ns, name = _metadata(c, obj)
    if ns and name and len(pool_id(ns, name)) > MAX_POOL_NAME:
        c.add("metadata.name", f"the pool id {pool_id(ns, name)!r} is {len(pool_id(ns, name))} characters; "
                               f"<namespace>.<name> must fit {MAX_POOL_NAME} (a pod label value): use a name of at most "
                               f"{MAX_POOL_NAME - len(ns) - 1} characters")
    spec = c.mapping(obj.get("spec"), "spec", required=True)
    c.string(spec, "workload", "spec", required=True, pattern=DNS_LABEL, hint="must be a workload name of this namespace")
    _own_series(c, spec, "spec", ns)
    for key in ("template", "idleTTL", "idleModel"):
        c.mapping(spec.get(key), f"spec.{key}")
    rate = c.mapping(spec.get("requestRate"), "spec.requestRate")
    _own_series(c, rate, "spec.requestRate", ns)
    _finite(c, spec, "spec", POOL_NUMBERS)
    for key, parts in POOL_NUMBER_PARTS.items():
        part = spec.get(key)
        if isinstance(part, Mapping):
            _finite(c, dict(part), f"spec.{key}", parts)
    c.raise_if_any()


def _own_series(c: _Problems, d: dict, path: str, ns: str) -> None:
    s = c.string(d, "series", path, pattern=SERIES, hint="must be a forecast series id like <namespace>/<workload>")
    if s is not None and ns and s.split("/", 1)[0] != ns:
        c.add(f"{path}.series", f"{s!r} is a forecast of namespace {s.split('/', 1)[0]!r}; a WarmPool in {ns!r} "
                                f"follows only its own namespace's forecasts: use {ns}/<workload>")
