"""schemathesis against the app's own OpenAPI schema: no input produces a server error."""

from __future__ import annotations

import time

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from adapter.app import create_app
from forecaster.store import MemoryForecastStore
from tests.adapter.helpers import sample_forecast


def _app():
    store = MemoryForecastStore()
    now = time.time()
    store.publish(sample_forecast("shop", "checkout", now=now))
    store.publish(sample_forecast("shop", "stale", now=now, age=900))
    store.publish(sample_forecast("default", "x", now=now, status="fallback", reason="too short"))
    return create_app(None, store)


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_makes_the_app_fail_with_a_server_error(case):
    response = case.call_and_validate(checks=[not_a_server_error])
    ctype = "".join(response.headers.get("content-type", []))
    if response.status_code >= 400 and ctype.startswith("application/json"):
        body = response.json()
        if case.path.startswith("/apis") or case.path.startswith("/api/v1/forecasts"):
            assert body.get("kind") == "Status" and body.get("code") == response.status_code
