"""The examples of docs/guides/own-loop.md run: Keras, plain JAX and PyTorch loops fed by chunkfit,
each its own file under docs/examples/ (the page includes them), run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import chunkfit

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("own-loop") / "sensor.zarr"
    chunkfit.synth(path, chunkfit.SynthSpec(samples=6000, anomalies=40, seed=2))
    return path


def _run(example: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / example), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_the_guide_includes_every_example() -> None:
    page = (EXAMPLES.parent / "guides" / "own-loop.md").read_text(encoding="utf-8")
    for example in sorted(EXAMPLES.glob("own_loop_*.py")):
        assert f'--8<-- "docs/examples/{example.name}"' in page


@pytest.mark.slow
def test_the_keras_example_trains_per_block_and_on_the_dataset(store: Path) -> None:
    result = _run("own_loop_keras.py", store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("val_accuracy [")


@pytest.mark.slow
def test_the_jax_example_trains_every_epoch_and_saves_its_cursor(
    store: Path, tmp_path: Path
) -> None:
    cursor = tmp_path / "cursor.json"
    result = _run("own_loop_jax.py", store, cursor)
    assert result.returncode == 0, result.stderr
    assert json.loads(cursor.read_text())["epoch"] == 2


@pytest.mark.slow
def test_the_torch_example_trains_with_loader_workers(store: Path) -> None:
    result = _run("own_loop_torch.py", store)
    assert result.returncode == 0, result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["epoch 0", "epoch 1"]
