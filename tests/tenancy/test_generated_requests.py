"""Generated requests to the adapter, served in-process, and generated label selectors.

Whatever a caller sends (any namespace, metric, label selector, query string, percent-encoding,
header) the adapter answers with a metav1.Status or a value list, never a 500 or an uncaught
exception; a 400 names the parameter it is about. A label selector either parses into
requirements that print back as an equal selector, or raises SelectorError naming where."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, strategies as st

from adapter.app import create_app
from adapter.selectors import MAX_IN_VALUES, Requirement, Selector, SelectorError, parse_selector
from adapter.settings import AdapterSettings, AuthSettings
from core.store import MemoryForecastStore
from tests.adapter.helpers import EXT, sample_forecast
from tests.tenancy.generate import GENERATED

NOW = 1_800_000_000.0

# ------------------------------------------------------------------ selectors

name = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True)
prefix = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,5}){0,2}", fullmatch=True)
key = st.one_of(name, st.tuples(prefix, name).map("/".join))
value = st.one_of(st.just(""), name)
requirement = st.one_of(
    st.builds(lambda k, op, v: Requirement(k, op, (v,)), key, st.sampled_from(["=", "!="]), value),
    st.builds(lambda k, op, vs: Requirement(k, op, tuple(dict.fromkeys(vs))), key, st.sampled_from(["in", "notin"]),
              st.lists(name, min_size=1, max_size=4)),
    st.builds(lambda k, op: Requirement(k, op), key, st.sampled_from(["exists", "!"])),
    # '>' and '<' take a label value (Kubernetes validates it as one too): no sign
    st.builds(lambda k, op, n: Requirement(k, op, (str(n),)), key, st.sampled_from(["gt", "lt"]), st.integers(0, 10**6)),
)


@GENERATED
@given(st.lists(requirement, min_size=1, max_size=4).map(tuple))
def test_a_selector_prints_as_text_that_parses_back_to_the_same_requirements(reqs):
    sel = Selector(reqs)
    assert parse_selector(str(sel)) == sel
    # whitespace between tokens does not change it
    assert parse_selector(" " + str(sel).replace(",", " , ") + " ") == sel


selector_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="ab/.=!,()<> \tinot-_09", max_size=40),
    st.lists(requirement, min_size=1, max_size=3).map(lambda rs: str(Selector(tuple(rs)))).flatmap(
        lambda s: st.integers(0, len(s)).flatmap(lambda i: st.sampled_from(["", "(", ")", ",", "=", "!", " in ", "ü", "\x00"])
                                                 .map(lambda junk: s[:i] + junk + s[i:]))),
)


@GENERATED
@given(selector_text)
def test_any_text_parses_into_a_selector_that_reprints_stably_or_is_refused_saying_where(text):
    try:
        sel = parse_selector(text)
    except SelectorError as exc:
        msg = str(exc)
        assert "position" in msg or "characters long" in msg or "at most" in msg, msg
        return
    assert parse_selector(str(sel)) == sel


def test_an_in_list_longer_than_the_limit_is_refused_naming_the_key():
    text = "workload in (" + ",".join(f"w{i}" for i in range(MAX_IN_VALUES + 1)) + ")"
    with pytest.raises(SelectorError, match="workload in"):
        parse_selector(text)


# ------------------------------------------------------------------ the adapter's HTTP surface

def _store() -> MemoryForecastStore:
    store = MemoryForecastStore()
    store.publish(sample_forecast("shop", "checkout", now=NOW))
    store.publish(sample_forecast("shop", "stale", now=NOW, age=900))
    store.publish(sample_forecast("default", "x", now=NOW, status="fallback", reason="too short"))
    return store


_client: TestClient | None = None


@pytest.fixture(scope="module", autouse=True)
def client():
    """One app for the module (hypothesis runs each example on it); exceptions raised by a
    FastAPI route surface in the test (raise_server_exceptions) rather than as a 500."""
    global _client
    with TestClient(create_app(AdapterSettings(), _store(), clock=lambda: NOW), raise_server_exceptions=True) as c:
        _client = c
        yield c
    _client = None


def _check(r, params: tuple[str, ...] = ()) -> None:
    """Not a server error; a JSON error is a metav1.Status with the status code; a 400 says
    which of ``params`` it is about."""
    assert r.status_code < 500, (r.status_code, r.text[:500])
    json_error = r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json")
    if json_error and r.request.method != "HEAD":
        body = json.loads(r.content)
        assert body["kind"] == "Status" and body["code"] == r.status_code and body["message"], body
        if r.status_code == 400 and params:
            assert any(p in body["message"] for p in params), (params, body["message"])


namespaces = st.one_of(st.sampled_from(["shop", "default", "bank", "kube-system", "a" * 64, "Shop", "-x", "x-"]),
                       st.text(min_size=1, max_size=70))
metrics = st.one_of(st.sampled_from(["predicted_cpu_load_ratio", "predicted_cpu_cores", "predicted_rps_ratio",
                                     "predicted_rps", "predicted_", "predicted__ratio", "cpu"]),
                    st.text(min_size=1, max_size=30))
selectors = st.one_of(st.none(), st.sampled_from(["workload=checkout", "workload in (checkout,stale,x)", "tier=web",
                                                  "deployment!=checkout", "workload"]), selector_text)


def _segment(s: str) -> str:
    return quote(s, safe="")


@GENERATED
@given(ns=namespaces, metric=metrics, sel=selectors)
def test_any_external_metrics_request_gets_a_value_list_or_a_status_never_a_500(ns, metric, sel):
    url = f"{EXT}/namespaces/{_segment(ns)}/{_segment(metric)}"
    r = _client.get(url, params=None if sel is None else {"labelSelector": sel})
    _check(r, ("labelSelector",))
    if r.status_code == 200:
        body = r.json()
        assert body["kind"] == "ExternalMetricValueList" and body["items"]
        assert all(i["metricLabels"].get("namespace", ns) == ns for i in body["items"]), body


@GENERATED
@given(ns=namespaces, wl=st.text(min_size=1, max_size=300), fmt=st.one_of(st.none(), st.sampled_from(["json", "png", "svg", ""]),
                                                                        st.text(max_size=8)))
def test_any_forecast_request_gets_a_forecast_or_a_status_naming_the_bad_parameter(ns, wl, fmt):
    r = _client.get(f"/api/v1/forecasts/{_segment(ns)}/{_segment(wl)}", params=None if fmt is None else {"format": fmt})
    _check(r, ("namespace", "workload", "format"))
    if r.status_code == 200 and (fmt or "json") == "json":
        assert r.json()["workload"] if "workload" in r.json() else r.json()


ints = st.one_of(st.integers(-10, 10**6), st.sampled_from(["", "x", "1e3", "1.5", "-0", str(2**64), "nan"]))


@GENERATED
@given(ns=st.one_of(st.none(), namespaces), limit=st.one_of(st.none(), ints), offset=st.one_of(st.none(), ints))
def test_any_forecast_listing_gets_a_page_or_a_status_naming_the_bad_parameter(ns, limit, offset):
    params = {k: str(v) for k, v in (("namespace", ns), ("limit", limit), ("offset", offset)) if v is not None}
    r = _client.get("/api/v1/forecasts", params=params)
    _check(r, ("namespace", "limit", "offset"))
    if r.status_code == 200:
        body = r.json()
        assert len(body["items"]) <= body["limit"] and all(i["namespace"] == ns for i in body["items"] if ns), body


raw_bytes = st.binary(max_size=30).map(lambda b: "".join(f"%{x:02X}" if x > 126 or x < 33 or x in b"%?#/" else chr(x)
                                                       for x in b))


@GENERATED
@given(path=st.one_of(
    st.tuples(st.sampled_from([EXT + "/namespaces/shop/", EXT + "/", "/apis/", "/api/v1/forecasts/", "/api/v1/forecasts/shop/",
                               "/api/v1/", "/", "/apis/external.metrics.k8s.io/"]), raw_bytes).map("".join),
    st.sampled_from([EXT + "/namespaces/shop/predicted_cpu_load_ratio/extra", EXT + "//", EXT + "/namespaces//x",
                     "/apis/external.metrics.k8s.io/v1beta1/namespaces/%2e%2e/x", "/api/v1/forecasts/%00/%00",
                     EXT + "/namespaces/shop/predicted_cpu_load_ratio?labelSelector=%ff%fe",
                     EXT + "/namespaces/shop/predicted_cpu_load_ratio?labelSelector=a&labelSelector=b",
                     EXT + "/namespaces/shop/predicted_cpu_load_ratio?%zz=1&labelSelector=%"])),
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
def test_any_path_and_method_get_an_answer_never_a_500(path, method):
    r = _client.request(method, path)
    _check(r)
    if method not in ("GET", "HEAD") and path.startswith("/apis"):
        assert r.status_code in (404, 405), r.status_code


@GENERATED
@given(auth=st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=40).map(lambda t: "Bearer " + t),
                      st.sampled_from(["Bearer", "Bearer ", "bearer secret", "Bearer secret ", "Basic c2VjcmV0"])),
       user=st.one_of(st.none(), st.text(max_size=20)))
def test_any_credentials_are_accepted_or_refused_with_a_status_never_a_500(auth, user):
    headers = []
    if auth is not None:
        headers.append((b"authorization", auth if isinstance(auth, bytes) else auth.encode("utf-8", "surrogatepass")))
    if user is not None:
        headers.append((b"x-remote-user", user.encode("utf-8", "surrogatepass")))
    r = _token_client.get(f"{EXT}/namespaces/shop/predicted_cpu_load_ratio", headers=headers)
    _check(r)
    assert r.status_code == (200 if auth in ("bearer secret", "Bearer secret ") else 401), (auth, r.status_code)


_token_client = TestClient(create_app(AdapterSettings(auth=AuthSettings(token="secret")), _store(), clock=lambda: NOW),
                           raise_server_exceptions=True)
