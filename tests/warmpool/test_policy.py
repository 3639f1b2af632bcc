from pathlib import Path

import pytest
import yaml

from forecaster.errors import ConfigError
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
        "pools[0].runtime_class: 'gvisor' has no cold-start profile",
        "pools[0].min_warm: 3 must be <= max_warm (1)",
        "pools[0].capacity_per_container: -1",
        "pools[0].lead_seconds: must be a number",
        "pools[0].colour: unknown key",
        "pools[0].idle_ttl.initial_seconds: 0",
        "pools[0].idle_ttl.decay: 1.5 must be in [0, 1)",
        "pools[0].idle_ttl.extra: unknown key",
        "pools[0].template.command: must be a non-empty list",
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


def test_duplicate_pool_names_and_an_empty_pool_list_are_refused():
    doc = _doc()
    doc["pools"].append(dict(doc["pools"][0]))
    with pytest.raises(ConfigError, match=r"pools\[web\]: pool 'web' is listed twice"):
        parse_policy(doc)
    with pytest.raises(ConfigError, match="at least one pool"):
        parse_policy({"apiVersion": "foresight/v1alpha1", "kind": "WarmPoolPolicy", "pools": []})


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
