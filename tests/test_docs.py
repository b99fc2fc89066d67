"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor fails here.

The build is real (a subprocess, as ``make docs`` runs it) into a temporary folder, with this
checkout's chunkfit first on the path, since the reference pages are rendered from its code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

import chunkfit
from chunkfit import cli


def _repo() -> Path:
    """The checkout's root: the nearest folder above this file that holds mkdocs.yml."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "mkdocs.yml").is_file():
            return folder
    raise AssertionError("no mkdocs.yml above tests/")


def _command_names() -> list[str]:
    register = getattr(cli, "_register", None)
    if register is not None:
        register()
    return sorted(typer.main.get_command(cli.app).commands)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = _repo()
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        "mkdocs build --strict failed (pip install -e '.[docs]' if mkdocs is missing):\n"
        + result.stdout
        + result.stderr
    )
    return out


def test_site_builds_strict_with_every_page(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "cli" / "index.html").is_file()


def test_cli_reference_names_every_command(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    names = _command_names()
    assert names
    missing = [name for name in names if f'id="chunkfit-{name}"' not in page]
    assert missing == []


def test_python_reference_names_every_public_name(site: Path) -> None:
    page = (site / "reference" / "python" / "index.html").read_text(encoding="utf-8")
    missing = [name for name in chunkfit.__all__ if f'id="{name.lower()}"' not in page]
    assert missing == []


def test_changelog_page_includes_the_changelog(site: Path) -> None:
    page = (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Unreleased" in page
