"""Warm-pool policy YAML -> frozen objects, validated strictly (every problem at once, each
with its path and value).

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
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from forecaster.config import read_yaml
from forecaster.errors import ConfigError
from warmpool.checker import Checker
from warmpool.coldstart import CONTAINER, POD, RuntimeProfile, seeded_classes
from warmpool.ttl import IdleTTL

# each backend and the kind of start it makes (its ``start_kind``; the sim backend's default)
BACKENDS = {"crun": CONTAINER, "runc": CONTAINER, "kubernetes": POD, "sim": CONTAINER}
DEFAULT_MAX_COLD_PER_MINUTE = 30  # cold starts per pool per sliding minute (claims beyond get 429)
DEFAULT_LEASE_SECONDS = 300.0  # a claim's lease unless renewed
LEASE_EXPIRY_ACTIONS = ("delete", "release")
DEFAULT_MEMORY_MB = 256.0  # prices idle containers of a pool whose template names no memory
_DNS = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A pool's name: a DNS label the admin writes (``checkout``), or ``<namespace>.<name>`` for a
# WarmPool object (pool_id). A namespace is a DNS label, so the first '.' ends it: two objects
# never share an id, and an admin's pool named as a DNS label never takes an object's. Dots are
# valid wherever the name goes (the pod label value foresight.dev/pool, pod names and crun/runc
# ids ``fs-<pool>-<hex>``, the API path /api/v1/pools/<pool>); '/' is not (label values, runc
# ids). 63: a label value's limit.
MAX_POOL_NAME = 63
_POOL_NAME = re.compile(r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def pool_id(namespace: str, name: str) -> str:
    """The controller's pool name of the WarmPool ``namespace/name``."""
    return f"{namespace}.{name}"


