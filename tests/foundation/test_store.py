"""One contract for both forecast stores, plus Redis-specific failure behaviour."""

from __future__ import annotations

import threading
import time

import pytest

from core.store import (
    MemoryForecastStore,
    RedisForecastStore,
    StoreError,
    StoreUnavailable,
    make_forecast,
    open_store,
    quantile_key,
)


def fc(sid="shop/checkout", level=1.0, n=12, gen_at=None, **kw):
    mean = [level + i * 0.01 for i in range(n)]
    return make_forecast(
        sid,
        origin=1_700_000_000,
        step_seconds=300,
        mean=mean,
        quantiles={"p50": mean, "p90": [m * 1.2 for m in mean]},
        model="ar",
        backtest_error=0.8,
        observed=((1_699_999_700, level), (1_700_000_000, level)),
        meta={"namespace": "shop", "workload": "checkout", "ready_pods": 3},
        generated_at=gen_at,
        **kw,
    )


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        s = MemoryForecastStore()
    else:
        s = RedisForecastStore(request.getfixturevalue("redis_url"), ttl_seconds=60)
    yield s
    s.close()


def test_published_forecast_reads_back_identical_with_a_generation(store):
    f = fc()
    g1 = store.publish(f)
    got = store.latest("shop/checkout")
    assert got is not None
    assert got.generation == g1 == 1
    assert got.mean == f.mean and got.quantiles == f.quantiles and got.observed == f.observed
    assert got.meta["ready_pods"] == 3 and got.model == "ar" and got.backtest_error == 0.8
    assert store.publish(fc(level=2.0)) == 2
    assert store.latest("shop/checkout").mean[0] == 2.0


def test_latest_many_and_list_series(store):
    for i in range(5):
        store.publish(fc(sid=f"ns/w{i}"))
    got = store.latest_many(["ns/w1", "ns/w3", "ns/missing"])
    assert set(got) == {"ns/w1", "ns/w3"}
    assert store.list_series() == [f"ns/w{i}" for i in range(5)]
    assert store.latest("ns/missing") is None


def test_nan_forecast_is_refused_before_it_reaches_any_store():
    with pytest.raises(StoreError, match="NaN/Inf"):
        fc(level=float("nan"))
    with pytest.raises(StoreError, match="quantiles"):
        make_forecast("a/b", origin=0, step_seconds=60, mean=[1, 2], quantiles={"p90": [1]}, model="x")


def test_quantile_keys_are_canonical():
    assert quantile_key(0.9) == "p90" and quantile_key(0.5) == "p50" and quantile_key(0.975) == "p97.5"


