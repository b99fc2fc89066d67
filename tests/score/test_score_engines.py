"""Scoring on each engine: scores bit-identical whatever the block size, the same as Keras's
``predict`` and as the other engine's, and the engine that scores when the user chose none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from scoring_support import WINDOW, Trained, all_windows, keras_model
from support import cli_env

import chunkfit
from chunkfit.synth import SynthSpec, synth

pytestmark = pytest.mark.slow

SAMPLES = 6_000


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engines") / "long.zarr"
    synth(path, SynthSpec(samples=SAMPLES, anomalies=200, seed=5))
    return path


def scores(path: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(str(path), mode="r")["scores"][:])


@pytest.mark.backends
@pytest.mark.parametrize("chunk", [500, 2_000])
def test_scores_are_bit_identical_whatever_the_block_size_on_each_engine(
    runs: Trained, store: Path, tmp_path: Path, chunk: int
) -> None:
    chunkfit.predict(runs.run, store, tmp_path / "small.zarr", chunk=chunk, batch_size=256)
    chunkfit.predict(runs.run, store, tmp_path / "whole.zarr", chunk=SAMPLES, batch_size=256)
    np.testing.assert_array_equal(scores(tmp_path / "small.zarr"), scores(tmp_path / "whole.zarr"))


@pytest.mark.backends
def test_scores_are_keras_predict_on_each_engine(
    runs: Trained, store: Path, tmp_path: Path
) -> None:
    chunkfit.predict(runs.run, store, tmp_path / "scores.zarr", chunk=1_000, batch_size=256)
    brute = all_windows(keras_model(runs.run), store, WINDOW, 1)
    np.testing.assert_allclose(
        scores(tmp_path / "scores.zarr")[brute.starts], brute.probs[:, 1], rtol=0, atol=1e-5
    )


def run_python(code: str, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run with ``args`` in a fresh Python, this checkout first on the path, with no
    ``KERAS_BACKEND`` unless ``env`` sets one."""
    full = {k: v for k, v in cli_env().items() if k != "KERAS_BACKEND"} | env
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )


def test_jax_engine_scores_what_tensorflow_scores(
    runs: Trained, store: Path, tmp_path: Path
) -> None:
    chunkfit.predict(runs.run, store, tmp_path / "tf.zarr", batch_size=256)
    code = (
        "import sys, chunkfit; "
        "chunkfit.predict(sys.argv[1], sys.argv[2], sys.argv[3], batch_size=256)"
    )
    done = run_python(code, runs.run, store, tmp_path / "jax.zarr", KERAS_BACKEND="jax")
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(
        scores(tmp_path / "jax.zarr"), scores(tmp_path / "tf.zarr"), rtol=0, atol=1e-5
    )


ENGINE = "from chunkfit.score.scorer import use_scoring_engine; print(use_scoring_engine())"
WITHOUT_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None; "


def test_scoring_takes_tensorflow_when_the_user_chose_none(tmp_path: Path) -> None:
    done = run_python(ENGINE, KERAS_HOME=str(tmp_path))
    assert (done.returncode, done.stdout.strip()) == (0, "tensorflow")


def test_scoring_keeps_the_backend_the_user_chose(tmp_path: Path) -> None:
    done = run_python(ENGINE, KERAS_HOME=str(tmp_path), KERAS_BACKEND="jax")
    assert (done.returncode, done.stdout.strip()) == (0, "jax")


def test_scoring_takes_jax_where_tensorflow_is_not_installed(tmp_path: Path) -> None:
    done = run_python(WITHOUT_TENSORFLOW + ENGINE, KERAS_HOME=str(tmp_path))
    assert (done.returncode, done.stdout.strip()) == (0, "jax")
