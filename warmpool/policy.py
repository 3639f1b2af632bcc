"""Warm-pool policy YAML -> frozen objects, validated strictly (every problem at once, each
with its path and value).

```yaml
apiVersion: foresight/v1alpha1
kind: WarmPoolPolicy
runtime_classes:            # optional: extra cold-start profiles (ms), or overrides
  gvisor: {runtime_ms: [20, 30, 50], image_ms: [40, 66, 104], sandbox_ms: [120, 160, 230]}
pools:
  - name: checkout
    workload: {namespace: shop, name: checkout}
    series: shop/checkout   # forecast series driving the pool (default namespace/name)
    quantile: p90           # forecast quantile used for the peak (default p90, else mean)
    runtime_class: crun     # crun, kata, runc or a name from runtime_classes
    backend: crun           # crun, runc, kubernetes or sim
    template:
      image: busybox        # kubernetes image; local backends use a busybox-static bundle
      command: [sleep, "3600"]
      resources: {cpu: 250m, memory: 64Mi}
    min_warm: 1
    max_warm: 10
    capacity_per_container: 0.5   # demand units (cores or requests/s) one container absorbs
    lead_seconds: 90
    idle_ttl: {initial_seconds: 120, decay: 0.15, floor_seconds: 10}
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


from forecaster.config import read_yaml
from forecaster.errors import ConfigError
from warmpool.ttl import IdleTTL

BACKENDS = ("crun", "runc", "kubernetes", "sim")
BUILTIN_RUNTIME_CLASSES = ("crun", "kata", "runc")
_DNS = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?")


@dataclass(frozen=True)
class Template:
    image: str = "busybox"
    command: tuple[str, ...] = ("sleep", "3600")
    resources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuntimeProfile:
    """Seed cold-start components (ms, as (p50, p90, p99)) of a runtime class."""

    runtime_ms: tuple[float, float, float]
    image_ms: tuple[float, float, float]
    sandbox_ms: tuple[float, float, float]


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


@dataclass(frozen=True)
class Policy:
    pools: tuple[PoolSpec, ...]
    runtime_classes: Mapping[str, RuntimeProfile] = field(default_factory=dict)

    def pool(self, name: str) -> PoolSpec | None:
        return next((p for p in self.pools if p.name == name), None)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if value is None:
            for k in required:
                self.add(f"{path}.{k}" if path else k, "is required")
            return {}
        if not isinstance(value, dict):
            self.add(path or "<top>", f"must be a mapping, got {type(value).__name__} {value!r}")
            return {}
        for k in value:
            if k not in allowed:
                self.add(f"{path}.{k}" if path else str(k), f"unknown key; allowed keys: {', '.join(allowed)}")
        for k in required:
            if value.get(k) is None:
                self.add(f"{path}.{k}" if path else k, "is required")
        return value

    def number(self, d: dict, key: str, path: str, default: float, *, lo=None, lo_open=False, hi=None, hi_open=False, integer=False):
        p = f"{path}.{key}"
        if key not in d or d[key] is None:
            return default
        v = d[key]
        kinds = (int,) if integer else (int, float)
        if isinstance(v, bool) or not isinstance(v, kinds):
            self.add(p, f"must be {'an integer' if integer else 'a number'}, got {type(v).__name__} {v!r}")
            return default
        bad = (
            (lo is not None and (v <= lo if lo_open else v < lo))
            or (hi is not None and (v >= hi if hi_open else v > hi))
        )
        if bad:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            rng = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"
            self.add(p, f"{v!r} must be in {rng}")
            return default
        return v

    def string(self, d: dict, key: str, path: str, default: str | None, *, pattern=None, choices=None, hint=""):
        p = f"{path}.{key}"
        if key not in d or d[key] is None:
            return default
        v = d[key]
        if not isinstance(v, str):
            self.add(p, f"must be a string, got {type(v).__name__} {v!r}")
            return default
        if pattern is not None and not pattern.fullmatch(v):
            self.add(p, f"{v!r} {hint or 'is not valid'}")
            return default
        if choices is not None and v not in choices:
            self.add(p, f"{v!r} must be one of {', '.join(choices)}")
            return default
        return v


def _triple(c: _Checker, v: Any, path: str) -> tuple[float, float, float] | None:
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


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    c = _Checker()
    top = c.mapping(data, "", ("apiVersion", "kind", "runtime_classes", "pools"), required=("apiVersion", "kind", "pools"))
    if data is not None and not isinstance(data, dict):
        raise ConfigError(source, c.problems)
    if "apiVersion" in top and top["apiVersion"] != "foresight/v1alpha1":
        c.add("apiVersion", f"{top['apiVersion']!r} is not supported; use foresight/v1alpha1")
    if "kind" in top and top["kind"] != "WarmPoolPolicy":
        c.add("kind", f"{top['kind']!r} must be WarmPoolPolicy")

    profiles: dict[str, RuntimeProfile] = {}
    rc = top.get("runtime_classes")
    if rc is not None:
        if not isinstance(rc, dict):
            c.add("runtime_classes", f"must map runtime class names to profiles, got {rc!r}")
        else:
            for name, prof in rc.items():
                p = f"runtime_classes.{name}"
                if not isinstance(name, str) or not _DNS.fullmatch(name):
                    c.add(p, "runtime class names are lowercase DNS labels")
                pd = c.mapping(prof, p, ("runtime_ms", "image_ms", "sandbox_ms"), required=("runtime_ms", "image_ms", "sandbox_ms"))
                trip = [_triple(c, pd[k], f"{p}.{k}") if k in pd else None for k in ("runtime_ms", "image_ms", "sandbox_ms")]
                if all(t is not None for t in trip):
                    profiles[str(name)] = RuntimeProfile(*trip)  # type: ignore[arg-type]
    known_rc = set(BUILTIN_RUNTIME_CLASSES) | set(profiles) | (set(rc) if isinstance(rc, dict) else set())

    pools: list[PoolSpec] = []
    raw = top.get("pools")
    if "pools" in top and not isinstance(raw, list):
        c.add("pools", f"must be a list of pools, got {type(raw).__name__}")
        raw = []
    elif isinstance(raw, list) and not raw:
        c.add("pools", "must list at least one pool")
    seen: set[str] = set()
    pool_keys = (
        "name", "workload", "series", "quantile", "runtime_class", "backend", "template", "min_warm",
        "max_warm", "capacity_per_container", "lead_seconds", "idle_ttl",
    )
    for i, item in enumerate(raw or []):
        p = f"pools[{i}]"
        if isinstance(item, dict) and isinstance(item.get("name"), str) and _DNS.fullmatch(item["name"]):
            p = f"pools[{item['name']}]"  # paths name the pool once its name is readable
        d = c.mapping(item, p, pool_keys, required=("name", "workload"))
        if not isinstance(item, dict):
            continue
        name = c.string(d, "name", p, "", pattern=_DNS, hint="must be a lowercase DNS label (a-z, 0-9, '-')")
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
        if runtime_class not in known_rc:
            c.add(f"{p}.runtime_class", f"{runtime_class!r} has no cold-start profile; known: {', '.join(sorted(known_rc))} (add it under runtime_classes)")
        backend = c.string(d, "backend", p, "crun", choices=BACKENDS)
        t = c.mapping(d.get("template"), f"{p}.template", ("image", "command", "resources"))
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
        min_warm = c.number(d, "min_warm", p, 0, lo=0, integer=True)
        max_warm = c.number(d, "max_warm", p, 10, lo=0, integer=True)
        if isinstance(min_warm, int) and isinstance(max_warm, int) and min_warm > max_warm:
            c.add(f"{p}.min_warm", f"{min_warm} must be <= max_warm ({max_warm})")
        cap = c.number(d, "capacity_per_container", p, 1.0, lo=0, lo_open=True)
        lead = c.number(d, "lead_seconds", p, 90.0, lo=0)
        ttl_d = c.mapping(d.get("idle_ttl"), f"{p}.idle_ttl", ("initial_seconds", "decay", "floor_seconds"))
        tp = f"{p}.idle_ttl"
        initial = c.number(ttl_d, "initial_seconds", tp, 120.0, lo=0, lo_open=True)
        decay = c.number(ttl_d, "decay", tp, 0.15, lo=0, hi=1, hi_open=True)
        floor = c.number(ttl_d, "floor_seconds", tp, 0.0, lo=0)
        if floor > initial:
            c.add(f"{tp}.floor_seconds", f"{floor!r} must be <= initial_seconds ({initial!r})")
        pools.append(
            PoolSpec(
                name=name or f"pool-{i}",
                namespace=ns or "",
                workload=wl or "",
                series=series or "",
                runtime_class=runtime_class or "crun",
                backend=backend or "crun",
                template=Template(image=image or "busybox", command=tuple(cmd), resources={k: str(v) for k, v in res.items()}),
                min_warm=int(min_warm),
                max_warm=int(max_warm),
                capacity_per_container=float(cap),
                lead_seconds=float(lead),
                idle_ttl=IdleTTL(float(initial), float(decay), float(floor)),
                quantile=quantile or "p90",
            )
        )
    if c.problems:
        raise ConfigError(source, c.problems)
    return Policy(pools=tuple(pools), runtime_classes=profiles)


def load_policy(path: str | Path) -> Policy:
    return parse_policy(read_yaml(path), str(path))
