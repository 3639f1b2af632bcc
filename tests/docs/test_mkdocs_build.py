"""The manual builds with `mkdocs build --strict`: a broken link, a missing page or a page left
out of the nav fails `make test`."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.docs.conftest import ROOT


def test_the_manual_builds_strict_with_every_page_in_the_nav(tmp_path):
    out = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # the theme's banner is not a build problem
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (out / "index.html").is_file()
    assert (out / "reference" / "cli" / "index.html").is_file()
    # exclude_docs keeps the generator out of the site
    assert not list(out.rglob("gen_reference.py"))
