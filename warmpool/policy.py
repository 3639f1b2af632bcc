"""Warm-pool policy YAML -> frozen objects, validated strictly (every problem at once, each
with its path and value). Each field's type, default and allowed values are written once, on
the dataclasses below (``core.typedconfig``); pydantic checks a document against them, and
``_pool_rules`` adds what no single field can check (min_warm <= max_warm, ...).

```yaml
apiVersion: foresight/v1alpha1
kind: WarmPoolPolicy
runtime_classes:            # optional: extra container-start seeds (ms), or overrides
  gvisor: {runtime_ms: [20, 30, 50], image_ms: [40, 66, 104], sandbox_ms: [120, 160, 230]}
memory_budget:              # optional; shared by every pool of one controller
  fraction: 1.0             # idle memory <= this fraction of what a fixed keep-alive would hold
  reference_keepalive_seconds: 600   # ... that fixed keep-alive (10 minutes)
pools:
  - name: checkout
    workload: {namespace: shop, name: checkout}
    series: shop/checkout   # forecast series driving the pool (default namespace/name)
    quantile: p90           # forecast quantile where the forecast carries no serving policy (default p90, else mean)
    runtime_class: crun     # crun, kata, runc (kubernetes also gvisor) or a name from runtime_classes
    backend: crun           # crun, runc, kubernetes or sim
    template:
      image: busybox        # kubernetes image; local backends use a busybox-static bundle
      command: [sleep, "3600"]
      resources: {cpu: 250m, memory: 64Mi}   # memory also prices idle containers
    min_warm: 0
    max_warm: 10
    capacity_per_container: 0.5   # cores of the `series` forecast one container absorbs
    demand: both            # cpu (default: `series` only), requests (request_rate only) or both (the larger)
    request_rate:           # required with demand: requests or both
      series: shop/checkout-rps      # forecast series of requests/s
      concurrency_per_container: 20  # requests/s one container serves
    lead_seconds: 90
    idle_ttl: {initial_seconds: 120, decay: 0.15, floor_seconds: 0}
    idle_model: {enabled: true, bin_seconds: 60, prior_scale: 0.5, prior_power: 1.0, prior_weight: 10,
                 previous_gap_weight: 3, hold_on_ttl: false}
    max_cold_per_minute: 30 # cold starts claims may cause in any 60 s; beyond: 429 + Retry-After (0: none)
    lease_seconds: 300      # a claim holds its container this long unless renewed (POST .../renew)
    on_lease_expiry: delete # what an expired lease does to the container: delete or release (back to warm)
```

What each part does is in warmpool/README.md ("The policy").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Mapping

from core.errors import ConfigError
from core.typedconfig import (
    FORBID_EXTRA,
    Check,
    Choice,
    Flag,
    Integer,
    Keys,
    NonBlank,
    NonEmpty,
    Number,
    Pattern,
    Range,
    Text,
    dotted,
    drop_nulls,
    partial,
    read_yaml,
    validate,
)
from warmpool.coldstart import CONTAINER, POD, RuntimeProfile, seeded_classes
from warmpool.ttl import IdleTTL

# each backend and the kind of start it makes (its ``start_kind``; the sim backend's default)
BACKENDS = {"crun": CONTAINER, "runc": CONTAINER, "kubernetes": POD, "sim": CONTAINER}
DEFAULT_MAX_COLD_PER_MINUTE = 30  # cold starts per pool per sliding minute (claims beyond get 429)
DEFAULT_LEASE_SECONDS = 300.0  # a claim's lease unless renewed
LEASE_EXPIRY_ACTIONS = ("delete", "release")
DEMANDS = ("cpu", "requests", "both")
DEFAULT_MEMORY_MB = 256.0  # prices idle containers of a pool whose template names no memory
API_VERSION, KIND = "foresight/v1alpha1", "WarmPoolPolicy"
_DNS = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DnsLabel = Annotated[Text, Pattern(_DNS, "must be a lowercase DNS label")]
# A pool's name: a DNS label the admin writes (``checkout``), or ``<namespace>.<name>`` for a
# WarmPool object (pool_id). A namespace is a DNS label, so the first '.' ends it: two objects
# never share an id, and an admin's pool named as a DNS label never takes an object's. Dots are
# valid wherever the name goes (the pod label value foresight.dev/pool, pod names and crun/runc
# ids ``fs-<pool>-<hex>``, the API path /api/v1/pools/<pool>); '/' is not (label values, runc
# ids). 63: a label value's limit.
MAX_POOL_NAME = 63
_POOL_NAME = re.compile(r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
PoolName = Annotated[Text, Pattern(_POOL_NAME, "must be a lowercase DNS label (a-z, 0-9, '-'), or <namespace>.<name> "
                                               f"for a WarmPool object, at most {MAX_POOL_NAME} characters")]


def pool_id(namespace: str, name: str) -> str:
    """The controller's pool name of the WarmPool ``namespace/name``."""
    return f"{namespace}.{name}"


