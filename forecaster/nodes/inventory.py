"""What node forecasts are computed from and published as: the PromQL, the series ids, and the
join of a scrape ``instance`` to a Kubernetes node name and zone.

The join (``NodeInventory.resolve``): node-exporter only knows its scrape ``instance``
(``10.0.3.7:9100`` with a plain pod scrape, or the node name when the scrape config relabels
``instance`` from ``__meta_kubernetes_pod_node_name`` / ``__meta_kubernetes_node_name``, as
kube-prometheus does). We strip the port, then match, in order,
(a) a node name from ``kube_node_info{node=...}``, (b) ``kube_node_info{internal_ip=...}``.
A series that carries a ``node`` label instead (cAdvisor's
``container_memory_working_set_bytes`` summed ``by (node)``) matches by (a). The zone comes
from ``kube_node_labels{label_topology_kubernetes_io_zone=...}`` (falling back to the
deprecated ``failure-domain.beta.kubernetes.io/zone`` label). kube-state-metrics v2 exports
node labels only when allowed: ``--metric-labels-allowlist=nodes=[topology.kubernetes.io/zone]``.
Without kube-state-metrics the stripped instance host is used as the node name and the zone is
left empty. Instances that match nothing while an inventory exists are reported
(``unresolved``) and skipped, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

NODE_CPU_QUERY = '1 - avg by (instance)(rate(node_cpu_seconds_total{mode="idle"}[5m]))'
NODE_CORES_QUERY = 'count by (instance)(node_cpu_seconds_total{mode="idle"})'
# Memory in use as the kernel sees it (what MemAvailable says cannot be reclaimed), bytes per
# instance. The cAdvisor alternative counts only containers:
# 'sum by (node)(container_memory_working_set_bytes{container!="", pod!=""})'.
NODE_MEMORY_QUERY = "sum by (instance)(node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes)"
# The capacity memory is measured against: what the scheduler may hand out (capacity minus
# kube-/system-reserved and the eviction threshold), from kube-state-metrics, by node name.
NODE_ALLOCATABLE_MEMORY_QUERY = 'kube_node_status_allocatable{resource="memory"}'
NODE_MEMTOTAL_QUERY = "node_memory_MemTotal_bytes"  # capacity when kube-state-metrics is absent
NODE_INFO_QUERY = "kube_node_info"
NODE_LABELS_QUERY = "kube_node_labels"
ZONE_LABELS = ("label_topology_kubernetes_io_zone", "label_failure_domain_beta_kubernetes_io_zone")

NODE_PREFIX = "node/"
NODE_MEMORY_PREFIX = "node-memory/"
ZONE_PREFIX = "zone/"
NODE_SERIES_PREFIXES = (NODE_PREFIX, NODE_MEMORY_PREFIX, ZONE_PREFIX)


def node_series_id(node: str) -> str:
    return NODE_PREFIX + node


def memory_series_id(node: str) -> str:
    return NODE_MEMORY_PREFIX + node


def zone_series_id(zone: str) -> str:
    return ZONE_PREFIX + zone


def is_node_series(series_id: str) -> bool:
    """True for every series this package publishes (the rest of the store is workloads)."""
    return series_id.startswith(NODE_SERIES_PREFIXES)


def instance_host(instance: str) -> str:
    """``10.0.0.7:9100`` -> ``10.0.0.7``; ``[fd00::7]:9100`` -> ``fd00::7``; ``node-a`` -> ``node-a``."""
    s = instance.strip()
    if s.startswith("["):
        end = s.find("]")
        return s[1:end] if end > 0 else s
    if s.count(":") == 1:
        host, port = s.rsplit(":", 1)
        if port.isdigit():
            return host
    return s


@dataclass(frozen=True)
class NodeInventory:
    """What kube-state-metrics knows about nodes: name -> zone, internal IP -> name."""

    zones: Mapping[str, str] = field(default_factory=dict)
    ip_to_node: Mapping[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.zones and not self.ip_to_node

    @classmethod
    def from_samples(
        cls,
        node_info: Iterable[tuple[Mapping[str, str], float]],
        node_labels: Iterable[tuple[Mapping[str, str], float]],
    ) -> "NodeInventory":
        zones: dict[str, str] = {}
        ips: dict[str, str] = {}
        for labels, _ in node_info:
            node = labels.get("node")
            if not node:
                continue
            zones.setdefault(node, "")
            ip = labels.get("internal_ip")
            if ip:
                ips[ip] = node
        for labels, _ in node_labels:
            node = labels.get("node")
            if not node:
                continue
            zone = next((labels[k] for k in ZONE_LABELS if labels.get(k)), "")
            if zone or node not in zones:
                zones[node] = zone
        return cls(zones=zones, ip_to_node=ips)

    def resolve(self, instance: str) -> tuple[str, str] | None:
        """``(node, zone)`` for a node-exporter instance (or a node name), or None when nothing matches."""
        host = instance_host(instance)
        if self.empty:
            return host, ""
        if host in self.zones:
            return host, self.zones[host]
        node = self.ip_to_node.get(host)
        if node is not None:
            return node, self.zones.get(node, "")
        return None


# ``series_name`` escapes values the PromQL way (\\, \", \n); parse them back exactly.
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m.group(1), m.group(1)), v)


def labels_from_series_name(name: str) -> dict[str, str]:
    """Inverse of ``forecaster.sources.prometheus.series_name`` for ``{a="x",b="y"}`` names."""
    brace = name.find("{")
    body = name[brace:].strip() if brace >= 0 else ""
    return {k: _unescape(v) for k, v in _LABEL_RE.findall(body)}