_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?")
_UNIT_BYTES = {None: 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
               "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


@dataclass(frozen=True)
class Template:
    image: str = "busybox"
    command: tuple[str, ...] = ("sleep", "3600")
    resources: Mapping[str, str] = field(default_factory=dict)


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

    enabled: bool = True
    bin_seconds: float = 60.0
    prior_scale: float = 0.5
    prior_power: float = 1.0
    prior_weight: float = 10.0
    previous_gap_weight: float = 3.0
    hold_on_ttl: bool = False


@dataclass(frozen=True)
class RequestRate:
    """A predicted request rate the pool follows: the forecast of ``series`` (requests/s), of
    which one container serves ``concurrency_per_container``."""

    series: str
    concurrency_per_container: float


@dataclass(frozen=True)
class MemoryBudget:
    """Idle memory of all pools together stays near ``fraction`` x what a fixed keep-alive of
    ``reference_keepalive_seconds`` would have held on the same demand."""

    fraction: float = 1.0
    reference_keepalive_seconds: float = 600.0


@dataclass(frozen=True)
class PoolSpec:
    name: str
    namespace: str
    workload: str
    series: str
    runtime_class: str = "crun"
    backend: str = "crun"
    template: Template = field(default_factory=Template)
    min_warm: int = 0
    max_warm: int = 10
    capacity_per_container: float = 1.0
    lead_seconds: float = 90.0
    idle_ttl: IdleTTL = field(default_factory=IdleTTL)
    quantile: str = "p90"
    idle_model: IdleModel = field(default_factory=IdleModel)
    max_cold_per_minute: int = DEFAULT_MAX_COLD_PER_MINUTE
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    on_lease_expiry: str = "delete"
    demand: str = "cpu"  # cpu | requests | both: which forecasts size the pool
    request_rate: RequestRate | None = None

    @property
    def forecast_series(self) -> tuple[str, ...]:
        """The forecast series this pool reads: ``series`` (cpu), the request rate's, or both."""
        out = () if self.demand == "requests" else (self.series,)
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


def _triple(c: Checker, v: Any, path: str) -> tuple[float, float, float] | None:
    if (
        not isinstance(v, list)
        or len(v) != 3
        or any(isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 for x in v)
    ):
        c.add(path, f"must be [p50, p90, p99] in ms (three numbers >= 0), got {v!r}")
        return None
    if not v[0] <= v[1] <= v[2]:
        c.add(path, f"{v!r} must be non-decreasing (p50 <= p90 <= p99)")
        return None
    return (float(v[0]), float(v[1]), float(v[2]))


def _runtime_classes(c: Checker, rc: Any) -> dict[str, RuntimeProfile]:
    profiles: dict[str, RuntimeProfile] = {}
    if rc is None:
        return profiles
    if not isinstance(rc, dict):
        c.add("runtime_classes", f"must map runtime class names to profiles, got {rc!r}")
        return profiles
    keys = ("runtime_ms", "image_ms", "sandbox_ms")
    for name, prof in rc.items():
        p = f"runtime_classes.{name}"
        if not isinstance(name, str) or not _DNS.fullmatch(name):
            c.add(p, "runtime class names are lowercase DNS labels")
        pd = c.mapping(prof, p, keys, required=keys)
        trip = [_triple(c, pd[k], f"{p}.{k}") if k in pd else None for k in keys]
        if all(t is not None for t in trip):
            profiles[str(name)] = RuntimeProfile(*trip)  # type: ignore[arg-type]
    return profiles


def _memory_budget(c: Checker, raw: Any) -> MemoryBudget:
    d = c.mapping(raw, "memory_budget", ("fraction", "reference_keepalive_seconds"))
    fraction = c.number(d, "fraction", "memory_budget", 1.0, lo=0, lo_open=True, hi=10)
    ref = c.number(d, "reference_keepalive_seconds", "memory_budget", 600.0, lo=0, lo_open=True)
    return MemoryBudget(float(fraction), float(ref))


def _idle_ttl(c: Checker, raw: Any, p: str) -> IdleTTL:
    tp = f"{p}.idle_ttl"
    d = c.mapping(raw, tp, ("initial_seconds", "decay", "floor_seconds"))
    initial = c.number(d, "initial_seconds", tp, 120.0, lo=0, lo_open=True)
    decay = c.number(d, "decay", tp, 0.15, lo=0, hi=1, hi_open=True)
    floor = c.number(d, "floor_seconds", tp, 0.0, lo=0)
    if floor > initial:
        c.add(f"{tp}.floor_seconds", f"{floor!r} must be <= initial_seconds ({initial!r})")
    return IdleTTL(float(initial), float(decay), float(floor))


def _idle_model(c: Checker, raw: Any, p: str) -> IdleModel:
    mp = f"{p}.idle_model"
    d = c.mapping(raw, mp, ("enabled", "bin_seconds", "prior_scale", "prior_power", "prior_weight", "previous_gap_weight", "hold_on_ttl"))
    return IdleModel(
        enabled=c.boolean(d, "enabled", mp, True),
        bin_seconds=float(c.number(d, "bin_seconds", mp, 60.0, lo=1, hi=3600)),
        prior_scale=float(c.number(d, "prior_scale", mp, 0.5, lo=0, lo_open=True, hi=1)),
        prior_power=float(c.number(d, "prior_power", mp, 1.0, lo=0, lo_open=True, hi=10)),
        prior_weight=float(c.number(d, "prior_weight", mp, 10.0, lo=0, lo_open=True)),
        previous_gap_weight=float(c.number(d, "previous_gap_weight", mp, 3.0, lo=0)),
        hold_on_ttl=c.boolean(d, "hold_on_ttl", mp, False),
    )


def _request_rate(c: Checker, d: dict, p: str) -> tuple[str, RequestRate | None]:
    """``demand`` and ``request_rate`` together: requests or both need a request_rate, and a
    request_rate needs a demand that reads it (otherwise it would be silently ignored)."""
    demand = c.string(d, "demand", p, "cpu", choices=DEMANDS) or "cpu"
    rp = f"{p}.request_rate"
    raw = d.get("request_rate")
    if raw is None:
        if demand != "cpu":
            c.add(rp, f"is required with demand: {demand} (e.g. {{series: shop/checkout-rps, concurrency_per_container: 20}})")
        return demand, None
    r = c.mapping(raw, rp, ("series", "concurrency_per_container"), required=("series", "concurrency_per_container"))
    if not isinstance(raw, dict):
        return demand, None
    series = c.string(r, "series", rp, "")
    if "series" in r and isinstance(r["series"], str) and not r["series"].strip():
        c.add(f"{rp}.series", "must be a non-empty forecast series id of requests/s like <namespace>/<name>-rps")
    conc = c.number(r, "concurrency_per_container", rp, 1.0, lo=0, lo_open=True)
    if demand == "cpu" and "demand" in d:
        c.add(f"{p}.demand", "is cpu, so request_rate would be ignored; use demand: requests (request rate only) or both")
    elif demand == "cpu":
        c.add(f"{p}.demand", "must be requests or both when request_rate is set (the default, cpu, ignores it)")
    return demand, RequestRate(series or "", float(conc))


def _template(c: Checker, raw: Any, p: str) -> Template:
    t = c.mapping(raw, f"{p}.template", ("image", "command", "resources"))
    image = c.string(t, "image", f"{p}.template", "busybox")
    cmd = t.get("command", ["sleep", "3600"])
    if not isinstance(cmd, list) or not cmd or not all(isinstance(x, str) for x in cmd):
        c.add(f"{p}.template.command", f"must be a non-empty list of strings, got {cmd!r}")
        cmd = ["sleep", "3600"]
    res = t.get("resources") or {}
    if not isinstance(res, dict):
        c.add(f"{p}.template.resources", f"must be a mapping like {{cpu: 250m, memory: 64Mi}}, got {res!r}")
        res = {}
    for k, v in res.items():
        if k not in ("cpu", "memory"):
            c.add(f"{p}.template.resources.{k}", "unknown key; allowed keys: cpu, memory")
        elif not isinstance(v, (str, int, float)) or isinstance(v, bool) or not _QUANTITY.fullmatch(str(v)):
            c.add(f"{p}.template.resources.{k}", f"{v!r} must be a Kubernetes quantity like 250m or 64Mi")
    return Template(image=image or "busybox", command=tuple(cmd), resources={k: str(v) for k, v in res.items()})


POOL_KEYS = (
    "name", "workload", "series", "quantile", "runtime_class", "backend", "template", "min_warm",
    "max_warm", "capacity_per_container", "lead_seconds", "idle_ttl", "idle_model", "max_cold_per_minute",
    "lease_seconds", "on_lease_expiry", "demand", "request_rate",
)
DEMANDS = ("cpu", "requests", "both")


def _pool(c: Checker, item: Any, i: int, known_rc: set[str], seen: set[str]) -> PoolSpec | None:
    p = f"pools[{i}]"
    if isinstance(item, dict) and isinstance(item.get("name"), str) and _POOL_NAME.fullmatch(item["name"]):
        p = f"pools[{item['name']}]"  # paths name the pool once its name is readable
    d = c.mapping(item, p, POOL_KEYS, required=("name", "workload"))
    if not isinstance(item, dict):
        return None
    name = c.string(d, "name", p, "", pattern=_POOL_NAME, hint=f"must be a lowercase DNS label (a-z, 0-9, '-'), or "
                    f"<namespace>.<name> for a WarmPool object, at most {MAX_POOL_NAME} characters")
    if name:
        if name in seen:
            c.add(p, f"pool {name!r} is listed twice; pool names are unique")
        seen.add(name)
    w = c.mapping(d.get("workload"), f"{p}.workload", ("namespace", "name"), required=("namespace", "name") if "workload" in d else ())
    ns = c.string(w, "namespace", f"{p}.workload", "", pattern=_DNS, hint="must be a lowercase DNS label")
    wl = c.string(w, "name", f"{p}.workload", "", pattern=_DNS, hint="must be a lowercase DNS label")
    series = c.string(d, "series", p, f"{ns}/{wl}")
    if series is not None and not series.strip():
        c.add(f"{p}.series", "must be a non-empty forecast series id like <namespace>/<name>")
    quantile = c.string(d, "quantile", p, "p90", pattern=re.compile(r"mean|p[0-9]+(\.[0-9]+)?"), hint="must be 'mean' or a quantile key like p50, p90")
    runtime_class = c.string(d, "runtime_class", p, "crun")
    backend = c.string(d, "backend", p, "crun", choices=BACKENDS)
    kind = BACKENDS.get(backend or "crun", CONTAINER)
    known = seeded_classes(kind) | known_rc
    if runtime_class not in known:
        c.add(f"{p}.runtime_class", f"{runtime_class!r} has no {kind}-start seed (backend {backend} starts {kind}s); "
                                    f"known: {', '.join(sorted(known))} (add it under runtime_classes)")
    min_warm = c.number(d, "min_warm", p, 0, lo=0, integer=True)
    max_warm = c.number(d, "max_warm", p, 10, lo=0, integer=True)
    if isinstance(min_warm, int) and isinstance(max_warm, int) and min_warm > max_warm:
        c.add(f"{p}.min_warm", f"{min_warm} must be <= max_warm ({max_warm})")
    demand, rate = _request_rate(c, d, p)
    return PoolSpec(
        name=name or f"pool-{i}",
        namespace=ns or "",
        workload=wl or "",
        series=series or "",
        runtime_class=runtime_class or "crun",
        backend=backend or "crun",
        template=_template(c, d.get("template"), p),
        min_warm=int(min_warm),
        max_warm=int(max_warm),
        capacity_per_container=float(c.number(d, "capacity_per_container", p, 1.0, lo=0, lo_open=True)),
        lead_seconds=float(c.number(d, "lead_seconds", p, 90.0, lo=0)),
        idle_ttl=_idle_ttl(c, d.get("idle_ttl"), p),
        quantile=quantile or "p90",
        idle_model=_idle_model(c, d.get("idle_model"), p),
        max_cold_per_minute=int(c.number(d, "max_cold_per_minute", p, DEFAULT_MAX_COLD_PER_MINUTE, lo=0, hi=100_000, integer=True)),
        lease_seconds=float(c.number(d, "lease_seconds", p, DEFAULT_LEASE_SECONDS, lo=1, hi=7 * 86400)),
        on_lease_expiry=c.string(d, "on_lease_expiry", p, "delete", choices=LEASE_EXPIRY_ACTIONS) or "delete",
        demand=demand,
        request_rate=rate,
    )


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    c = Checker()
    top = c.mapping(data, "", ("apiVersion", "kind", "runtime_classes", "memory_budget", "pools"), required=("apiVersion", "kind", "pools"))
    if data is not None and not isinstance(data, dict):
        raise ConfigError(source, c.problems)
    if "apiVersion" in top and top["apiVersion"] != "foresight/v1alpha1":
        c.add("apiVersion", f"{top['apiVersion']!r} is not supported; use foresight/v1alpha1")
    if "kind" in top and top["kind"] != "WarmPoolPolicy":
        c.add("kind", f"{top['kind']!r} must be WarmPoolPolicy")
    rc = top.get("runtime_classes")
    profiles = _runtime_classes(c, rc)
    known_rc = set(profiles) | (set(rc) if isinstance(rc, dict) else set())
    budget = _memory_budget(c, top.get("memory_budget"))
    raw = top.get("pools")
    if "pools" in top and not isinstance(raw, list):  # [] is a controller with nothing to keep warm yet
        c.add("pools", f"must be a list of pools, got {type(raw).__name__}")
        raw = []
    seen: set[str] = set()
    pools = [s for i, item in enumerate(raw or []) if (s := _pool(c, item, i, known_rc, seen)) is not None]
    if c.problems:
        raise ConfigError(source, c.problems)
    return Policy(pools=tuple(pools), runtime_classes=profiles, memory_budget=budget)


def load_policy(path: str | Path) -> Policy:
    return parse_policy(read_yaml(path), str(path))
