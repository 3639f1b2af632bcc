"""History backfilled into the node's in-cluster Prometheus (tests/cluster/manifests/prometheus.yaml).

A workload's past CPU use is written as the counter the kubelet's resource endpoint exports
(``container_cpu_usage_seconds_total{namespace, pod, container}``, job ``kubelet-resource``), so
the trainer's default demand query (``sum(rate(...{pod=~"<name>-...",container!=""}[2m]))``)
reads history and live pods as one series. ``promtool tsdb create-blocks-from openmetrics``
turns it into TSDB blocks; they are copied into the Prometheus pod's data volume (its emptyDir on
the node's disk) and owned by the pod's user, and Prometheus loads them at its next block reload
(once a minute).

- The history's last sample may lie a little in the future: until then Prometheus refuses
  scraped samples older than the newest block (its head's minimum valid time), which only costs
  the scrapes of those seconds; the live load starts when the history ends, so the ``rate()``
  windows hand over from the history's pod to the live pods with no double count.
- Retention applies to backfilled blocks: :func:`deploy_prometheus` raises it (the shipped
  manifest keeps a day).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import httpx

from tests.cluster import nodenet
from tests.cluster.addons import PROMETHEUS_MANIFEST
from tests.cluster.controlplane import wait_for

METRIC = "container_cpu_usage_seconds_total"
PROMETHEUS_UID = 65534  # the pod's runAsUser: it compacts and deletes blocks


class BackfillError(RuntimeError):
    pass


def deploy_prometheus(node, retention: str = "30d", timeout: float = 180) -> tuple[str, dict]:
    """The node's Prometheus with ``retention``; returns (base URL, its pod)."""
    cp = node.cp
    text = PROMETHEUS_MANIFEST.read_text()
    if "--storage.tsdb.retention.time=1d" not in text:
        raise BackfillError(f"{PROMETHEUS_MANIFEST} no longer sets --storage.tsdb.retention.time=1d: update backfill.py")
    cp.kubectl("apply", "--server-side", "-f", "-",
               input=text.replace("IMAGE", node.images["prometheus"]["ref"])
               .replace("KUBELET", f"{nodenet.NODE_IP}:{node.kubelet_port}")
               .replace("--storage.tsdb.retention.time=1d", f"--storage.tsdb.retention.time={retention}"))

    def ready_pod() -> dict | None:
        node.check_alive()
        for p in cp.admin.json("/api/v1/namespaces/monitoring/pods", labelSelector="app=prometheus")["items"]:
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])):
                return p
        return None

    pod = wait_for("Prometheus Ready", ready_pod, timeout=timeout, interval=1)
    return f"http://{pod['status']['podIP']}:9090", pod


def counter_samples(cores: Callable[[float], float], start: float, end: float, step: float) -> list[tuple[float, float]]:
    """(unix time, cumulative CPU seconds) every ``step`` from ``start`` to ``end`` for a usage of
    ``cores(t)`` (trapezoids)."""
    out, total, t, prev = [], 0.0, start, cores(start)
    while t <= end + 1e-9:
        out.append((t, total))
        nxt = cores(t + step)
        total += (prev + nxt) / 2 * step
        prev, t = nxt, t + step
    return out


def openmetrics(series: list[tuple[dict, list[tuple[float, float]]]]) -> str:
    """One counter family (METRIC), each series' samples together, then ``# EOF``."""
    name = METRIC.removesuffix("_total")
    lines = [f"# TYPE {name} counter"]
    for labels, samples in series:
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines += [f"{METRIC}{{{lab}}} {v:.6f} {t:.3f}" for t, v in samples]
    return "\n".join(lines) + "\n# EOF\n"


def history_labels(node, namespace: str, workload: str) -> dict:
    """A pod of the workload's Deployment as the trainer's query matches it
    (``<name>-<ReplicaSet hash>-<5 chars>`` of forecaster.workloads.POD_NAME_ALPHABET), gone
    before the live pods came."""
    return {"namespace": namespace, "pod": f"{workload}-hstrc-bkfll", "container": "app", "job": "kubelet-resource",
            "instance": f"{nodenet.NODE_IP}:{node.kubelet_port}", "node": node.name}


def _data_dir(node, pod: dict) -> Path:
    d = node.dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir" / "data"
    if not d.is_dir():
        raise BackfillError(f"the Prometheus pod's data volume is not at {d}")
    return d


def backfill(node, prometheus_url: str, pod: dict, series: list[tuple[dict, list[tuple[float, float]]]],
             timeout: float = 150) -> dict:
    """Write ``series`` into the running Prometheus; returns timings. Waits until a query at
    the last sample's time sees every series."""
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="foresight-backfill-"))
    try:
        src = work / "history.om"
        src.write_text(openmetrics(series))
        blocks = work / "blocks"
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(src), str(blocks)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise BackfillError(f"promtool create-blocks-from openmetrics failed ({r.returncode}): {r.stderr[-2000:]}")
        t_blocks = time.monotonic() - t0
        dest = _data_dir(node, pod)
        made = [b for b in blocks.iterdir() if b.is_dir()]
        for b in made:  # copied beside the data dir first, then renamed in: Prometheus never sees half a block
            tmp = dest / f".{b.name}.tmp"
            shutil.copytree(b, tmp)
            subprocess.run(["chown", "-R", f"{PROMETHEUS_UID}:{PROMETHEUS_UID}", str(tmp)], check=True)
            tmp.rename(dest / b.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    last = max(s[-1][0] for _, s in series)
    first = min(s[0][0] for _, s in series)

    def visible() -> bool:
        node.check_alive()
        seen = 0
        for labels, _ in series:
            sel = ",".join(f'{k}="{labels[k]}"' for k in ("namespace", "pod", "container"))
            q = f"count_over_time({METRIC}{{{sel}}}[1h])"
            # both ends of the history: the oldest block and the newest
            hits = [httpx.get(f"{prometheus_url}/api/v1/query", params={"query": q, "time": t}, timeout=10)
                    .json()["data"]["result"] for t in (first + 1800, min(last, time.time()))]
            seen += all(hits)
        return seen == len(series)

    wait_for("the backfilled history visible in Prometheus (block reload, once a minute)", visible,
             timeout=timeout, interval=3)
    return {"blocks": len(made), "promtool_seconds": round(t_blocks, 1), "visible_seconds": round(time.monotonic() - t0, 1),
            "samples": sum(len(s) for _, s in series), "first": first, "last": last}