def test_concurrent_publish_and_read_never_yields_a_torn_forecast(redis_url):
    """Writers publish forecasts whose every value equals their level; a torn read would
    mix levels (or mismatch the generation's level)."""
    s = RedisForecastStore(redis_url)
    stop = threading.Event()
    errors: list[str] = []
    reads = [0]
    writes = [0, 0]  # per writer

    def writer(base):
        i = 0
        while not stop.is_set():
            lvl = float(base + i)
            mean = [lvl] * 288
            s.publish(make_forecast("hot/series", origin=0, step_seconds=60, mean=mean,
                                    quantiles={"p90": mean}, model=f"m{lvl}", meta={"level": lvl}))
            writes[base] += 1
            i += 2

    def reader():
        r = RedisForecastStore(redis_url)
        while not stop.is_set():
            f = r.latest("hot/series")
            if f is None:
                continue
            reads[0] += 1
            lvl = f.meta["level"]
            if set(f.mean) != {lvl} or set(f.quantiles["p90"]) != {lvl} or f.model != f"m{lvl}":
                errors.append(f"torn read at generation {f.generation}")

    threads = [threading.Thread(target=writer, args=(b,)) for b in (0, 1)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    # Run until enough reads overlapped enough writes of both writers (not for a fixed time: a
    # loaded machine then only takes longer), with a bound for a store that stopped answering.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not errors and (reads[0] < 300 or min(writes) < 100):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert reads[0] >= 300 and min(writes) >= 100, f"in 60 s only {reads[0]} reads and {writes} writes"
    assert errors == []
    # generations are strictly increasing and unique across both writers
    assert s.latest("hot/series").generation >= 2


def test_redis_restart_while_reading_gives_a_clear_error_then_recovers(redis_server):
    s = RedisForecastStore(redis_server.url, socket_timeout=0.5)
    s.publish(fc())
    redis_server.stop()
    try:
        with pytest.raises(StoreUnavailable, match="unreachable"):
            s.latest("shop/checkout")
        assert s.ping() is False
    finally:
        redis_server.start()
    # a fresh server (no persistence): empty, but the same client works again
    deadline = time.time() + 5
    while time.time() < deadline and not s.ping():
        time.sleep(0.05)
    assert s.latest("shop/checkout") is None
    s.publish(fc())
    assert s.latest("shop/checkout") is not None


def test_dead_series_vanish_by_ttl(redis_url):
    s = RedisForecastStore(redis_url, ttl_seconds=1)
    s.publish(fc(sid="a/short"))
    assert s.list_series() == ["a/short"]
    time.sleep(1.3)
    assert s.latest("a/short") is None
    assert s.list_series() == []
    m = MemoryForecastStore(ttl_seconds=10, clock=lambda: 1e10)
    m.publish(fc(sid="a/old", gen_at=1e10 - 11))
    assert m.latest("a/old") is None and m.list_series() == []


def test_open_store_rejects_unknown_urls():
    with pytest.raises(StoreError, match="memory://"):
        open_store("postgres://x")
    assert isinstance(open_store("memory://"), MemoryForecastStore)


def test_generations_and_count_are_cheap_views_of_the_same_state(store):
    for i in range(3):
        store.publish(fc(sid=f"g/w{i}"))
    store.publish(fc(sid="g/w1", level=3.0))
    assert store.generations(["g/w0", "g/w1", "g/none"]) == {"g/w0": 1, "g/w1": 2}
    assert store.count_series() == 3


# --- Redis ACL users: the trainer writes, readers (adapter, warm pool) only read ----------

ACL_RULES = {
    "trainer": "on >{pw} ~foresight:* resetchannels -@all +@read +@write +@transaction +@connection",
    "adapter": "on >{pw} ~foresight:* resetchannels -@all +@read +@connection",
}


@pytest.fixture
def redis_acl(tmp_path):
    """A real redis-server whose default user is off; trainer and adapter ACL users, each
    with a password in a file (as a mounted Secret would be)."""
    import subprocess

    from tests import stack

    if not stack.have("redis-server"):
        pytest.skip("redis-server is not installed; run `make deps`")
    port = stack.free_port()
    conf = tmp_path / "redis.conf"
    lines = [f"port {port}", "bind 127.0.0.1", 'save ""', "appendonly no", f"dir {tmp_path}",
             "user default off"]
    files = {}
    for user, rule in ACL_RULES.items():
        pw = f"{user}-secret-0123456789"
        (tmp_path / f"{user}.password").write_text(pw + "\n")
        files[user] = str(tmp_path / f"{user}.password")
        lines.append(f"user {user} {rule.format(pw=pw)}")
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen(["redis-server", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        stack._wait_port(port, "redis-server")
        yield port, files
    finally:
        proc.terminate()
        proc.wait(5)


def test_the_trainer_user_publishes_and_the_read_only_adapter_user_reads(redis_acl):
    port, files = redis_acl
    trainer = open_store(f"redis://trainer@127.0.0.1:{port}/0?password_file={files['trainer']}")
    reader = open_store(f"redis://adapter@127.0.0.1:{port}/0?password_file={files['adapter']}")
    trainer.publish(fc())
    got = reader.latest("shop/checkout")
    assert got is not None and got.generation == 1
    assert reader.list_series() == ["shop/checkout"] and reader.count_series() == 1
    assert reader.generations(["shop/checkout"]) == {"shop/checkout": 1}
    assert reader.ping() is True


def test_a_read_only_user_cannot_publish_and_is_told_why(redis_acl):
    from core.store import StorePermissionError

    port, files = redis_acl
    reader = open_store(f"redis://adapter@127.0.0.1:{port}/0?password_file={files['adapter']}")
    with pytest.raises(StorePermissionError, match="may not"):
        reader.publish(fc())
    trainer = open_store(f"redis://trainer@127.0.0.1:{port}/0?password_file={files['trainer']}")
    assert trainer.latest("shop/checkout") is None  # nothing got through


def test_without_credentials_or_with_a_wrong_password_nothing_is_read(redis_acl, tmp_path, monkeypatch):
    from core.store import StorePermissionError

    port, files = redis_acl
    anonymous = open_store(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(StoreError):
        anonymous.latest("shop/checkout")
    wrong = tmp_path / "wrong"
    wrong.write_text("nope")
    bad = open_store(f"redis://adapter@127.0.0.1:{port}/0?password_file={wrong}")
    with pytest.raises(StorePermissionError, match="credentials"):
        bad.latest("shop/checkout")
    monkeypatch.setenv("FORESIGHT_REDIS_PASSWORD_FILE", files["adapter"])
    assert open_store(f"redis://adapter@127.0.0.1:{port}/0").latest("shop/checkout") is None


def test_the_password_never_shows_in_the_store_url(redis_acl):
    port, _ = redis_acl
    s = RedisForecastStore(f"redis://adapter:hunter2@127.0.0.1:{port}/0")
    assert "hunter2" not in s.url and "adapter:***@" in s.url


def test_a_missing_password_file_is_a_clear_error():
    with pytest.raises(StoreError, match="cannot read it"):
        open_store("redis://adapter@127.0.0.1:1/0?password_file=/nonexistent/password")


def test_a_tls_redis_is_reached_with_rediss_and_the_ca_file(tmp_path):
    """TLS as an option: rediss:// plus ca_file= naming the CA that signed Redis' certificate."""
    import subprocess

    from adapter.tls import write_ca, write_signed
    from tests import stack

    if not stack.have("redis-server"):
        pytest.skip("redis-server is not installed; run `make deps`")
    ca, _, ca_cert, ca_key = write_ca(tmp_path, "redis-ca")
    crt, key = write_signed(tmp_path, "redis", ca_cert, ca_key, cn="127.0.0.1", client=False, sans=["127.0.0.1"])
    port = stack.free_port()
    proc = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                             "--tls-cert-file", str(crt), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
                             "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        stack._wait_port(port, "redis-server (TLS)")
        s = open_store(f"rediss://127.0.0.1:{port}/0?ca_file={ca}")
        s.publish(fc())
        assert s.latest("shop/checkout").generation == 1
        with pytest.raises(StoreUnavailable):  # without the CA, Redis' certificate is not trusted
            open_store(f"rediss://127.0.0.1:{port}/0").latest("shop/checkout")
        plain = open_store(f"redis://127.0.0.1:{port}/0", socket_timeout=1.0)
        with pytest.raises(StoreUnavailable):  # the same port without TLS does not speak to it
            plain.latest("shop/checkout")
    finally:
        proc.terminate()
        proc.wait(5)
