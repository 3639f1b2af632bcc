"""The operator's loop: a level-based pass over every object, woken by watches (thin runner).

Each pass lists PredictiveAutoscalers and WarmPools, reads their forecasts from the store and
the trainer's base ConfigMap, and writes through ``kube``: the HPAs (server-side apply, owned by
their autoscaler), statuses, Events, and the effective ConfigMaps of the trainer and the
warm-pool controller. Watches only wake the loop; every pass reads the full state again, so a
missed watch event costs at most one resync interval. The clock is injected.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

from core.store import ForecastStore, StoreError
from forecaster.served import MetricSettings
from kubeoperator.checks import SpecError
from kubeoperator.kube import KubeApi, KubeError
from kubeoperator.observe import Capacity
from kubeoperator.pools import claim_counts, warmpool_status
from kubeoperator.reconcile import invalid_event, prev_conditions, reconcile_autoscaler, refused_object
from kubeoperator.render import render_trainer_config, render_warmpool_policy
from kubeoperator.scaledobject import KEDA_API_VERSION, KedaTarget
from kubeoperator.spec import parse_autoscaler, parse_warmpool

log = logging.getLogger(__name__)
DIGEST_ANNOTATION = "foresight.dev/config-digest"


@dataclass(frozen=True)
class OperatorSettings:
    """Where the operator finds and writes the shared configuration (namespace of foresight).

    base_configmap/base_key: the user's trainer config (the ConfigMap path); effective_configmap:
    what the trainer mounts (base + autoscalers), which the trainer re-reads in place;
    trainer_deployment, adapter_deployment: restarted when it changes (off by default for the
    trainer; the adapter reads its workloads once). warmpool_*: the same for the warm-pool
    controller, which reloads its file by itself; warmpool_url: its HTTP API for the WarmPool status.
    """

    namespace: str = "foresight"
    base_configmap: str = "foresight-workloads"
    base_key: str = "workloads.yaml"
    effective_configmap: str = "foresight-trainer-config"
    # None: the trainer re-reads its file and takes a change in place (forecaster/configwatch.py);
    # a restart would lose its fitted states with the pod's checkpoint volume
    trainer_deployment: str | None = None
    adapter_deployment: str | None = None
    warmpool_base_configmap: str | None = "foresight-warmpool-base"
    warmpool_configmap: str | None = "foresight-warmpool-policy"
    warmpool_key: str = "policy.yaml"
    warmpool_url: str | None = None
    warmpool_ca: str | None = None  # the CA of the warm-pool API's certificate (None: the system's)
    resync_seconds: float = 15.0
    metrics: MetricSettings = field(default_factory=MetricSettings)
    keda: KedaTarget = field(default_factory=KedaTarget)  # where ScaledObjects (spec.scaler KEDA) find the scaler


@dataclass
class PassReport:
    autoscalers: int = 0
    warmpools: int = 0
    events: int = 0
    errors: list[str] = field(default_factory=list)
    refused: int = 0  # objects whose spec was refused (each told by its condition and an Event)
    crashed: int = 0  # objects (or whole phases) that raised something unexpected: logged, skipped


def _key(obj: Any) -> str:
    md = obj.get("metadata") if isinstance(obj, dict) else None
    md = md if isinstance(md, dict) else {}
    return f"{md.get('namespace', '?')}/{md.get('name', '?')}"


class Operator:
    def __init__(self, api: KubeApi, store: ForecastStore, settings: OperatorSettings = OperatorSettings(),
                 clock: Callable[[], float] = time.time, http_get: Callable[[str], str] | None = None):
        self.api, self.store, self.settings, self.clock = api, store, settings, clock
        self.http_get = http_get or (lambda url: _http_get(url, settings.warmpool_ca))
        self._wake = threading.Event()
        self._trainer_digest: str | None = None
        self._shadows: dict = {}  # Observe mode: (namespace, name) -> kubeoperator.observe.Shadow
        # base ConfigMap -> ownerReferences of what the operator writes from it: deleting the
        # base (helm uninstall) deletes the written one too (garbage collection)
        self._owners: dict[str, list[dict]] = {}

    # -- one pass
    def step(self) -> PassReport:
        """One pass. Never raises: a phase that fails (the API server down) is an error of the
        report, and the other phase still runs."""
        rep = PassReport()
        now = self.clock()
        phases = [("PredictiveAutoscalers", self._autoscalers)]
        if self.settings.warmpool_configmap:
            phases.append(("WarmPools", self._warmpools))
        for what, phase in phases:
            try:
                phase(now, rep)
            except KubeError as exc:
                rep.errors.append(str(exc))
            except Exception as exc:  # a bug must not stop the other phase or the loop
                log.exception("%s pass failed", what)
                rep.crashed += 1
                rep.errors.append(f"{what}: unexpected {type(exc).__name__}: {exc}")
        for e in rep.errors:
            log.warning("%s", e)
        return rep

    def _parse(self, objs: list, parse: Callable, rep: PassReport) -> tuple[list, list]:
        """(object, spec) of each valid object, and (object, SpecError) of each refused one:
        one object's bad spec never keeps the others from their pass."""
        good, bad = [], []
        for obj in objs:
            try:
                good.append((obj, parse(obj)))
            except SpecError as exc:
                bad.append((obj, exc))
            except Exception as exc:  # a parser bug costs this object only
                log.exception("parsing %s", _key(obj))
                rep.crashed += 1
                rep.errors.append(f"{_key(obj)}: unexpected {type(exc).__name__} while parsing: {exc}")
        return good, bad

    def _tell_refused(self, kind: str, bad: list, now: float, rep: PassReport, types: tuple[str, ...]) -> None:
        for obj, err in bad:
            rep.refused += 1
            try:
                status, events = refused_object(obj, err, now, types)
                md = obj["metadata"]
                self.api.patch_status(kind, md["namespace"], md["name"], status)
                for ev in events:
                    self.api.emit_event({**obj, "kind": kind}, ev, now)
                rep.events += len(events)
            except KubeError as exc:
                rep.errors.append(f"{_key(obj)}: {exc}")
            except Exception as exc:  # noqa: BLE001 - metadata too broken to address the object
                log.warning("%s %s is refused (%s) and cannot be told: %s", kind, _key(obj), err, exc)
                rep.errors.append(f"{_key(obj)}: refused, and its status cannot be written: {exc}")

    def _base(self, name: str | None, key: str) -> tuple[dict | None, str | None]:
        cm = self.api.get_configmap(self.settings.namespace, name) if name else None
        if cm is None:
            return None, None
        uid = (cm.get("metadata") or {}).get("uid")
        if uid:
            self._owners[name] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}]
        try:
            doc = yaml.safe_load((cm.get("data") or {}).get(key, "")) or {}
        except yaml.YAMLError as exc:
            return None, f"ConfigMap {name} key {key} is not valid YAML: {exc}"
        if not isinstance(doc, dict):
            return None, f"ConfigMap {name} key {key} must be a YAML mapping, got {type(doc).__name__}"
        return doc, None

    def _autoscalers(self, now: float, rep: PassReport) -> None:
        s = self.settings
        parsed, refused = self._parse(self.api.list("PredictiveAutoscaler"), parse_autoscaler, rep)
        self._tell_refused("PredictiveAutoscaler", refused, now, rep, ("Ready", "Degraded"))
        specs = [pa for _, pa in parsed]
        base, err = self._base(s.base_configmap, s.base_key)
        rendered = render_trainer_config(base, specs)
        if err:
            rendered.problems = {(p.namespace, p.name): [err] for p in specs}
        elif base is not None:
            self._write_trainer_config(rendered.text, rendered.digest)
        series = [p.series_id(m) for p in specs for m in p.metrics]
        forecasts, store_error = {}, None
        try:
            forecasts = self.store.latest_many(series) if series else {}
        except StoreError as exc:
            store_error = f"forecast store: {exc}"
        live = {(p.namespace, p.name) for p in specs}
        for k in [k for k in self._shadows if k not in live]:
            del self._shadows[k]
        for obj, pa in parsed:
            key = (pa.namespace, pa.name)
            try:
                cap = None
                if pa.mode == "Observe":
                    cap = Capacity(*self.api.replicas(pa.namespace, pa.target_kind, pa.target_name, pa.target_api_version))
                act = reconcile_autoscaler(obj, forecasts, now, problems=rendered.problems.get(key, ()),
                                           warnings=rendered.warnings.get(key, ()), store_error=store_error,
                                           settings=s.metrics, shadows=self._shadows, capacity=cap, keda=s.keda)
                if act.hpa is not None:
                    self.api.apply(act.hpa)
                else:  # Observe or KEDA: the HPA this autoscaler created (Act before) goes; a user's own stays
                    self.api.delete_owned_hpa(pa.namespace, pa.name, pa.uid)
                if act.scaled_object is not None:  # scaler KEDA (kubeoperator/scaledobject.py)
                    self.api.apply(act.scaled_object)
                elif act.delete_scaled_object:
                    self.api.delete_owned(KEDA_API_VERSION, "ScaledObject", pa.namespace, pa.name, pa.uid)
                self.api.patch_status("PredictiveAutoscaler", pa.namespace, pa.name, act.status)
                for ev in act.events:
                    self.api.emit_event({**obj, "kind": "PredictiveAutoscaler"}, ev, now)
                rep.events += len(act.events)
                rep.autoscalers += 1
            except KubeError as exc:
                rep.errors.append(f"{pa.namespace}/{pa.name}: {exc}")
            except Exception as exc:  # one object's bug never stops the others
                log.exception("reconciling PredictiveAutoscaler %s/%s", pa.namespace, pa.name)
                rep.crashed += 1
                rep.errors.append(f"{pa.namespace}/{pa.name}: unexpected {type(exc).__name__}: {exc}")

    def _write_trainer_config(self, text: str, digest: str) -> None:
        s = self.settings
        self.api.apply({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": s.effective_configmap, "namespace": s.namespace,
                                     "labels": {"app.kubernetes.io/managed-by": "foresight-operator"},
                                     "annotations": {DIGEST_ANNOTATION: digest},
                                     "ownerReferences": self._owners.get(s.base_configmap, [])},
                        "data": {s.base_key: text}})
        if digest != self._trainer_digest:
            # the trainer and the adapter read the file at start: a new digest on their pod
            # templates restarts them (the adapter's is a rolling update)
            for dep in (d for d in (s.trainer_deployment, s.adapter_deployment) if d):
                self.api.annotate_pod_template(s.namespace, dep, DIGEST_ANNOTATION, digest)
            self._trainer_digest = digest

    def _warmpools(self, now: float, rep: PassReport) -> None:
        s = self.settings
        parsed, refused = self._parse(self.api.list("WarmPool"), parse_warmpool, rep)
        self._tell_refused("WarmPool", refused, now, rep, ("Ready",))
        base, err = self._base(s.warmpool_base_configmap, s.warmpool_key)
        rendered = render_warmpool_policy(base, [wp for _, wp in parsed])
        self.api.apply({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": s.warmpool_configmap, "namespace": s.namespace,
                                     "labels": {"app.kubernetes.io/managed-by": "foresight-operator"},
                                     "ownerReferences": self._owners.get(s.warmpool_base_configmap or "", [])},
                        "data": {s.warmpool_key: rendered.text}})
        views, counts, ctl_error = self._controller_view()
        for obj, wp in parsed:
            problems = rendered.problems.get((wp.namespace, wp.name), []) + ([err] if err else [])
            try:
                st = warmpool_status(obj, views.get(wp.pool_name), counts.get(wp.pool_name), problems, ctl_error, now)
                self.api.patch_status("WarmPool", wp.namespace, wp.name, st)
                rep.warmpools += 1
                events = (invalid_event(prev_conditions(obj), "InvalidPool", "; ".join(problems), wp.generation)
                          if problems else [])
                for ev in events:
                    self.api.emit_event({**obj, "kind": "WarmPool"}, ev, now)
                rep.events += len(events)
            except KubeError as exc:
                rep.errors.append(f"{wp.namespace}/{wp.name}: {exc}")
            except Exception as exc:  # one object's bug never stops the others
                log.exception("WarmPool %s/%s", wp.namespace, wp.name)
                rep.crashed += 1
                rep.errors.append(f"{wp.namespace}/{wp.name}: unexpected {type(exc).__name__}: {exc}")

    def _controller_view(self) -> tuple[dict[str, dict], dict[str, tuple[float, float]], str | None]:
        url = self.settings.warmpool_url
        if not url:
            return {}, {}, "no warm-pool controller URL configured (--warmpool-url)"
        try:
            pools = json.loads(self.http_get(f"{url}/api/v1/pools")).get("pools", [])
            counts = claim_counts(self.http_get(f"{url}/metrics"))
        except (OSError, ValueError) as exc:
            return {}, {}, f"warm-pool controller at {url}: {exc}"
        return {p["pool"]: p for p in pools if "pool" in p}, counts, None

    # -- the loop
    def wake(self) -> None:
        self._wake.set()

    def run(self, stop: threading.Event, watch: bool = True) -> None:
        if watch:
            kinds = ["PredictiveAutoscaler"] + (["WarmPool"] if self.settings.warmpool_configmap else [])
            for kind in kinds:
                threading.Thread(target=self.api.watch, args=(kind, self.wake, stop), name=f"watch-{kind}",
                                 daemon=True).start()
        while not stop.is_set():
            self._wake.clear()
            try:
                rep = self.step()
                log.info("pass: %d autoscalers, %d warm pools, %d refused, %d events, %d errors, %d crashed",
                         rep.autoscalers, rep.warmpools, rep.refused, rep.events, len(rep.errors), rep.crashed)
            except Exception:  # step() catches per object; this is the last line
                log.exception("operator pass failed; the next one runs after the resync interval")
            self._wake.wait(self.settings.resync_seconds)
            stop.wait(0.2)  # a burst of watch events is one pass


# The warm-pool API authenticates callers (TokenReview): the operator sends its own
# service-account token when it runs in a pod.
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def _http_get(url: str, ca: str | None = None) -> str:
    import os

    import httpx

    headers = {}
    if os.path.exists(SA_TOKEN):
        with open(SA_TOKEN) as f:
            headers["Authorization"] = f"Bearer {f.read().strip()}"
    try:
        r = httpx.get(url, timeout=5.0, headers=headers, verify=ca if ca else True)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise OSError(str(exc)) from exc
    return r.text
