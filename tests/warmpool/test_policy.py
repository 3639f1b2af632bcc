from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from warmpool.policy import load_policy, parse_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "warmpool" / "examples"


def _doc(**pool):
    p = {"name": "web", "workload": {"namespace": "demo", "name": "web"}}
    p.update(pool)
    return {"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": [p]}


@pytest.mark.parametrize("name", ["local.yaml", "kubernetes.yaml"])
def test_every_shipped_example_policy_is_valid(name):
    policy = load_policy(EXAMPLES / name)
    assert policy.pools and all(p.series for p in policy.pools)


def test_defaults_follow_the_seed_ttl_and_lead():
    p = parse_policy(_doc()).pools[0]
    assert (p.idle_ttl.initial_seconds, p.idle_ttl.decay, p.lead_seconds) == (120.0, 0.15, 90.0)
    assert p.series == "demo/web"


def test_every_problem_is_reported_at_once_with_its_path():
    doc = _doc(
        name="Web_1", backend="docker", runtime_class="gvisor", min_warm=3, max_warm=1,
        capacity_per_container=-1, lead_seconds="soon", colour="blue",
        idle_ttl={"initial_seconds": 0, "decay": 1.5, "extra": 1},
        template={"command": "sleep", "resources": {"cpu": "lots", "gpu": "1"}},
    )
    doc["apiVersion"] = "v2"
    with pytest.raises(ConfigError) as ei:
        parse_policy(doc, "p.yaml")
    text = "\n".join(ei.value.problems)
    for fragment in [
        "apiVersion:",
        "pools[0].name:",
        "pools[0].backend: 'docker' must be one of",
        "pools[0].runtime_class: 'gvisor' has no container-start seed",
        "pools[0].min_warm: 3 must be <= max_warm (1)",
        "pools[0].capacity_per_container: -1",
        "pools[0].lead_seconds: must be a number",
        "pools[0].colour: unknown key",
        "pools[0].idle_ttl.initial_seconds: 0",
        "pools[0].idle_ttl.decay: 1.5 must be in [0, 1)",
        "pools[0].idle_ttl.extra: unknown key",
        "pools[0].template.command: must be a list, got str 'sleep'",
        "pools[0].template.resources.cpu: 'lots'",
        "pools[0].template.resources.gpu: unknown key",
    ]:
        assert fragment in text, fragment
    assert len(ei.value.problems) >= 14


def test_a_runtime_class_registered_with_a_profile_is_accepted_and_profile_checked():
    doc = _doc(runtime_class="gvisor")
    doc["runtime_classes"] = {"gvisor": {"runtime_ms": [10, 20, 30], "image_ms": [1, 2, 3], "sandbox_ms": [100, 150, 200]}}
    assert parse_policy(doc).runtime_classes["gvisor"].sandbox_ms == (100.0, 150.0, 200.0)
    doc["runtime_classes"] = {"gvisor": {"runtime_ms": [30, 20, 10], "image_ms": [1, 2], "sandbox_ms": [1, 2, 3]}}
    with pytest.raises(ConfigError) as ei:
        parse_policy(doc)
    assert any("runtime_classes.gvisor.runtime_ms" in p for p in ei.value.problems)
    assert any("runtime_classes.gvisor.image_ms" in p for p in ei.value.problems)


def test_a_runtime_class_needs_a_seed_for_the_kind_of_start_its_backend_makes():
    """gVisor pods were measured on the node; a gVisor container never was."""
    assert parse_policy(_doc(backend="kubernetes", runtime_class="gvisor")).pools[0].start_kind == "pod"
    with pytest.raises(ConfigError) as ei:
        parse_policy(_doc(backend="sim", runtime_class="gvisor"))
    assert ei.value.problems == ["pools[web].runtime_class: 'gvisor' has no container-start seed (backend sim starts containers); "
                                 "known: crun, kata, runc (add it under runtime_classes)"]


def test_duplicate_pool_names_are_refused_and_an_empty_pool_list_is_a_controller_with_nothing_to_keep_warm():
    doc = _doc()
    doc["pools"].append(dict(doc["pools"][0]))
    with pytest.raises(ConfigError, match=r"pools\[web\]: pool 'web' is listed twice"):
        parse_policy(doc)
    assert parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": []}).pools == ()
    with pytest.raises(ConfigError, match="pools: is required"):
        parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy"})


