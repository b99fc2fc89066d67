"""Tests marked ``backends`` run on both Keras backends, as parameters of one suite.

Keras picks its backend once per process. In a TensorFlow process each test marked ``backends``
gets two parameters: ``tensorflow`` runs here, and ``jax`` takes its outcome from a pytest of the
test's module under ``KERAS_BACKEND=jax`` (one run per module, started by its first ``jax`` item;
each item reads its own result from that run's report). So each guarantee passes or fails on JAX
under its own name, and a guarantee skipped on JAX fails: it must hold there too. A test marked
``jax_only`` (one of the JAX engine's own) gets the ``jax`` parameter alone. In the JAX process
the marked tests run as they are written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chunkfit.train.backend import keras_backend

PARAM = "keras_backend_under_test"
JAX = "jax"
ON_JAX = keras_backend() == JAX

# module path -> (test name -> (outcome, text) in the JAX run, the run's output)
_runs: dict[Path, tuple[dict[str, tuple[str, str]], str]] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if ON_JAX:
        return
    node = metafunc.definition
    if node.get_closest_marker("jax_only") is not None:
        backends = [JAX]
    elif node.get_closest_marker("backends") is not None:
        backends = ["tensorflow", JAX]
    else:
        return
    metafunc.fixturenames.append(PARAM)
    metafunc.parametrize(PARAM, backends)


def name_on_jax(name: str) -> str:
    """A test's name in the JAX run, where it has no backend parameter.

    Example: ``test_x[zarr-jax]`` -> ``test_x[zarr]``; ``test_y[jax]`` -> ``test_y``.
    """
    base, _, ids = name.partition("[")
    parts = ids.removesuffix("]").split("-")
    parts.remove(JAX)
    return f"{base}[{'-'.join(parts)}]" if parts else base


def _outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """Each test case of a JUnit XML report: its name -> (passed/failure/error/skipped, text)."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, text = child.tag, f"{child.get('message') or ''}\n{child.text or ''}"
        out[case.get("name", "")] = (outcome, text)
    return out


def _run_on_jax(path: Path, root: Path) -> tuple[dict[str, tuple[str, str]], str]:
    """The marked tests of the module at ``path``, run once on JAX."""
    if path not in _runs:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.xml"
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-m",
                    "backends or jax_only",
                    "-p",
                    "no:cacheprovider",
                    "-o",
                    "addopts=-ra",
                    f"--junitxml={report}",
                    str(path),
                ],
                cwd=root,
                env={**os.environ, "KERAS_BACKEND": JAX},
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            outcomes = _outcomes(report) if report.exists() else {}
        _runs[path] = outcomes, proc.stdout[-6000:] + proc.stderr[-3000:]
    return _runs[path]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    callspec = getattr(pyfuncitem, "callspec", None)
    if callspec is None or callspec.params.get(PARAM) != JAX:
        return None
    outcomes, output = _run_on_jax(pyfuncitem.path, pyfuncitem.config.rootpath)
    name = name_on_jax(pyfuncitem.name)
    if name not in outcomes:
        pytest.fail(f"{name} did not run in the JAX pytest of its module:\n{output}", pytrace=False)
    outcome, text = outcomes[name]
    if outcome != "passed":
        pytest.fail(f"on JAX, {outcome}:\n{text}", pytrace=False)
    return True
