"""bench/adapter_memory.py in quick mode: real Redis with 2,000 published workloads; the adapter's
read path answers 20,000 unknown names and its memory stays flat (issue 41: bounded by what the
trainer publishes, not by what callers ask for)."""

from __future__ import annotations

from .test_quick import _need, load, positive, run_quick


def test_adapter_memory_quick_stays_flat_while_a_caller_asks_for_unknown_names(tmp_path):
    _need("redis-server")
    out = run_quick("adapter_memory", tmp_path)
    doc = load(tmp_path / "adapter_memory.json")
    assert doc["workloads"] == 2_000 and doc["unknown_names"] == 20_000
    assert doc["answers"] == {"404": 20_000}  # every unknown name answered, none served
    assert doc["cache_entries"] == 2_000  # what was published, nothing the caller asked for
    assert doc["negative_cache_entries"] == doc["negative_cache_max"] == 1_000
    rss = doc["rss_mb"]
    positive(rss["empty_adapter"], rss["after_index"], rss["before_unknown"], rss["after_unknown"])
    assert doc["flat"] is True and abs(doc["rss_growth_fraction"]) <= doc["flat_within"] == 0.10
    assert "flat within 10%" in out and "saved " in out