def test_a_file_that_is_not_yaml_names_the_file(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("pools: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_policy(f)
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    f.write_text(yaml.safe_dump(_doc(min_warm=True)))
    with pytest.raises(ConfigError, match=r"pools\[web\].min_warm: must be an integer"):
        load_policy(f)


def test_the_bundled_example_writes_out_exactly_the_documented_defaults():
    from warmpool.policy import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_COLD_PER_MINUTE, IdleModel, MemoryBudget
    from warmpool.ttl import IdleTTL

    policy = load_policy(EXAMPLES / "local.yaml")
    assert policy.memory_budget == MemoryBudget() == MemoryBudget(1.0, 600.0)
    assert policy.pools[0].idle_model == IdleModel() == IdleModel(True, 60.0, 0.5, 1.0, 10.0, 3.0, False)
    assert policy.pools[0].idle_ttl == IdleTTL() == IdleTTL(120.0, 0.15, 0.0)
    assert policy.pools[0].max_cold_per_minute == DEFAULT_MAX_COLD_PER_MINUTE == 30
    assert (policy.pools[0].lease_seconds, policy.pools[0].on_lease_expiry) == (DEFAULT_LEASE_SECONDS, "delete") == (300.0, "delete")
    assert parse_policy(_doc()).memory_budget == MemoryBudget()


def test_idle_model_and_memory_budget_problems_are_all_reported_with_their_paths():
    doc = _doc(idle_model={"enabled": "yes", "bin_seconds": 0.5, "prior_scale": 2, "prior_power": 0, "prior_weight": -1, "window": 3,
                               "previous_gap_weight": -2, "hold_on_ttl": "no"})
    doc["memory_budget"] = {"fraction": 0, "reference_keepalive_seconds": "10m", "cap": 1}
    with pytest.raises(ConfigError) as ei:
        parse_policy(doc)
    text = "\n".join(ei.value.problems)
    for fragment in [
        "pools[web].idle_model.enabled: must be true or false, got str 'yes'",
        "pools[web].idle_model.bin_seconds: 0.5 must be in [1, 3600]",
        "pools[web].idle_model.prior_scale: 2 must be in (0, 1]",
        "pools[web].idle_model.prior_power: 0 must be in (0, 10]",
        "pools[web].idle_model.prior_weight: -1 must be in (0, inf]",
        "pools[web].idle_model.window: unknown key",
        "pools[web].idle_model.previous_gap_weight: -2 must be in [0, inf]",
        "pools[web].idle_model.hold_on_ttl: must be true or false, got str 'no'",
        "memory_budget.fraction: 0 must be in (0, 10]",
        "memory_budget.reference_keepalive_seconds: must be a number",
        "memory_budget.cap: unknown key",
    ]:
        assert fragment in text, fragment
    with pytest.raises(ConfigError, match=r"pools\[web\].idle_model: must be a mapping"):
        parse_policy(_doc(idle_model=True))


def test_a_pools_container_memory_comes_from_its_template_and_prices_idle_containers():
    assert parse_policy(_doc(template={"resources": {"memory": "1Gi"}})).pools[0].memory_mb == 1024.0
    assert parse_policy(_doc(template={"resources": {"memory": "512M"}})).pools[0].memory_mb == pytest.approx(488.28, abs=0.01)
    assert parse_policy(_doc()).pools[0].memory_mb == 256.0  # DEFAULT_MEMORY_MB
    off = parse_policy(_doc(idle_model={"enabled": False, "bin_seconds": 30})).pools[0].idle_model
    assert (off.enabled, off.bin_seconds, off.prior_scale) == (False, 30.0, 0.5)


def test_max_cold_per_minute_defaults_to_30_and_is_checked_with_its_path():
    assert parse_policy(_doc()).pools[0].max_cold_per_minute == 30
    assert parse_policy(_doc(max_cold_per_minute=0)).pools[0].max_cold_per_minute == 0
    for bad in (-1, 2.5, "many", True):
        with pytest.raises(ConfigError) as ei:
            parse_policy(_doc(max_cold_per_minute=bad), "p.yaml")
        assert any(p.startswith("pools[web].max_cold_per_minute") for p in ei.value.problems), ei.value.problems


def test_a_pool_is_authorized_on_its_warmpool_objects_own_name():
    from warmpool.authz import pool_attributes
    from warmpool.policy import pool_id

    a = pool_attributes("claim", pool_id("shop", "checkout.v2"), "shop")
    assert (a.namespace, a.name, a.resource, a.verb) == ("shop", "checkout.v2", "warmpools", "claim")
    assert pool_attributes("get", "cluster-pool", "").name == "cluster-pool"  # the admin's policy: its own name


def test_a_null_value_means_the_default_and_the_reference_shows_the_range_the_parser_enforces():
    from core.typedconfig import constraint_text
    from warmpool.ttl import IdleTTL

    pool = parse_policy(_doc(idle_ttl=None, min_warm=None, template={"image": None})).pools[0]
    assert (pool.idle_ttl, pool.min_warm, pool.template.image) == (IdleTTL(), 0, "busybox")
    assert constraint_text(IdleTTL, "decay") == "[0, 1)"  # what docs/reference/warmpool-policy.md prints
    with pytest.raises(ConfigError) as ei:
        parse_policy(_doc(idle_ttl={"decay": 1}))
    assert ei.value.problems == ["pools[web].idle_ttl.decay: 1 must be in [0, 1)"]
