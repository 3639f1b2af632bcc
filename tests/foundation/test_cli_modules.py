"""A sub-command module missing from an install is an error at start-up that names it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from foresight import cli


def test_every_listed_command_module_registers_in_this_install():
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)
    assert {"operator", "serve", "warmpool", "train", "replay", "up", "history"} <= commands


def test_a_missing_command_module_fails_start_up_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "nosuchpart.cli"])
    with pytest.raises(cli.MissingCommandModule, match="'nosuchpart.cli'.*module 'nosuchpart' is not installed"):
        cli.build_parser()
    assert cli.main(["--help"]) == 2
    assert "nosuchpart" in capsys.readouterr().err


def test_an_import_error_inside_a_present_module_is_not_mistaken_for_a_missing_part(monkeypatch, tmp_path):
    (tmp_path / "brokenpart").mkdir()
    (tmp_path / "brokenpart" / "__init__.py").write_text("")
    (tmp_path / "brokenpart" / "cli.py").write_text("import not_a_dependency_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "COMMAND_MODULES", ["brokenpart.cli"])
    with pytest.raises(ModuleNotFoundError) as err:
        cli.build_parser()
    assert not isinstance(err.value, cli.MissingCommandModule)
    assert err.value.name == "not_a_dependency_anywhere"


def test_the_command_refuses_to_start_without_kubeoperator():
    """What the image without kubeoperator/ did: ``foresight operator`` said "invalid choice"."""
    code = ("import sys; sys.modules['kubeoperator'] = None  # as if the package were not installed\n"
            "from foresight.cli import main; sys.exit(main(['operator', '--help']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "'kubeoperator.cli'" in r.stderr and "invalid choice" not in r.stderr

