"""`foresight serve` refuses to serve workload data unauthenticated beyond loopback: on a
non-loopback --host it needs --requestheader-ca, --token-file or --delegated-auth, or an
explicit --insecure; the shipped manifests and chart start as they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from adapter.cli import is_loopback, options_from_args, unauthenticated_bind
from foresight.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def args_of(*argv: str):
    return build_parser().parse_args(["serve", "--store", "memory://", *argv])


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "adapter.example.com"])
def test_a_non_loopback_bind_without_authentication_is_refused_naming_the_flags_that_fix_it(host):
    msg = unauthenticated_bind(args_of("--host", host))
    assert f"--host {host}: a non-loopback address with no authentication" in msg
    for flag in ("--requestheader-ca", "--token-file", "--delegated-auth", "--host 127.0.0.1", "--insecure"):
        assert flag in msg


def test_the_default_bind_without_authentication_exits_2_before_listening(capsys):
    assert main(["serve", "--store", "memory://", "--plain-http"]) == 2
    captured = capsys.readouterr()
    assert "--host 0.0.0.0: a non-loopback address" in captured.err and "--insecure" in captured.err
    assert "foresight serve:" not in captured.out  # refused before it announced or bound anything


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost"])
def test_loopback_needs_no_authentication(host):
    assert is_loopback(host) and unauthenticated_bind(args_of("--host", host)) is None


def test_any_authentication_or_an_explicit_insecure_allows_every_address(tmp_path):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("s3cret\n")
    ca.write_text("not parsed here\n")
    for extra in (["--token-file", str(token)], ["--requestheader-ca", str(ca)], ["--delegated-auth"], ["--insecure"]):
        assert unauthenticated_bind(args_of("--host", "0.0.0.0", *extra)) is None, extra
    assert options_from_args(args_of("--host", "0.0.0.0", "--insecure"))["token"] is None


def _manifest_args() -> list[str]:
    for doc in yaml.safe_load_all((ROOT / "manifests" / "adapter" / "deployment.yaml").read_text()):
        if doc and doc.get("kind") == "Deployment":
            (c,) = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["args"][0] == "serve"]
            return c["args"]
    raise AssertionError("manifests/adapter/deployment.yaml has no Deployment running serve")


def _chart_args() -> list[str]:
    text = (ROOT / "charts" / "foresight" / "templates" / "adapter.yaml").read_text()
    block = re.search(r"args:\n((?:\s+- .*\n)+)", text).group(1)
    items = [re.sub(r"\s+#.*$", "", line.strip()[2:]) for line in block.splitlines()]
    values = {".Values.logFormat": "text"}  # a template value with a choice; others take any value
    return [re.sub(r"\{\{-?\s*(.*?)\s*-?\}\}", lambda m: values.get(m.group(1), "x"), item) for item in items]


@pytest.mark.parametrize("source", [_manifest_args, _chart_args], ids=["manifests", "chart"])
def test_the_shipped_adapter_args_bind_every_address_with_authentication(source):
    argv = source()
    assert argv[0] == "serve" and "--requestheader-ca" in " ".join(argv)
    args = build_parser().parse_args(argv)
    assert not is_loopback(args.host) and unauthenticated_bind(args) is None
