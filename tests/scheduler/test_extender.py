"""The kube-scheduler HTTP extender and the placement API over a minimal FastAPI app.

Request bodies are what kube-scheduler's HTTPExtender.send marshals: ``ExtenderArgs`` from
k8s.io/kube-scheduler/extender/v1, whose fields carry no json tags (keys ``Pod``, ``Nodes``,
``NodeNames``; the unused one is ``null``). Answers are decoded by Go's case-insensitive
encoding/json into ``ExtenderFilterResult`` / ``HostPriorityList``.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from adapter.scheduler import SchedulerSettings, register_scheduler_routes
from adapter.scheduler.snapshot import SnapshotCache
from core.errors import ConfigError
from core.store import MemoryForecastStore, RedisForecastStore, StoreUnavailable, make_forecast
from forecaster.nodes import NEUTRAL_SCORE

FILTER_KEYS = {"nodes", "nodenames", "failedNodes", "failedAndUnresolvableNodes", "error"}


def publish_node(store, name, p90, *, zone="zone-a", age=5.0, cores=2.0, now=None):
    now = time.time() if now is None else now
    values = [p90] * 15 if isinstance(p90, float) else list(p90)
    store.publish(
        make_forecast(
            f"node/{name}",
            origin=now - age,
            step_seconds=60,
            mean=[v * 0.9 for v in values],
            quantiles={"p50": [v * 0.9 for v in values], "p90": values},
            model="ar",
            generated_at=now - age,
            observed=((now - age, values[0] * 0.9),),
            meta={"kind": "Node", "node": name, "zone": zone, "cpu_cores": cores},
        )
    )


def node_object(name, zone):
    """A v1.Node as the scheduler marshals it (trimmed, but with the parts it always has)."""
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


POD = {"metadata": {"name": "web-7d4b9", "namespace": "shop", "uid": "p-1"}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


def names_args(names, pod=POD):
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def nodes_args(objs, pod=POD):
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": objs}, "NodeNames": None}


def pod_with_memory(*requests, init=(), sidecars=(), overhead=None, pod_level=None):
    """A v1.Pod as the scheduler marshals it, with these memory requests per container."""
    def c(name, mem, **extra):
        return {"name": name, "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": mem}}, **extra}

    spec = {"containers": [c(f"c{i}", m) for i, m in enumerate(requests)],
            "initContainers": [c(f"i{i}", m) for i, m in enumerate(init)]
            + [c(f"s{i}", m, restartPolicy="Always") for i, m in enumerate(sidecars)]}
    if overhead:
        spec["overhead"] = {"memory": overhead}
    if pod_level:
        spec["resources"] = {"requests": {"memory": pod_level}}
    return {"metadata": {"name": "web-mem", "namespace": "shop"}, "spec": spec}


def publish_memory(store, name, frac, *, allocatable=16 * 2**30, age=5.0, zone="zone-a", now=None):
    now = time.time() if now is None else now
    values = [frac] * 15 if isinstance(frac, float) else list(frac)
    store.publish(make_forecast(
        f"node-memory/{name}", origin=now - age, step_seconds=60, mean=[v * 0.95 for v in values],
        quantiles={"p50": [v * 0.95 for v in values], "p90": values}, model="ar", generated_at=now - age,
        observed=((now - age, values[0] * 0.95),),
        meta={"kind": "NodeMemory", "node": name, "zone": zone, "memory_bytes": float(allocatable), "capacity": "allocatable"},
    ))


@pytest.fixture
def store():
    s = MemoryForecastStore()
    publish_node(s, "cool", 0.20, zone="zone-a")
    publish_node(s, "warm", 0.30, zone="zone-a")
    publish_node(s, "hot", [0.70, 0.80, 0.93] + [0.9] * 12, zone="zone-b")
    publish_node(s, "calm-b", 0.20, zone="zone-b")
    return s


def make_client(store, settings=None):
    app = FastAPI()
    ext = register_scheduler_routes(app, store, settings)
    return TestClient(app), ext


def test_filter_drops_the_node_predicted_hot_and_answers_an_exact_extender_filter_result(store):
    client, _ = make_client(store)
    r = client.post("/scheduler/filter", json=names_args(["warm", "hot", "cool", "not-forecast"]))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == FILTER_KEYS
    assert body["nodenames"] == ["warm", "cool", "not-forecast"]  # a subset, input order kept
    assert body["nodes"] is None
    assert list(body["failedNodes"]) == ["hot"] and "0.93" in body["failedNodes"]["hot"]
    assert body["failedAndUnresolvableNodes"] == {}
    assert body["error"] == ""  # a non-empty error would fail the pod's scheduling cycle


def test_filter_in_full_nodes_mode_echoes_the_whole_node_objects_that_pass(store):
    client, _ = make_client(store)
    objs = [node_object("hot", "zone-b"), node_object("cool", "zone-a"), node_object("calm-b", "zone-b")]
    body = client.post("/scheduler/filter", json=nodes_args(objs)).json()
    assert body["nodenames"] is None
    assert body["nodes"]["items"] == [objs[1], objs[2]]  # unchanged objects, the scheduler reuses them
    assert list(body["failedNodes"]) == ["hot"]


def test_filter_lets_every_node_through_when_all_of_them_are_predicted_hot(store):
    client, _ = make_client(store)
    body = client.post("/scheduler/filter", json=names_args(["hot"])).json()
    assert body["nodenames"] == ["hot"] and body["failedNodes"] == {}


def test_prioritize_prefers_lower_predicted_node_load_and_then_the_cooler_zone(store):
    client, _ = make_client(store)
    # cool (zone-a) and calm-b (zone-b) have the same node load; zone-b also holds the hot node
    r = client.post("/scheduler/prioritize", json=names_args(["hot", "warm", "cool", "calm-b"]))
    assert r.status_code == 200
    hp = r.json()
    assert [h["host"] for h in hp] == ["hot", "warm", "cool", "calm-b"]
    assert all(set(h) == {"host", "score"} and isinstance(h["score"], int) and 0 <= h["score"] <= 10 for h in hp)
    score = {h["host"]: h["score"] for h in hp}
    assert score["cool"] > score["warm"] > score["hot"]
    assert score["cool"] > score["calm-b"]
    assert b'"score":' in r.content and b'.0' not in r.content  # int64 for Go: never 7.0


def test_prioritize_ties_get_equal_scores_and_keep_the_input_order():
    s = MemoryForecastStore()
    for n in ("n3", "n1", "n2"):
        publish_node(s, n, 0.40)
    client, _ = make_client(s)
    for order in (["n1", "n2", "n3"], ["n3", "n1", "n2"], ["n2", "n3", "n1"]):
        hp = client.post("/scheduler/prioritize", json=names_args(order)).json()
        assert [h["host"] for h in hp] == order
        assert len({h["score"] for h in hp}) == 1


def test_unknown_nodes_and_stale_forecasts_get_the_neutral_score_and_are_never_filtered(store):
    publish_node(store, "stale-hot", 0.99, age=3600.0)
    client, _ = make_client(store, SchedulerSettings(max_forecast_age_seconds=300))
    hp = client.post("/scheduler/prioritize", json=names_args(["stale-hot", "never-seen", "cool"])).json()
    assert hp[0] == {"host": "stale-hot", "score": NEUTRAL_SCORE}
    assert hp[1] == {"host": "never-seen", "score": NEUTRAL_SCORE}
    assert hp[2]["score"] != NEUTRAL_SCORE
    body = client.post("/scheduler/filter", json=names_args(["stale-hot", "never-seen"])).json()
    assert body["nodenames"] == ["stale-hot", "never-seen"] and body["failedNodes"] == {}


def test_json_tag_spellings_parse_like_gos_case_insensitive_decoder(store):
    client, _ = make_client(store)
    lower = client.post("/scheduler/prioritize", json={"pod": POD, "nodenames": ["cool", "hot"]}).json()
    upper = client.post("/scheduler/prioritize", json={"Pod": POD, "NodeNames": ["cool", "hot"]}).json()
    assert lower == upper
    full = client.post("/scheduler/filter", json={"pod": POD, "nodes": {"Items": [node_object("hot", "zone-b"), node_object("cool", "zone-a")]}}).json()
    assert [n["metadata"]["name"] for n in full["nodes"]["items"]] == ["cool"]


@pytest.mark.parametrize(
    "body, needle",
    [
        (b"", "empty body"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"Pod": {}, "NodeNames": "node-a"}', "NodeNames"),
        (b'{"Pod": {}, "NodeNames": ["a", 3]}', "NodeNames"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0].metadata.name"),
        (b'{"Pod": {}, "Nodes": []}', "NodeList"),
        (b'{"Pod": "web", "NodeNames": ["a"]}', "Pod"),
        (b'{"Pod": {}}', "neither NodeNames"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_malformed_body_is_a_400_with_a_json_error_naming_the_problem(store, verb, body, needle):
    client, _ = make_client(store)
    r = client.post(f"/scheduler/{verb}", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert needle in r.json()["error"]


def test_a_body_over_the_size_limit_is_refused_with_413(store):
    client, _ = make_client(store, SchedulerSettings(max_body_bytes=1000))
    r = client.post("/scheduler/prioritize", json=names_args([f"node-{i:04d}" for i in range(200)]))
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]


class FlakyStore:
    """Answers once, then is down (what a Redis restart looks like to the snapshot)."""

    def __init__(self, inner):
        self.inner = inner
        self.down = False

    def list_series(self):
        if self.down:
            raise StoreUnavailable("redis is restarting")
        return self.inner.list_series()

    def latest_many(self, ids):
        if self.down:
            raise StoreUnavailable("redis is restarting")
        return self.inner.latest_many(ids)


def test_a_store_outage_keeps_the_extender_answering_from_the_last_snapshot(store):
    flaky = FlakyStore(store)
    client, ext = make_client(flaky, SchedulerSettings(refresh_seconds=0.001))
    before = client.post("/scheduler/prioritize", json=names_args(["cool", "hot"])).json()
    flaky.down = True
    ext.cache.refresh()  # the store read fails; the forecasts read before stay
    after = client.post("/scheduler/prioritize", json=names_args(["cool", "hot"])).json()
    assert after == before and ext.cache.failures >= 1
    assert "redis is restarting" in client.get("/api/v1/placement").json()["store_error"]


def test_a_store_down_from_the_start_gives_neutral_scores_and_filters_nothing(store):
    flaky = FlakyStore(store)
    flaky.down = True
    client, _ = make_client(flaky)
    hp = client.post("/scheduler/prioritize", json=names_args(["cool", "hot"])).json()
    assert hp == [{"host": "cool", "score": NEUTRAL_SCORE}, {"host": "hot", "score": NEUTRAL_SCORE}]
    assert client.post("/scheduler/filter", json=names_args(["cool", "hot"])).json()["nodenames"] == ["cool", "hot"]


class CountingStore:
    def __init__(self, inner):
        self.inner = inner
        self.reads = 0

    def list_series(self):
        self.reads += 1
        return self.inner.list_series()

    def latest_many(self, ids):
        return self.inner.latest_many(ids)


def wait_for_new_snapshot(cache, old):
    deadline = time.time() + 10
    while cache.get() is old and time.time() < deadline:
        time.sleep(0.01)
    return cache.get()


def test_the_snapshot_is_rescored_in_the_background_and_the_store_reread_only_every_reload_seconds(store):
    counting = CountingStore(store)
    clock = [time.time()]
    cache = SnapshotCache(counting, SchedulerSettings(refresh_seconds=5, reload_seconds=20), clock=lambda: clock[0])
    first = cache.get()
    assert first.loads["cool"].score > NEUTRAL_SCORE and counting.reads == 1
    publish_node(store, "cool", 0.95, now=clock[0])
    assert cache.get() is first  # within refresh_seconds: nothing recomputed, nothing read
    clock[0] += 6
    assert cache.get() is first  # expired: answered from the old snapshot while a rebuild runs
    second = wait_for_new_snapshot(cache, first)
    assert counting.reads == 1 and cache.rescores == 1  # re-scored from cached forecasts
    assert not second.loads["cool"].hot  # the new forecast is not read yet
    clock[0] += 20
    cache.get()
    third = wait_for_new_snapshot(cache, second)
    assert counting.reads == 2 and third.loads["cool"].hot


def test_a_forecast_turning_stale_triggers_a_store_read_to_pick_up_its_replacement(store):
    counting = CountingStore(store)
    now = time.time()
    publish_node(store, "aging", 0.5, age=290.0, now=now)  # stale in 10 s (max age 300)
    clock = [now]
    cache = SnapshotCache(counting, SchedulerSettings(refresh_seconds=60, reload_seconds=600), clock=lambda: clock[0])
    first = cache.get()
    assert first.loads["aging"].status == "ok"
    publish_node(store, "aging", 0.95, now=now + 11)
    clock[0] = now + 11
    cache.get()
    second = wait_for_new_snapshot(cache, first)
    assert counting.reads == 2 and second.loads["aging"].hot


@pytest.mark.parametrize("request_mib", [0, 512, 3 * 1024, 6 * 1024, 64 * 1024])
def test_filter_and_the_shared_split_hot_rule_agree_for_any_memory_request(store, request_mib):
    from forecaster.nodes import split_hot

    publish_memory(store, "warm", 0.80)  # 16 GiB allocatable: 1.6 GiB of room under 0.9
    publish_memory(store, "cool", 0.50)
    publish_memory(store, "hot", 0.95)  # memory full as well as CPU hot
    client, ext = make_client(store)
    names = ["warm", "hot", "cool", "never-seen", "calm-b"]
    body = client.post("/scheduler/filter", json=names_args(names, pod=pod_with_memory(f"{request_mib}Mi"))).json()
    passed, failed = split_hot(names, ext.cache.get().loads, ext.scoring, request_mib * 2**20)
    assert body["nodenames"] == passed and body["failedNodes"] == failed


def test_placement_api_lists_node_and_zone_scores_with_reasons_and_affinity(store):
    store.publish(make_forecast("shop/web", origin=time.time(), step_seconds=60, mean=[1.0], model="ar"))
    client, _ = make_client(store)
    r = client.get("/api/v1/placement", params={"namespace": "shop"})
    assert r.status_code == 200
    doc = r.json()
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert doc["nodes"][0]["node"] == "cool"  # best score first
    assert [n["score"] for n in doc["nodes"]] == sorted((n["score"] for n in doc["nodes"]), reverse=True)
    assert nodes["hot"]["filtered"] is True and "above threshold" in nodes["hot"]["reason"]
    assert "p90 max over the next 300 s" in nodes["cool"]["reason"]
    assert {z["zone"] for z in doc["zones"]} == {"zone-a", "zone-b"}
    assert doc["hot_nodes"] == ["hot"] and doc["workloads"] == ["shop/web"]
    terms = doc["preferred_node_affinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    preferred = [t["preference"]["matchFields"][0]["values"][0] for t in terms if t["preference"].get("matchFields", [{}])[0].get("operator") == "In"]
    assert "hot" not in preferred and preferred[0] == "cool"
    bad = client.get("/api/v1/placement", params={"namespace": "Shop_1"})
    assert bad.status_code == 400 and "namespace" in bad.json()["error"]


def test_extender_reads_node_forecasts_published_to_a_real_redis(redis_url):
    redis_store = RedisForecastStore(redis_url)
    try:
        publish_node(redis_store, "r-cool", 0.1)
        publish_node(redis_store, "r-hot", 0.97)
        client, _ = make_client(redis_store)
        body = client.post("/scheduler/filter", json=names_args(["r-hot", "r-cool"])).json()
        assert body["nodenames"] == ["r-cool"] and list(body["failedNodes"]) == ["r-hot"]
        hp = client.post("/scheduler/prioritize", json=names_args(["r-hot", "r-cool"])).json()
        assert hp[1]["score"] > hp[0]["score"]
    finally:
        redis_store.close()


def test_bad_scheduler_settings_list_every_problem_with_its_path():
    with pytest.raises(ConfigError) as e:
        SchedulerSettings(threshold=1.5, zone_weight=-1, refresh_seconds=0)
    text = str(e.value)
    assert "scheduler.threshold" in text and "scheduler.zone_weight" in text and "scheduler.refresh_seconds" in text


def test_scheduler_settings_share_the_node_scorings_defaults_and_checks():
    from forecaster.nodes import NodeScoreSettings

    assert SchedulerSettings().scoring() == NodeScoreSettings()
    assert SchedulerSettings(zone_weight=0.5).scoring() == NodeScoreSettings(zone_weight=0.5)
    with pytest.raises(ConfigError) as e:
        SchedulerSettings(memory_threshold=True, horizon_seconds=float("inf"))
    assert [p.split(":")[0] for p in e.value.problems] == ["scheduler.memory_threshold", "scheduler.horizon_seconds"]


def test_extender_routes_are_documented_in_the_openapi_schema(store):
    client, _ = make_client(store)
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/scheduler/filter", "/scheduler/prioritize"):
        assert set(paths[p]["post"]["responses"]) >= {"200", "400"}
    assert "/api/v1/placement" in paths


def test_the_preserialized_filter_answer_equals_the_plain_json_encoding():
    from adapter.scheduler.protocol import ExtenderArgs, filter_result, filter_result_names

    names = ["a", 'we"ird', "nöde", "b", "a"]
    failed = {"b": "hot \"b\"", 'we"ird': "hot ü"}
    passed = [n for n in names if n not in failed]
    name_json = {n: json.dumps(n).encode() for n in ("a", "b")}  # others take the slow path
    failed_json = {n: json.dumps(n).encode() + b":" + json.dumps(m).encode() for n, m in failed.items()}
    fast = filter_result_names(passed, [n for n in names if n in failed], name_json, failed_json)
    slow = filter_result(ExtenderArgs(pod=None, node_names=names, node_items=None), passed, failed)
    assert json.loads(fast) == json.loads(slow)


def test_a_real_uvicorn_server_answers_go_marshalled_bodies_over_one_keep_alive_connection(store):
    import http.client

    import uvicorn

    from tests import stack

    app = FastAPI()
    register_scheduler_routes(app, store)
    port = stack.free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        stack._wait_port(port, "uvicorn")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        # byte-for-byte what Go's json.Marshal(&ExtenderArgs{...}) emits in nodeCacheCapable mode
        go_body = b'{"Pod":{"metadata":{"name":"web","namespace":"shop","creationTimestamp":null},"spec":{"containers":null},"status":{}},"Nodes":null,"NodeNames":["hot","cool"]}'
        answers = []
        for verb in ("filter", "prioritize"):
            conn.request("POST", f"/scheduler/{verb}", body=go_body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200 and not resp.will_close  # the scheduler's transport keeps it open
            answers.append(json.loads(resp.read()))
        conn.close()
        assert answers[0]["nodenames"] == ["cool"] and list(answers[0]["failedNodes"]) == ["hot"]
        assert [h["host"] for h in answers[1]] == ["hot", "cool"] and answers[1][1]["score"] > answers[1][0]["score"]
    finally:
        server.should_exit = True
        thread.join(10)


def test_large_full_node_bodies_are_answered_the_same_off_the_event_loop(store, monkeypatch):
    import adapter.scheduler.routes as routes

    client, _ = make_client(store)
    objs = [node_object("hot", "zone-b"), node_object("cool", "zone-a")]
    small = client.post("/scheduler/filter", json=nodes_args(objs)).json()
    assert routes.OFFLOAD_BODY_BYTES > len(json.dumps(nodes_args(objs)))
    calls = []
    real = routes.run_in_threadpool

    async def spy(fn, *a):
        calls.append(threading.current_thread().name)
        return await real(fn, *a)

    monkeypatch.setattr(routes, "run_in_threadpool", spy)
    monkeypatch.setattr(routes, "OFFLOAD_BODY_BYTES", 10)
    offloaded = client.post("/scheduler/filter", json=nodes_args(objs)).json()
    assert len(calls) == 1
    assert offloaded == small and [n["metadata"]["name"] for n in offloaded["nodes"]["items"]] == ["cool"]


# -- memory ------------------------------------------------------------------------------------


def test_prioritize_prefers_the_node_with_memory_headroom_when_cpu_is_equal():
    s = MemoryForecastStore()
    for n in ("mem-tight", "mem-roomy", "mem-unknown"):
        publish_node(s, n, 0.30)
    publish_memory(s, "mem-tight", 0.75)
    publish_memory(s, "mem-roomy", 0.25)
    client, _ = make_client(s)
    names = ["mem-tight", "mem-roomy", "mem-unknown"]
    for pod in (POD, pod_with_memory("1Gi")):
        score = {h["host"]: h["score"] for h in client.post("/scheduler/prioritize", json=names_args(names, pod=pod)).json()}
        assert score["mem-roomy"] > score["mem-tight"], score
        assert score["mem-unknown"] == score["mem-roomy"]  # CPU only: 1 - 0.3 = 7, memory 0.75 free -> CPU binds
    # a big pod tells them apart further: 8 GiB on 16 GiB allocatable
    score = {h["host"]: h["score"] for h in client.post("/scheduler/prioritize", json=names_args(names, pod=pod_with_memory("8Gi"))).json()}
    assert score == {"mem-tight": 0, "mem-roomy": 3, "mem-unknown": 7}  # 1 - 0.25 - 0.5 = 0.25 -> 3 (half up)


def test_filter_drops_a_node_whose_predicted_memory_plus_the_request_exceeds_allocatable_headroom():
    s = MemoryForecastStore()
    for n in ("a", "b"):
        publish_node(s, n, 0.30)
    publish_memory(s, "a", 0.70)  # 0.9 x 16 GiB - 0.7 x 16 GiB = 3.2 GiB of room
    publish_memory(s, "b", 0.20)
    client, _ = make_client(s)
    small = client.post("/scheduler/filter", json=names_args(["a", "b"], pod=pod_with_memory("1Gi", "1Gi"))).json()
    assert small["nodenames"] == ["a", "b"] and small["failedNodes"] == {}
    big = client.post("/scheduler/filter", json=names_args(["a", "b"], pod=pod_with_memory("2Gi", "2Gi"))).json()
    assert big["nodenames"] == ["b"] and list(big["failedNodes"]) == ["a"]
    msg = big["failedNodes"]["a"]
    assert "memory 11.20 GiB + request 4.00 GiB" in msg and "0.9 of allocatable 16.00 GiB" in msg
    # whole Node objects mode: the same answer, objects echoed
    full = client.post("/scheduler/filter", json=nodes_args([node_object("a", "zone-a"), node_object("b", "zone-a")],
                                                            pod=pod_with_memory("4Gi"))).json()
    assert [n["metadata"]["name"] for n in full["nodes"]["items"]] == ["b"] and list(full["failedNodes"]) == ["a"]
    # nobody fits: drop none (the scheduler's own NodeResourcesFit still applies)
    huge = client.post("/scheduler/filter", json=names_args(["a", "b"], pod=pod_with_memory("64Gi"))).json()
    assert huge["nodenames"] == ["a", "b"] and huge["failedNodes"] == {}


def test_without_memory_forecasts_the_extender_answers_on_cpu_alone_and_says_so(store):
    client, _ = make_client(store)  # the fixture publishes CPU forecasts only
    f = client.post("/scheduler/filter", json=names_args(["hot", "cool"], pod=pod_with_memory("2Gi"))).json()
    assert f["nodenames"] == ["cool"] and "judged on CPU only" in f["failedNodes"]["hot"]
    before = client.post("/scheduler/prioritize", json=names_args(["hot", "cool"])).json()
    assert client.post("/scheduler/prioritize", json=names_args(["hot", "cool"], pod=pod_with_memory("2Gi"))).json() == before
    doc = client.get("/api/v1/placement").json()
    assert doc["score_basis"] == {"cpu": 4}
    assert all("scored on CPU only" in n["reason"] and n["memory_status"] == "unknown" for n in doc["nodes"])


def test_the_placement_api_shows_memory_beside_cpu_and_what_a_pod_of_a_given_size_would_get(store):
    publish_memory(store, "cool", 0.85)
    client, _ = make_client(store)
    doc = client.get("/api/v1/placement", params={"memory_request": "1Gi"}).json()
    cool = next(n for n in doc["nodes"] if n["node"] == "cool")
    assert cool["memory_status"] == "ok" and cool["memory_load"] == pytest.approx(0.85) and cool["memory_bytes"] == 16 * 2**30
    assert cool["memory_series_id"] == "node-memory/cool" and cool["basis"] == "cpu+memory"
    assert "memory: p90 max over the next 300 s is 0.85" in cool["reason"]
    assert cool["pod_score"] == 1 and "request 1.00 GiB" in cool["pod_filter_reason"]  # 1 - 0.85 - 1/16
    assert doc["score_basis"] == {"cpu": 3, "cpu+memory": 1} and doc["memory_request_bytes"] == 2**30
    bad = client.get("/api/v1/placement", params={"memory_request": "lots"})
    assert bad.status_code == 400 and "memory_request" in bad.json()["error"]


def test_the_pods_memory_request_is_computed_like_the_schedulers_node_resources_fit():
    from adapter.scheduler.podrequest import pod_memory_request

    mi = 2**20
    assert pod_memory_request(None) == 0 and pod_memory_request(POD) == 0  # best effort
    assert pod_memory_request(pod_with_memory("256Mi", "256Mi")) == 512 * mi
    # a regular init container runs alone (with the sidecars started before it): the max counts
    assert pod_memory_request(pod_with_memory("256Mi", init=["1Gi"])) == 1024 * mi
    # a sidecar runs beside the containers: it adds
    assert pod_memory_request(pod_with_memory("256Mi", sidecars=["128Mi"])) == 384 * mi
    assert pod_memory_request(pod_with_memory("256Mi", overhead="64Mi")) == 320 * mi
    assert pod_memory_request(pod_with_memory("256Mi", pod_level="1Gi", overhead="64Mi")) == 1088 * mi
    assert pod_memory_request(pod_with_memory("1G")) == 1e9 and pod_memory_request(pod_with_memory("1500M")) == 1.5e9


def test_a_malformed_memory_request_is_a_400_naming_the_field_path(store):
    client, _ = make_client(store)
    for verb in ("filter", "prioritize"):
        r = client.post(f"/scheduler/{verb}", json=names_args(["cool"], pod=pod_with_memory("256Mi", "lots")))
        assert r.status_code == 400
        assert "Pod.spec.containers[1].resources.requests.memory" in r.json()["error"]


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_per_pod_answers_equal_the_exact_rule_for_every_node_and_request(seed):
    import random

    from adapter.scheduler.answers import prioritize_answer
    from forecaster.nodes import score_for_pod

    rng = random.Random(seed)
    s = MemoryForecastStore()
    names = [f"n{i}" for i in range(60)]
    for n in names:
        publish_node(s, n, rng.random())
        if rng.random() < 0.8:
            publish_memory(s, n, rng.random(), allocatable=rng.choice([4, 16, 64]) * 2**30)
    _, ext = make_client(s)
    snap = ext.cache.get()
    for request in [0.0] + [rng.uniform(0, 48) * 2**30 for _ in range(30)]:
        got = {h["host"]: h["score"] for h in json.loads(prioritize_answer(snap, names, request))}
        assert got == {n: score_for_pod(snap.loads[n], request) for n in names}


def test_the_adapters_rest_view_and_dashboard_list_node_memory_forecasts_beside_cpu():
    from adapter.app import create_app

    s = MemoryForecastStore()
    publish_node(s, "n1", 0.40)
    publish_memory(s, "n1", 0.60)
    with TestClient(create_app(None, s)) as c:
        listed = [i["series_id"] for i in c.get("/api/v1/forecasts").json()["items"]]
        assert {"node/n1", "node-memory/n1"} <= set(listed)
        mem = c.get("/api/v1/forecasts/node-memory/n1")
        assert mem.status_code == 200 and mem.json()["meta"]["memory_bytes"] == 16 * 2**30
        page = c.get("/").text
        assert "node/n1" in page and "node-memory/n1" in page