_QUANTILE = re.compile(r"mean|p[0-9]+(\.[0-9]+)?")
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?")
_UNIT_BYTES = {None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
               "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


class _Quantity(Check):
    def message(self, value: Any) -> str | None:
        ok = isinstance(value, (str, int, float)) and not isinstance(value, bool) and _QUANTITY.fullmatch(str(value))
        return None if ok else f"{value!r} must be a Kubernetes quantity like 250m or 64Mi"

    def convert(self, value: Any) -> str:
        return str(value)


@dataclass(frozen=True)
class Template:
    __pydantic_config__ = FORBID_EXTRA

    image: Text = "busybox"
    command: Annotated[tuple[Text, ...], NonEmpty("[sleep, '3600']")] = ("sleep", "3600")
    resources: Mapping[Annotated[Text, Keys(("cpu", "memory"))], Annotated[Any, _Quantity()]] = field(default_factory=dict)


@dataclass(frozen=True)
class IdleModel:
    """The pool's learned idle-time model (``warmpool.idlemodel``). ``bin_seconds`` is the
    resolution of idle times; the prior is the chance of a claim ``o`` bins after the last
    busy bin, ``prior_scale / (o + 1) ** prior_power``, worth ``prior_weight`` observed idle
    periods until the pool's own idle periods outweigh it. ``previous_gap_weight`` (0: off)
    splits the hazard by the length of the idle gap that ended last, each class shrunk toward
    the pool's overall hazard with that weight. ``hold_on_ttl``: containers the model stops
    wanting also wait for their idle-TTL deadline (by default the model releases them at once;
    the TTL then governs containers the forecast asked for, and pools with the model off)."""

    __pydantic_config__ = FORBID_EXTRA

    enabled: Flag = True
    bin_seconds: Annotated[Number, Range(1, 3600)] = 60.0
    prior_scale: Annotated[Number, Range(0, 1, lo_open=True)] = 0.5
    prior_power: Annotated[Number, Range(0, 10, lo_open=True)] = 1.0
    prior_weight: Annotated[Number, Range(0, lo_open=True)] = 10.0
    previous_gap_weight: Annotated[Number, Range(0)] = 3.0
    hold_on_ttl: Flag = False


@dataclass(frozen=True)
class RequestRate:
    """A predicted request rate the pool follows: the forecast of ``series`` (requests/s), of
    which one container serves ``concurrency_per_container``."""

    __pydantic_config__ = FORBID_EXTRA

    series: Annotated[Text, NonBlank("must be a non-empty forecast series id of requests/s like <namespace>/<name>-rps")]
    concurrency_per_container: Annotated[Number, Range(0, lo_open=True)]


@dataclass(frozen=True)
class MemoryBudget:
    """Idle memory of all pools together stays near ``fraction`` x what a fixed keep-alive of
    ``reference_keepalive_seconds`` would have held on the same demand."""

    __pydantic_config__ = FORBID_EXTRA

    fraction: Annotated[Number, Range(0, 10, lo_open=True)] = 1.0
    reference_keepalive_seconds: Annotated[Number, Range(0, lo_open=True)] = 600.0


@dataclass(frozen=True)
class WorkloadRef:
    """The workload a pool keeps warm (the policy's ``workload: {namespace, name}``)."""

    __pydantic_config__ = FORBID_EXTRA

    namespace: DnsLabel
    name: DnsLabel


@dataclass(frozen=True)
class PoolSpec:
    """One pool. The policy writes ``workload: {namespace, name}``; the pool holds them apart,
    and ``series`` defaults to ``<namespace>/<name>``."""

    __pydantic_config__ = FORBID_EXTRA

    name: PoolName
    namespace: Text
    workload: Text  # in the policy: workload: {namespace, name}, both lowercase DNS labels
    series: Annotated[Text, NonBlank("must be a non-empty forecast series id like <namespace>/<name>")]
    runtime_class: Text = "crun"
    backend: Annotated[Text, Choice(tuple(BACKENDS))] = "crun"
    template: Template = field(default_factory=Template)
    min_warm: Annotated[Integer, Range(0)] = 0
    max_warm: Annotated[Integer, Range(0)] = 10
    capacity_per_container: Annotated[Number, Range(0, lo_open=True)] = 1.0
    lead_seconds: Annotated[Number, Range(0)] = 90.0
    idle_ttl: IdleTTL = field(default_factory=IdleTTL)
    quantile: Annotated[Text, Pattern(_QUANTILE, "must be 'mean' or a quantile key like p50, p90")] = "p90"
    idle_model: IdleModel = field(default_factory=IdleModel)
    max_cold_per_minute: Annotated[Integer, Range(0, 100_000)] = DEFAULT_MAX_COLD_PER_MINUTE
    lease_seconds: Annotated[Number, Range(1, 7 * 86400)] = DEFAULT_LEASE_SECONDS
    on_lease_expiry: Annotated[Text, Choice(LEASE_EXPIRY_ACTIONS)] = "delete"
    demand: Annotated[Text, Choice(DEMANDS)] = "cpu"  # cpu | requests | both: which forecasts size the pool
    request_rate: RequestRate | None = None

    @property
    def forecast_series(self) -> tuple[str, ...]:
        """The forecast series this pool reads: ``series`` (cpu), the request rate's, or both."""
        out: tuple[str, ...] = () if self.demand == "requests" else (self.series,)
        if self.request_rate is not None and self.demand != "cpu":
            out += (self.request_rate.series,)
        return out

    @property
    def start_kind(self) -> str:
        """What a start of this pool is: a container or a pod (its backend's ``start_kind``)."""
        return BACKENDS[self.backend]

    @cached_property
    def memory_mb(self) -> float:
        """Memory of one container in MiB (template.resources.memory, else DEFAULT_MEMORY_MB)."""
        q = self.template.resources.get("memory")
        m = _QUANTITY.fullmatch(str(q)) if q is not None else None
        if m is None:
            return DEFAULT_MEMORY_MB
        return float(m.group(1)) * _UNIT_BYTES[m.group(2)] / 2.0**20


# the keys a pool takes in the policy: PoolSpec's, with namespace inside ``workload``
POOL_KEYS = tuple(f.name for f in fields(PoolSpec) if f.name != "namespace")
PoolSpec.__config_keys__ = POOL_KEYS  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Policy:
    pools: tuple[PoolSpec, ...]
    runtime_classes: Mapping[str, RuntimeProfile] = field(default_factory=dict)
    memory_budget: MemoryBudget = field(default_factory=MemoryBudget)

    def __post_init__(self) -> None:
        # claims look pools up by name on every call; a controller may run hundreds of pools
        object.__setattr__(self, "_by_name", {p.name: p for p in self.pools})

    def pool(self, name: str) -> PoolSpec | None:
        return self._by_name.get(name)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PolicyDocument:
    """The policy file's top level (its pools are checked one by one, see ``_pool``)."""

    __pydantic_config__ = FORBID_EXTRA

    apiVersion: Annotated[Text, Choice((API_VERSION,))]
    kind: Annotated[Text, Choice((KIND,))]
    pools: list[Any]  # [] is a controller with nothing to keep warm yet
    runtime_classes: Mapping[Annotated[Text, Pattern(_DNS, "runtime class names are lowercase DNS labels")], RuntimeProfile] = \
        field(default_factory=dict)
    memory_budget: MemoryBudget = field(default_factory=MemoryBudget)


def _pool(item: Any, i: int, known_rc: set[str], seen: set[str], problems: list[str]) -> PoolSpec | None:
    p = f"pools[{i}]"
    if isinstance(item, dict) and isinstance(item.get("name"), str) and _POOL_NAME.fullmatch(item["name"]):
        p = f"pools[{item['name']}]"  # paths name the pool once its name is readable
    if not isinstance(item, dict):
        problems.append(f"{p}: must be a mapping, got {type(item).__name__} {item!r}")
        return None
    d = dict(item)
    ref = None
    if "workload" in d:
        ref, _ = validate(WorkloadRef, d.pop("workload"), dotted(f"{p}.workload"), problems)
    else:
        problems.append(f"{p}.workload: is required, e.g. {{namespace: shop, name: checkout}}")
    # a bad or missing workload is reported above; its stand-ins keep the pool's other problems in view
    d["namespace"], d["workload"] = (ref.namespace, ref.name) if ref else ("-", "-")
    d.setdefault("series", f"{d['namespace']}/{d['workload']}")
    spec, failed = validate(PoolSpec, d, dotted(p), problems)
    problems.extend(_pool_rules(partial(PoolSpec, d, failed), item, p, known_rc, seen))
    return spec


def _pool_rules(v: dict[str, Any], item: dict, p: str, known_rc: set[str], seen: set[str]) -> list[str]:
    """What no single field can check: every rule reads only fields that passed their own checks
    (``v``, with defaults for the others), so one pass reports all of a pool's problems."""
    out = []
    name = v["name"]
    if isinstance(name, str):
        if name in seen:
            out.append(f"{p}: pool {name!r} is listed twice; pool names are unique")
        seen.add(name)
    kind = BACKENDS.get(v["backend"], CONTAINER)
    known = seeded_classes(kind) | known_rc
    if isinstance(v["runtime_class"], str) and v["runtime_class"] not in known:
        out.append(f"{p}.runtime_class: {v['runtime_class']!r} has no {kind}-start seed (backend {v['backend']} starts "
                   f"{kind}s); known: {', '.join(sorted(known))} (add it under runtime_classes)")
    if v["min_warm"] > v["max_warm"]:
        out.append(f"{p}.min_warm: {v['min_warm']} must be <= max_warm ({v['max_warm']})")
    ttl = partial(IdleTTL, item.get("idle_ttl"), set())
    floor, initial = ttl["floor_seconds"], ttl["initial_seconds"]
    if _num(floor) and _num(initial) and floor > initial:
        out.append(f"{p}.idle_ttl.floor_seconds: {floor!r} must be <= initial_seconds ({initial!r})")
    out += _demand_rules(v, item, p)
    return out


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _demand_rules(v: dict[str, Any], item: dict, p: str) -> list[str]:
    """``demand`` and ``request_rate`` together: requests or both need a request_rate, and a
    request_rate needs a demand that reads it (otherwise it would be silently ignored)."""
    if item.get("demand", "cpu") not in DEMANDS:
        return []  # reported with the field: nothing to check the request rate against
    demand = v["demand"]
    if "request_rate" not in item:
        if demand != "cpu":
            return [f"{p}.request_rate: is required with demand: {demand} "
                    "(e.g. {series: shop/checkout-rps, concurrency_per_container: 20})"]
        return []
    if demand == "cpu" and "demand" in item:
        return [f"{p}.demand: is cpu, so request_rate would be ignored; use demand: requests (request rate only) or both"]
    if demand == "cpu":
        return [f"{p}.demand: must be requests or both when request_rate is set (the default, cpu, ignores it)"]
    return []


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    """The policy document -> a ``Policy``, or a ``ConfigError`` listing every problem, each
    with its path (``pools[web].idle_ttl.decay: 1.5 must be in [0, 1)``)."""
    problems: list[str] = []
    data = drop_nulls(data)
    doc, failed = validate(PolicyDocument, data, dotted(""), problems)
    top = data if isinstance(data, dict) else {}
    rc = top.get("runtime_classes")
    known_rc = {str(k) for k in rc} if isinstance(rc, dict) else set()
    raw_pools: list[Any] = top["pools"] if isinstance(top.get("pools"), list) else []
    seen: set[str] = set()
    pools = [s for i, item in enumerate(raw_pools) if (s := _pool(item, i, known_rc, seen, problems)) is not None]
    if problems or doc is None:
        raise ConfigError(source, problems)
    return Policy(pools=tuple(pools), runtime_classes=dict(doc.runtime_classes), memory_budget=doc.memory_budget)


def load_policy(path: str | Path) -> Policy:
    return parse_policy(read_yaml(path), str(path))
