"""The engine registry (chunkfit.train.engines): one engine per Keras backend, chosen in one place,
and engines that import nothing from each other."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import chunkfit
from chunkfit.config import FitOptions
from chunkfit.errors import UsageError
from chunkfit.train.backend import BACKENDS
from chunkfit.train.engines import ENGINES, engine_for_backend

PACKAGE = Path(chunkfit.__file__).parent
ENGINE_PACKAGES = ("tensorflow", "jax")


def _imports(module: Path) -> set[str]:
    """The chunkfit modules ``module`` imports, resolved to dotted names."""
    package = ".".join(module.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                out.add(".".join([*base, node.module or ""]).rstrip("."))
            elif node.module:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


@pytest.mark.parametrize(
    ("engine", "other"), [(a, b) for a in ENGINE_PACKAGES for b in ENGINE_PACKAGES if a != b]
)
def test_an_engine_imports_nothing_of_another_engine(engine: str, other: str) -> None:
    forbidden = f"chunkfit.train.{other}"
    found = {
        f"{path.name}: {name}"
        for path in (PACKAGE / "train" / engine).glob("*.py")
        for name in _imports(path)
        if name == forbidden or name.startswith(forbidden + ".")
    }
    assert not found


def test_every_backend_has_one_engine() -> None:
    assert tuple(ENGINES) == BACKENDS
    assert all(entry.name == name for name, entry in ENGINES.items())


def test_the_backend_of_this_process_picks_its_engine() -> None:
    import keras

    assert engine_for_backend().name == keras.backend.backend()


def test_only_the_tensorflow_engine_trains_on_several_devices() -> None:
    assert ENGINES["tensorflow"].distributed is not None and ENGINES["jax"].distributed is None


@pytest.mark.parametrize(
    ("engine", "options", "message"),
    [
        ("jax", FitOptions(jit="off"), "--jit off: the JAX engine compiles every step with XLA"),
        (
            "jax",
            FitOptions(compute_threads=2),
            "--compute-threads is for the TensorFlow engine",
        ),
        ("tensorflow", FitOptions(jax_loop="scan"), "--jax-loop scan is for the JAX engine"),
    ],
)
def test_an_engine_refuses_what_it_cannot_do(
    engine: str, options: FitOptions, message: str
) -> None:
    with pytest.raises(UsageError, match=f"^{message}"):
        ENGINES[engine].check(options)


@pytest.mark.parametrize("engine", ENGINE_PACKAGES)
def test_an_engine_accepts_the_default_options(engine: str) -> None:
    ENGINES[engine].check(FitOptions())


def test_choosing_an_engine_loads_neither_tensorflow_nor_jax() -> None:
    code = (
        "import sys; from chunkfit.train.engines import ENGINES; "
        "[e.check(__import__('chunkfit').FitOptions()) for e in ENGINES.values()]; "
        "print('tensorflow' in sys.modules, 'jax' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False False"


def test_the_jax_engine_loads_nothing_of_tensorflow() -> None:
    code = (
        "import sys, chunkfit.train.jax.engine, chunkfit.train.jax.predictor; "
        "print([m for m in sys.modules if m.split('.')[0] == 'tensorflow' "
        "or m.startswith('chunkfit.train.tensorflow')])"
    )
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert proc.stdout.strip() == "[]"
