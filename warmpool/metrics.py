"""The controller's Prometheus metrics (one ``CollectorRegistry`` per controller).

  foresight_warmpool_warm / _claimed / _target / _degraded            gauges per pool
  foresight_warmpool_expired_unused_total                              counter per pool
  foresight_warmpool_cold_starts_total                                 counter per pool
  foresight_warmpool_cold_limited_total                                counter per pool (429: max_cold_per_minute)
  foresight_warmpool_lease_expired_total                               counter per pool (claims reclaimed unrenewed)
  foresight_warmpool_orphans_deleted_total                             counter per (removed) pool
  foresight_warmpool_claims_total{result=warm|cold}                    counter per pool
  foresight_warmpool_wasted_container_seconds_total                    idle seconds of
      containers removed without being claimed since they last became idle
  foresight_warmpool_claim_latency_seconds{result}                     histogram
  foresight_warmpool_creation_failures_total, _dead_replaced_total     counters per pool
  foresight_warmpool_cold_start_model_seconds{start,runtime_class,component,quantile}
  foresight_warmpool_memory_price                                      the idle-memory price
"""

from __future__ import annotations


class Metrics:
    def __init__(self, registry=None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry or CollectorRegistry()
        r = self.registry
        p = "foresight_warmpool_"
        self.warm = Gauge(p + "warm", "Warm (idle, ready) containers", ["pool"], registry=r)
        self.claimed = Gauge(p + "claimed", "Claimed containers", ["pool"], registry=r)
        self.target = Gauge(p + "target", "Warm target of the policy", ["pool"], registry=r)
        self.degraded = Gauge(p + "degraded", "1 while creation keeps failing", ["pool"], registry=r)
        self.expired = Counter(p + "expired_unused", "Warm containers expired without a claim", ["pool"], registry=r)
        self.cold = Counter(p + "cold_starts", "Claims that found no warm container", ["pool"], registry=r)
        self.cold_limited = Counter(p + "cold_limited", "Claims refused (429) by the pool's max_cold_per_minute", ["pool"], registry=r)
        self.lease_expired = Counter(p + "lease_expired", "Claims reclaimed because their lease ran out", ["pool"], registry=r)
        self.orphans = Counter(p + "orphans_deleted", "Containers of pools removed from the policy, garbage-collected", ["pool"], registry=r)
        self.claims = Counter(p + "claims", "Claims", ["pool", "result"], registry=r)
        self.wasted = Counter(p + "wasted_container_seconds", "Idle seconds of containers removed unclaimed", ["pool"], registry=r)
        self.failures = Counter(p + "creation_failures", "Failed container creations", ["pool"], registry=r)
        self.dead = Counter(p + "dead_replaced", "Dead warm containers removed", ["pool"], registry=r)
        self.latency = Histogram(
            p + "claim_latency_seconds", "Claim latency", ["pool", "result"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.model = Gauge(p + "cold_start_model_seconds", "Cold-start model quantiles", ["start", "runtime_class", "component", "quantile"], registry=r)
        self.price = Gauge(p + "memory_price", "Cold starts one idle GB-bin is worth (odds), set by the memory budget", registry=r)
        self._children: dict = {}
        self._last: dict[str, tuple] = {}

    def of(self, metric: str, *labels: str):
        """The labelled child of a metric, cached (claims on many pools look them up often)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = getattr(self, metric).labels(*labels)
        return child

    def pool_gauges(self, pool: str, warm: int, claimed: int, target: int, degraded: int) -> None:
        """Set a pool's gauges; unchanged values are skipped (hundreds of pools, every round)."""
        values = (warm, claimed, target, degraded)
        if self._last.get(pool) == values:
            return
        self._last[pool] = values
        for metric, v in zip(("warm", "claimed", "target", "degraded"), values):
            self.of(metric, pool).set(v)
