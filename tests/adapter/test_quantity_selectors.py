"""Quantity strings and label selectors, checked against Kubernetes' own rules."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from kubernetes.utils import parse_quantity as k8s_parse_quantity

from adapter.quantity import format_quantity, parse_quantity
from adapter.selectors import SelectorError, parse_selector


@pytest.mark.parametrize(
    "value, text",
    [(0.7, "700m"), (1.5, "1500m"), (2, "2"), (2.0, "2"), (0.033333, "33333u"), (2500, "2500"),
     (3000, "3k"), (0, "0"), (0.0, "0"), (1e-10, "1n"), (1.0000000001, "1000000001n"), (5e9, "5G")],
)
def test_quantities_print_in_canonical_kubernetes_form(value, text):
    assert format_quantity(value) == text


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.001, -3])
def test_nan_inf_and_negative_quantities_are_refused(bad):
    with pytest.raises(ValueError):
        format_quantity(bad)


@hsettings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_every_quantity_parses_back_in_the_kubernetes_client_never_below_the_value(v):
    text = format_quantity(v)
    back = k8s_parse_quantity(text)
    assert back == parse_quantity(text)
    assert back >= Decimal(repr(v))
    assert back - Decimal(repr(v)) <= Decimal("1e-9")
    # the HPA reads MilliValue = ceil(value * 1000)
    assert math.ceil(back * 1000) >= math.ceil(Decimal(repr(v)) * 1000)


LABELS = {"app": "shop", "tier": "web", "workload": "checkout", "deployment": "checkout", "n": "5"}


@pytest.mark.parametrize(
    "sel, want",
    [
        ("", True),
        ("app=shop", True),
        ("app==shop", True),
        ("app!=shop", False),
        ("missing!=x", True),
        ("tier in (web, api)", True),
        ("tier notin (web)", False),
        ("missing notin (web)", True),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("app=shop,tier in (api)", False),
        ("app = shop , tier in ( web )", True),
        ("n>4", True),
        ("n<5", False),
        ("example.com/team!=x", True),
        ("missing=", False),
    ],
)
def test_selectors_match_like_kubernetes(sel, want):
    assert parse_selector(sel).matches(LABELS) is want


@pytest.mark.parametrize(
    "bad",
    ["=x", "a in x", "a in ()", "a in (x", "a,", ",a", "a b", "a=b=c", "a=(", "!", "!a=b",
     "a=b c", "a>x", "-a=b", "a=-b", "Bad_Prefix/a=b", "a" * 64 + "=b", "a=" + "b" * 64, "a=b;c",
     "a in (x y)", "a notin"],
)
def test_malformed_selectors_raise_a_selector_error(bad):
    with pytest.raises(SelectorError):
        parse_selector(bad)


def test_a_10_kb_selector_is_parsed_or_refused_quickly_without_crashing():
    big = ",".join(f"k{i}=v{i}" for i in range(1200))
    assert len(big) > 10_000
    sel = parse_selector(big)
    assert len(sel.requirements) == 1200
    with pytest.raises(SelectorError):
        parse_selector("a=" + "x" * 20000)


def test_equality_values_let_the_adapter_look_a_workload_up_by_name():
    assert parse_selector("workload=checkout,tier=web").equality_values("workload") == ("checkout",)
    assert parse_selector("workload in (a,b),workload in (b,c)").equality_values("workload") == ("b",)
    assert parse_selector("tier=web").equality_values("workload") is None


@hsettings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab=!,() inot\t", max_size=30))
def test_any_string_either_parses_or_raises_a_selector_error(text):
    try:
        sel = parse_selector(text)
    except SelectorError:
        return
    assert parse_selector(str(sel)) == sel


@hsettings(max_examples=500, deadline=None)
@given(st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False))
def test_the_float_fast_path_equals_the_exact_decimal_path(v):
    assert format_quantity(v) == format_quantity(Decimal(repr(v)))
